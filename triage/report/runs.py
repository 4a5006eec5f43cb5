"""A run's summary in words: what every format shows of a startup run (it computes nothing:
the figures and the outcome are the run's RunSummary, worked out by the diagnosis)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from triage.model import Finding, ProcessFailure, RunSummary, ScanResult
from triage.rules.expr import format_value

# (label, the facts it shows, how they read): in the order an operator asks for them.
FIGURES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("vLLM", ("version",), "{version}"),
    ("model", ("model",), "{model}"),
    ("served window", ("served_max_model_len", "window_source"), "{served_max_model_len} tokens (from {window_source})"),
    ("served window", ("served_max_model_len",), "{served_max_model_len} tokens"),
    ("KV cache", ("kv_gib_available", "kv_tokens"), "{kv_gib_available} GiB per GPU, {kv_tokens} tokens"),
    ("KV cache", ("kv_tokens",), "{kv_tokens} tokens"),
    ("KV cache", ("kv_gib_available",), "{kv_gib_available} GiB per GPU"),
    ("concurrency", ("concurrency", "concurrency_tokens"), "{concurrency}x requests of {concurrency_tokens} tokens at once"),
    ("blocks", ("gpu_blocks", "cpu_blocks"), "{gpu_blocks} GPU, {cpu_blocks} CPU"),
    ("blocks", ("gpu_blocks",), "{gpu_blocks} GPU"),
    ("weights", ("weights_gib",), "{weights_gib} GiB per GPU"),
    ("parallel", ("tensor_parallel_size",), "tensor {tensor_parallel_size}"),
    ("pipeline parallel", ("pipeline_parallel_size",), "{pipeline_parallel_size}"),
    ("data parallel", ("data_parallel_size",), "{data_parallel_size}"),
    ("dtype", ("dtype",), "{dtype}"),
    ("kv_cache_dtype", ("kv_cache_dtype",), "{kv_cache_dtype}"),
    ("gpu_memory_utilization", ("gpu_memory_utilization",), "{gpu_memory_utilization}"),
    ("block size", ("block_size",), "{block_size}"),
    ("max_num_seqs", ("max_num_seqs",), "{max_num_seqs}"),
    ("max_num_batched_tokens", ("max_num_batched_tokens",), "{max_num_batched_tokens}"),
    ("GPU", ("gpu_name", "total_gib"), "{gpu_name}, {total_gib} GiB"),
    ("GPU", ("gpu_name",), "{gpu_name}"),
    ("GPU memory", ("total_gib",), "{total_gib} GiB"),
)
HIDDEN_AT_ONE = frozenset({"data parallel", "pipeline parallel"})  # a size of 1 says nothing: not shown


def summaries(result: ScanResult) -> list[RunSummary]:
    """Every run of every input that said anything, in input order."""
    found = []
    for name in result.inputs:
        for run in result.runs.get(name, ()):
            if run.summary is not None:
                found.append(run.summary)
    return found


class Figure(NamedTuple):
    label: str
    text: str  # the value as read ("5 GiB per GPU, 40,960 tokens")
    line: int  # the line that states it; 0 when none is known


@dataclass(frozen=True, slots=True)
class RunSections:
    """What every format shows of a run, in words; each format lays it out."""

    where: str  # "fixtures/x.log run 2 (lines 40-96)"
    outcome: str  # "failed at startup, at line 88"
    figures: list[Figure]
    first_failure: str | None  # its process, first line and root error
    consequences: list[str]  # one for each other process

    @property
    def headline(self) -> str:
        return f"{self.where}: {self.outcome}"


def run_sections(summary: RunSummary, runs_in_input: int = 1) -> RunSections:
    first = summary.first_failure
    return RunSections(
        where=run_where(summary, runs_in_input),
        outcome=outcome_words(summary),
        figures=list(figures(summary)),
        first_failure=failure_line(first) if first is not None else None,
        consequences=[consequence_line(c) for c in summary.consequences] if first is not None else [],
    )


def figures(summary: RunSummary) -> Iterator[Figure]:
    """Each label once, the fullest form the run's facts allow."""
    return (figure for figure, _ in stated_figures(summary))


def stated_figures(summary: RunSummary) -> Iterator[tuple[Figure, tuple[str, ...]]]:
    """Each figure with the facts it shows; each fact in one figure (the GPU's memory shown with
    its name is not shown again on its own)."""
    facts, shown, used = summary.facts, set(), set[str]()
    for label, names, template in FIGURES:
        if label in shown or used.issuperset(names) or not all(facts.get(name) not in (None, "") for name in names):
            continue
        if len(names) == 1 and facts[names[0]] == 1 and label in HIDDEN_AT_ONE:
            continue
        shown.add(label)
        used.update(names)
        text = template.format(**{name: format_value(facts[name]) for name in names})
        yield Figure(label, text, summary.fact_lines.get(names[0], 0)), names


