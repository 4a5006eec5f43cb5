"""A markdown report to paste into an issue or a pull-request comment (and the GitHub step summary)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from triage.report import TOOL_NAME, ScanResult, ordered, summary_line, where
from triage.report.runs import RunSections, shown_runs
from triage.report.sections import Section, finding_sections
from triage.report.pictures import Picture, finding_pictures, plain_block, run_summaries, terminal_width
from triage.model import Finding

ICON = {"error": "🔴", "warning": "🟠", "info": "🔵"}


def render(result: ScanResult) -> str:
    blocks = [f"## {TOOL_NAME}: {summary_line(result)}"]
    blocks += [run_block(run) for _, run in shown_runs(result)]
    findings = ordered(result.findings)
    if findings:
        blocks.append(table(findings))
        blocks.extend(details(f) for f in findings)
    for source, pictures in run_summaries(result):
        blocks.append(f"### {cell(source)}: the run's memory and KV cache\n\n{picture_block(pictures)}")
    if result.errors:
        blocks.append("**Could not read everything:**\n\n" + "\n".join(f"- {cell(e)}" for e in result.errors))
    return "\n\n".join(blocks) + "\n"


def run_block(run: RunSections) -> str:
    """A run's summary: its outcome as the heading, the first failure and each consequence, then
    a table of the figures with the line that states each."""
    lines = [f"### {cell(run.headline)}"]
    if run.first_failure is not None:
        lines += ["", f"- {cell(run.first_failure)}", *(f"  - {cell(c)}" for c in run.consequences)]
    if run.figures:
        lines += ["", "| fact | value | line |", "|---|---|---|"]
        lines += [f"| {cell(label)} | {cell(text)} | {line or ''} |" for label, text, line in run.figures]
    return "\n".join(lines)


def table(findings: Sequence[Finding]) -> str:
    rows = ["| | code | stage | where | what |", "|---|---|---|---|---|"]
    rows += [
        f"| {ICON[f.severity]} {f.severity} | `{f.code}` | {f.stage} | {cell(where(f))} | {cell(f.title)} |"
        for f in findings
    ]
    return "\n".join(rows)


def details(finding: Finding) -> str:
    lines = [f"### {ICON[finding.severity]} {finding.code} {finding.name}: {cell(finding.title)}"]
    for section in finding_sections(finding):
        lines += _section_lines(section)
    pictures = finding_pictures(finding)
    if pictures:
        lines += ["", picture_block(pictures)]
    return "\n".join(lines)


def _section_lines(section: Section) -> list[str]:
    """A section as markdown lines: a paste shows no full text or figures words (the table has the numbers)."""
    if section.kind == "where":
        return ["", f"at {cell(section.text)}"]
    if section.kind == "said":
        return ["", "vLLM said:", "", fenced(section.text)]
    if section.kind == "cause":
        return ["", "**Cause:** " + section.text]
    if section.kind == "fix":
        return [*(["", "**Fix:**", ""] if section.number == 1 else []), f"{section.number}. {section.text}"]
    return []


def picture_block(pictures: list[Picture]) -> str:
    """The pictures as a code block of plain characters: a pasted report shows them as drawn."""
    return fenced("\n".join(plain_block(pictures, terminal_width())))


def cell(text: str) -> str:
    """One line that cannot break a table row or open an HTML tag."""
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;").replace("`", "'")


def fenced(text: str) -> str:
    """A code block whose fence is longer than any run of backticks inside the text."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"
