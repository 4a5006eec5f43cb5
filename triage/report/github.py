"""GitHub Actions workflow commands: one annotation per finding, most important first, then one
per startup run (its summary, at its ready line or its root error's line).

Escaping follows the Actions toolkit (@actions/core): the message escapes %, CR and LF;
property values (file, title) additionally escape ':' and ','. The markdown summary for
$GITHUB_STEP_SUMMARY is the markdown format; the CLI appends it.
"""

from __future__ import annotations

from triage.report import TOOL_NAME, ScanResult, lines_said, ordered, relative_path, summary_line
from triage.report.runs import RunSections, shown_runs
from triage.report.sections import laid_out
from triage.model import Finding, RunSummary

COMMAND = {"error": "error", "warning": "warning", "info": "notice"}
MESSAGE_LAYOUT = {"cause": "{text}", "fix": "{number}. {text}"}


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render(result: ScanResult) -> str:
    findings = ordered(result.findings)
    annotated = {(f.source, f.line) for f in findings}
    lines = [annotation(f) for f in findings]
    lines += [run_annotation(summary, run, annotated) for summary, run in shown_runs(result)]
    lines.append(f"{TOOL_NAME}: {summary_line(result)}")
    return "\n".join(lines) + "\n"


def annotation(finding: Finding) -> str:
    return command(COMMAND[finding.severity], finding.source, finding.line, f"{TOOL_NAME} ({finding.code})", message(finding))


def run_annotation(summary: RunSummary, run: RunSections, annotated: set[tuple[str, int]]) -> str:
    """A run's summary at its ready line or its root error's line: an error there when the run
    failed and no finding already marks that line (so the root is always annotated), else a notice."""
    line = summary.outcome_line or summary.first_line
    failed_unmarked = summary.outcome == "failed" and (summary.source, line) not in annotated
    text = [run.headline, *(f"{label}: {value}" + (f" (line {at})" if at else "") for label, value, at in run.figures)]
    if run.first_failure is not None:
        text += [run.first_failure, *run.consequences]
    title = f"{TOOL_NAME} (run {summary.number}: {summary.outcome})"
    return command("error" if failed_unmarked else "notice", summary.source, line, title, "\n".join(text))


def command(name: str, source: str, line: int, title: str, text: str) -> str:
    properties = {"file": relative_path(source), "line": str(max(line, 1)), "title": title}
    rendered = ",".join(f"{key}={escape_property(value)}" for key, value in properties.items())
    return f"::{name} {rendered}::{escape_data(text)}"


def message(finding: Finding) -> str:
    lines = [f"{finding.name}: {finding.title}"]
    if finding.count > 1:
        lines[0] += f" ({lines_said(finding)})"
    return "\n".join(lines + laid_out(finding, MESSAGE_LAYOUT))
