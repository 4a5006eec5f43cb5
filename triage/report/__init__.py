"""Formatters: each turns a scan result into text. They never match or compute.

The registry is the table REPORTERS: a format's name, the module and functions that turn
a ScanResult into text, its --output suffixes and whether it prints live. Add a format by
adding a module and one row there.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from triage.rules.expr import PLACEHOLDER
from triage.diagnose.store import Place, places_of, sorted_findings, take
from triage.model import SEVERITIES, Finding, ScanResult  # ScanResult: imported from here by the formats

TOOL_NAME = "vllm-triage"


def ordered(findings: Sequence[Finding]) -> Sequence[Finding]:
    """Most severe first, then by where they are (a FindingStore's are read as they are used)."""
    return sorted_findings(findings, report_order)


def report_order(place: Place) -> tuple:
    return -place.severity, place.source, place.line


def checks(result: ScanResult) -> list[Any]:
    """The rules that can yield findings (fact rules only inform them), in code order."""
    return sorted((r for r in result.rules if getattr(r, "kind", "finding") != "fact"), key=lambda r: r.code)


def severity_counts(findings: Sequence[Finding]) -> Counter:
    """How many findings of each severity (a FindingStore's without reading them)."""
    return Counter(SEVERITIES[place.severity] for place in places_of(findings))


def summary_line(result: ScanResult) -> str:
    counts = severity_counts(result.findings)
    if not result.findings:
        head = "no findings"
    else:
        parts = [f"{counts[s]} {s}{'s' if counts[s] != 1 and s != 'info' else ''}" for s in reversed(SEVERITIES) if counts[s]]
        total = len(result.findings)
        head = f"{total} finding{'s' if total != 1 else ''} ({', '.join(parts)})"
    inputs = len(result.inputs)
    return f"{head} in {inputs} input{'s' if inputs != 1 else ''}"


def where(finding: Finding) -> str:
    text = f"{finding.source}:{finding.line}"
    if finding.count > 1 and finding.last_line:
        text += f" ({lines_said(finding)}, last at line {finding.last_line})"
    if finding.also_at:  # the same failure printed again (a client's traceback): not another one
        lines = ", ".join(map(str, finding.also_at))
        text += f" (printed again at line{'s' if len(finding.also_at) > 1 else ''} {lines})"
    if finding.process:
        text += f" [{finding.process}]"
    if finding.root:
        text += " (failed first: the root)"
    elif finding.consequence_of:
        text += f" (consequence of {finding.consequence_of})"
    return text


def lines_said(finding: Finding) -> str:
    """How many log lines a finding stands for, said as lines: 'x3' next to "preempted" read as
    three preemptions, which the finding counts apart."""
    return f"{finding.count:,} line{'s' if finding.count != 1 else ''}"


def by_run(findings: Sequence[Finding]) -> list[tuple[str | None, Sequence[Finding]]]:
    """Findings grouped by startup run, each group ordered; one group without a heading
    when no input holds more than one run."""
    places = places_of(findings)
    groups: dict[tuple[str, int], list[int]] = {}
    for index, place in enumerate(places):
        groups.setdefault((place.source, place.run), []).append(index)
    runs = sorted(groups)
    if len(runs) == len({source for source, _ in runs}):
        return [(None, ordered(findings))]
    return [
        (f"{source}: run {run}", take(findings, sorted(groups[source, run], key=lambda i: report_order(places[i]))))
        for source, run in runs
    ]


def facts_used(finding: Finding) -> str:
    """The figures a finding took from elsewhere in its run, in words."""
    from triage.report.words import fact_words

    return fact_words(finding.facts)


def relative_path(source: str) -> str:
    """The input as a path relative to the working directory, with forward slashes
    (what GitHub annotations and SARIF locations resolve against the checkout)."""
    if source.startswith("<"):  # <stdin>
        return source
    path = Path(source)
    if path.is_absolute():
        try:
            path = path.relative_to(Path.cwd())
        except ValueError:
            return path.as_posix()
    return Path(os.path.normpath(path)).as_posix()


def fingerprint(finding: Finding) -> str:
    """Stable across log rotation and re-runs: rule, input and numbers, never the line."""
    numbers = json.dumps(finding.fields, sort_keys=True, default=str, separators=(",", ":"))
    key = "\0".join((finding.code, relative_path(finding.source), numbers))
    import hashlib  # SARIF only: loading OpenSSL would weigh on every start-up

    return hashlib.sha256(key.encode()).hexdigest()[:32]


def help_text(rule: Any) -> str:
    """What a rule means, why it happens and how to fix it, as plain text (SARIF help)."""
    parts = [rule.description or rule.title]
    causes = [_placeholders(step.text) for step in rule.cause]
    if causes:
        parts.append("Why: " + " ".join(causes))
    fixes = [_placeholders(step.text) for step in rule.fixes]
    if fixes:
        parts.append("Fixes (each finding fills in its <numbers>):\n" + "\n".join(f"- {fix}" for fix in fixes))
    return "\n\n".join(parts)


def _placeholders(template: str) -> str:
    return PLACEHOLDER.sub(lambda m: f"<{m['name']}>", template)


class Reporter(NamedTuple):
    """One output format: the one table the CLI's --format choices, the --output suffixes and
    live printing are all read from."""

    name: str
    module: str  # in triage.report, imported only when used: rich and xml cost start-up
    function: str  # ScanResult -> the whole report
    pieces: str | None = None  # ScanResult -> the report in pieces, where it can be written a finding at a time
    suffixes: tuple[str, ...] = ()  # --output FILE with --format auto picks this format by FILE's suffix
    live: bool = False  # a finding can be printed as soon as it is found (a stream still running)


REPORTERS = {
    reporter.name: reporter
    for reporter in (
        Reporter("text", "text", "render_plain", pieces="plain_pieces", live=True),
        Reporter("rich", "rich_format", "render_rich", live=True),
        Reporter("json", "json_format", "render", pieces="pieces", suffixes=(".json",)),
        Reporter("jsonl", "jsonl", "render", pieces="pieces", suffixes=(".jsonl",), live=True),
        Reporter("sarif", "sarif", "render", suffixes=(".sarif",)),
        Reporter("github", "github", "render"),
        Reporter("junit", "junit", "render", suffixes=(".xml",)),
        Reporter("markdown", "markdown", "render", suffixes=(".md",)),
        Reporter("html", "html", "render", suffixes=(".html", ".htm")),
        Reporter("concise", "concise", "render", pieces="pieces"),
    )
}


def _function(module: str, function: str) -> Callable[[ScanResult], Any]:
    import importlib

    return getattr(importlib.import_module(f"triage.report.{module}"), function)


def render(result: ScanResult, format_name: str) -> str:
    reporter = REPORTERS[format_name]
    return _function(reporter.module, reporter.function)(result)


def write(result: ScanResult, format_name: str, out: Callable[[str], Any]) -> None:
    """The text render() gives, passed to out() in pieces where the format allows: a big
    report is never held whole."""
    reporter = REPORTERS[format_name]
    if reporter.pieces is None:
        out(render(result, format_name))
        return
    for piece in _function(reporter.module, reporter.pieces)(result):
        out(piece)


def format_names() -> list[str]:
    return list(REPORTERS)


def format_for_suffix(suffix: str) -> str | None:
    """The format an --output file's suffix names (case aside), or None."""
    return next((r.name for r in REPORTERS.values() if suffix.lower() in r.suffixes), None)


def live_formats() -> list[str]:
    return [r.name for r in REPORTERS.values() if r.live]