def run_where(summary: RunSummary, runs_in_input: int = 1) -> str:
    """'fixtures/x.log run 2 (lines 40-96)': the run number only where an input has several."""
    which = f" run {summary.number}" if runs_in_input > 1 or summary.number > 1 else ""
    return f"{summary.source}{which} (lines {summary.first_line}-{summary.last_line})"


def outcome_words(summary: RunSummary) -> str:
    """'failed at startup, at line 88', 'ready at line 40; then failed at runtime, at line 97'."""
    first = summary.first_failure
    if summary.outcome == "failed":
        return f"failed at startup, at line {summary.outcome_line}"
    if summary.outcome == "ready":
        died = f"; then failed at runtime, at line {first.error_line}" if first else ""
        return f"ready at line {summary.outcome_line}{died}"
    return "outcome unknown (no ready line and no failure: the log may end before either)"


def process_label(process: str | None) -> str:
    return process or "the main process (untagged lines)"


def failure_line(failure: ProcessFailure) -> str:
    """The first failure: its process, where its output starts, its root error."""
    return (
        f"first to fail: {process_label(failure.process)} at line {failure.line}; "
        f"its error at line {failure.error_line}: {failure.error}"
    )


def consequence_line(consequence: ProcessFailure) -> str:
    """One line for each other process."""
    said = "the same error" if consequence.same_error else consequence.error
    return f"then {process_label(consequence.process)} at line {consequence.line}: {said}"


def worth_showing(summary: RunSummary) -> bool:
    """A run that states a figure or how it ended: a paste of request errors alone has no summary to show."""
    return summary.outcome != "unknown" or any(True for _ in figures(summary))


def shown_runs(result: ScanResult) -> list[tuple[RunSummary, RunSections]]:
    """Each run worth a summary, in input order, with its sections."""
    counts = runs_per_input(result)
    return [(summary, run_sections(summary, counts[summary.source])) for summary in summaries(result) if worth_showing(summary)]


def runs_per_input(result: ScanResult) -> dict[str, int]:
    return {name: sum(1 for run in result.runs.get(name, ()) if run.summary is not None) for name in result.inputs}


def failure_dict(failure: ProcessFailure | None) -> dict[str, Any] | None:
    if failure is None:
        return None
    return {
        "process": failure.process, "line": failure.line, "error_line": failure.error_line, "error": failure.error,
        "time": failure.time, "stage": failure.stage, "same_error": failure.same_error, "died": failure.died,
    }


def run_dict(summary: RunSummary) -> dict[str, Any]:
    """A run as the JSON report documents it (README, "JSON output")."""
    return {
        "input": summary.source,
        "run": summary.number,
        "first_line": summary.first_line,
        "last_line": summary.last_line,
        "outcome": summary.outcome,
        "outcome_line": summary.outcome_line,
        "facts": {name: {"value": value, "line": summary.fact_lines.get(name)} for name, value in summary.facts.items()},
        "first_failure": failure_dict(summary.first_failure),
        "consequences": [failure_dict(c) for c in summary.consequences],
    }


def grouped(result: ScanResult) -> list[tuple[RunSummary | None, str | None, list[Finding]]]:
    """Each run's summary with its findings (most severe first); findings of no summarised run
    come last, headed by their run when an input holds several."""
    from triage.report import by_run, places_of, report_order

    places = places_of(result.findings)
    by_place: dict[tuple[str, int], list[int]] = {}
    for index, place in enumerate(places):
        by_place.setdefault((place.source, place.run), []).append(index)
    groups: list[tuple[RunSummary | None, str | None, list[Finding]]] = []
    for summary in summaries(result):
        indices = sorted(by_place.pop((summary.source, summary.number), []), key=lambda i: report_order(places[i]))
        groups.append((summary, None, [result.findings[i] for i in indices]))
    rest = [i for indices in by_place.values() for i in indices]
    if rest:
        for heading, findings in by_run([result.findings[i] for i in rest]):
            groups.append((None, heading, list(findings)))
    return groups


def one_line_consequence(finding: Finding) -> str:
    """A finding that only repeats the first failure (another rank, a re-raised copy)."""
    what = "the same error" if finding.consequence_of and finding.consequence_of.startswith(f"{finding.code} ") \
        else finding.title
    process = f" [{finding.process}]" if finding.process else ""
    return f"{finding.code} at {finding.source}:{finding.line}{process}: {what} (a consequence of {finding.consequence_of})"
