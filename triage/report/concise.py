"""One line per finding, the way compilers and linters write them, for editors' problem lists.

    path:line: severity: CODE title (name=value, ...)

path is relative to the working directory (as GitHub annotations and SARIF have it), line is
at least 1, severity is error, warning or info, and the numbers are the finding's own figures
(what vLLM printed; a figure its rule totals over the lines the finding stands for, as V1's
preemptions per interval, as that total) followed by those it took from elsewhere in its run,
as plain numbers a flag takes (no thousands separators), then how many lines it stands for.
The last line is the one-line summary, which starts with the tool's name so that no problem
matcher reads it as a finding. This shape is stable:
README.md ("In your editor") has the VS Code problem matcher and tests/report/test_concise.py
checks that its regex reads every line.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from triage.model import Finding, RunSummary
from triage.report import TOOL_NAME, ScanResult, ordered, relative_path, summary_line
from triage.report.runs import shown_runs


def render(result: ScanResult) -> str:
    return "".join(pieces(result))


def pieces(result: ScanResult) -> Iterator[str]:
    rules = {rule.code: rule for rule in result.rules}
    for finding in ordered(result.findings):
        yield line(finding, rules.get(finding.code)) + "\n"
    for summary, _ in shown_runs(result):  # as the other formats: a paste of request errors alone has none
        yield run_line(summary) + "\n"
    yield f"{TOOL_NAME}: {summary_line(result)}\n"


def line(finding: Finding, rule: Any = None) -> str:
    """rule: the finding's, for the figures it totals over the finding's lines (None: a gate
    assertion's or a check's, which totals none)."""
    text = f"{relative_path(finding.source)}:{max(finding.line, 1)}: {finding.severity}: {finding.code} {one_line(finding.title)}"
    numbers = key_numbers(finding, rule)
    if finding.count > 1:
        numbers.append(f"{finding.count} lines")
    return f"{text} ({', '.join(numbers)})" if numbers else text


def run_line(run: RunSummary) -> str:
    """path:first_line: info: run N OUTCOME[, where it failed first], vLLM version, model, where the
    window came from (figures): what the deployment landed on, at the line the run starts."""
    facts, failure = run.facts, run.first_failure
    words = [f"run {run.number} {run.outcome}"]
    if failure is not None:
        words.append(f"first failure at line {failure.error_line} in {failure.process or 'the main process'}")
    if facts.get("version"):
        words.append(f"vLLM {facts['version']}")
    if facts.get("model"):
        words.append(str(facts["model"]))
    if facts.get("window_source"):
        words.append(f"window: {facts['window_source']}")
    figures = [
        f"{name}={plain_number(facts[name])}" for name in RUN_FIGURES
        if is_number(facts.get(name)) and not (name in PARALLEL_SIZES and facts[name] == 1)
    ]
    text = f"{relative_path(run.source)}:{max(run.first_line, 1)}: info: {one_line(', '.join(words))}"
    return f"{text} ({', '.join(figures)})" if figures else text


# The figures of a run line, in this order, those its own lines stated; parallel sizes above 1 only.
PARALLEL_SIZES = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
RUN_FIGURES = (
    "served_max_model_len", "kv_tokens", "kv_gib_available", "concurrency", "max_num_seqs", "gpu_memory_utilization",
    *PARALLEL_SIZES,
)


def key_numbers(finding: Finding, rule: Any = None) -> list[str]:
    """name=value for each number the finding holds: its own, then its run's facts. A field
    its rule totals is one line's (the first): the numbers over all its lines stand instead."""
    totalled, over_lines = totalled_fields(rule)
    own = {name: value for name, value in finding.fields.items() if name not in totalled}
    own.update((name, finding.derived[name]) for name in over_lines if name in finding.derived)
    figures = {**own, **{name: value for name, value in finding.facts.items() if name not in own}}
    return [f"{name}={plain_number(value)}" for name, value in figures.items() if is_number(value)]


def totalled_fields(rule: Any) -> tuple[set[str], list[str]]:
    """The fields a rule totals over a finding's lines, and the names that say the totals: its
    derived numbers that read them (VT301's preemptions), else the totals themselves."""
    totals = getattr(rule, "totals", None)
    if not totals:
        return set(), []
    reading = set(totals)
    over_lines = []
    for name, expression in rule.derived.items():  # in order: a number may read one derived before it
        if expression.names & reading:
            over_lines.append(name)
            reading.add(name)
    return {field for _, field in totals.values()}, over_lines or list(totals)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def plain_number(value: float) -> str:
    """65536, 5.31, 0.9: what a flag takes (no separators, at most two decimals)."""
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return str(value)


def one_line(text: str) -> str:
    """A title from a user's rule file could hold a newline: it would start a false finding."""
    return " ".join(text.split())
