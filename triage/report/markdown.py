"""A markdown report to paste into an issue or a pull-request comment (and the GitHub step summary)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from triage.report import TOOL_NAME, ScanResult, ordered, summary_line, where
from triage.report.pictures import Picture, finding_pictures, plain_block, run_summaries, terminal_width
from triage.model import Finding

ICON = {"error": "🔴", "warning": "🟠", "info": "🔵"}


def render(result: ScanResult) -> str:
    blocks = [f"## {TOOL_NAME}: {summary_line(result)}"]
    findings = ordered(result.findings)
    if findings:
        blocks.append(table(findings))
        blocks.extend(details(f) for f in findings)
    for source, pictures in run_summaries(result):
        blocks.append(f"### {cell(source)}: the run's memory and KV cache\n\n{picture_block(pictures)}")
    if result.errors:
        blocks.append("**Could not read everything:**\n\n" + "\n".join(f"- {cell(e)}" for e in result.errors))
    return "\n\n".join(blocks) + "\n"


def table(findings: Sequence[Finding]) -> str:
    rows = ["| | code | stage | where | what |", "|---|---|---|---|---|"]
    rows += [
        f"| {ICON[f.severity]} {f.severity} | `{f.code}` | {f.stage} | {cell(where(f))} | {cell(f.title)} |"
        for f in findings
    ]
    return "\n".join(rows)


def details(finding: Finding) -> str:
    lines = [f"### {ICON[finding.severity]} {finding.code} {finding.name}: {cell(finding.title)}", "", f"at {cell(where(finding))}"]
    if finding.excerpt:
        lines += ["", "vLLM said:", "", fenced(finding.excerpt)]
    if finding.cause:
        lines += ["", "**Cause:** " + " ".join(finding.cause)]
    if finding.fixes:
        lines += ["", "**Fix:**", ""] + [f"{number}. {fix}" for number, fix in enumerate(finding.fixes, 1)]
    pictures = finding_pictures(finding)
    if pictures:
        lines += ["", picture_block(pictures)]
    return "\n".join(lines)


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
