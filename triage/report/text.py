"""Human output as plain text (piped, NO_COLOR): no rich here, so the default output on a
pipe does not pay for importing it (rich_format.py draws the panels)."""

from __future__ import annotations

import re
import shutil
import sys
import textwrap
from collections.abc import Iterator

from triage.report import ScanResult, summary_line
from triage.report.sections import laid_out
from triage.report.runs import RunSections, grouped, one_line_consequence, run_sections, runs_per_input, worth_showing
from triage.report.pictures import finding_pictures, plain_block, run_summaries, terminal_width
from triage.model import Finding

def render_plain(result: ScanResult) -> str:
    return "".join(plain_pieces(result))


def plain_pieces(result: ScanResult) -> Iterator[str]:
    """The plain report a block at a time (blank lines between blocks)."""
    separator = ""
    for block in _plain_blocks(result):
        yield separator + block
        separator = "\n\n"
    yield "\n"


def _plain_blocks(result: ScanResult) -> Iterator[str]:
    width = terminal_width()
    runs = runs_per_input(result)
    for summary, heading, findings in grouped(result):
        if summary is not None and worth_showing(summary):
            yield "\n".join(summary_lines(run_sections(summary, runs.get(summary.source, 1))))
        elif heading:
            yield f"== {heading} =="
        consequences = [one_line_consequence(f) for f in findings if f.root is False]
        for finding in findings:
            if finding.root is not False:
                yield _plain_finding(finding, width)
        if consequences:
            yield "\n".join(consequences)
    for source, pictures in run_summaries(result):
        yield "\n".join([f"{source}: the run's memory and KV cache", *plain_block(pictures, width, "  ")])
    yield summary_line(result)


def summary_lines(run: RunSections) -> list[str]:
    """A run's plain-text block: headline, figures, first failure, consequences."""
    lines = [run.headline]
    lines += [f"  {label}: {text} (line {line})" if line else f"  {label}: {text}" for label, text, line in run.figures]
    if run.first_failure is not None:
        lines.append("  " + run.first_failure)
        lines += ["    " + consequence for consequence in run.consequences]
    return lines


PLAIN_LAYOUT = {
    "where": "  at {text}",
    "said": "  vLLM said: {text}",
    "text": "  full text: {text}",
    "cause": "  cause: {text}",
    "figures": "  figures from this run's log: {text}",
    "fix": "  {number}. {text}",
}


def _plain_finding(finding: Finding, width: int | None = None) -> str:
    lines = [f"{finding.code} {finding.name} [{finding.stage}, {finding.severity}] {finding.title}"]
    lines += laid_out(finding, PLAIN_LAYOUT)
    wrap_at = wrap_width()
    if wrap_at:
        lines = [wrapped for line in lines for wrapped in hanging(line, wrap_at)]
    pictures = finding_pictures(finding)
    if pictures:
        lines += ["", *plain_block(pictures, width or terminal_width(), "  ")]
    return "\n".join(lines)


# a line's indent, and a fix's number ("  12. "): what a wrapped line continues under
LEAD = re.compile(r"( *)(\d+\. )?")


def wrap_width() -> int | None:
    """The terminal's width when stdout is one: the terminal would otherwise break long
    lines mid-word at its edge. Piped or redirected, a line stays whole (for grep)."""
    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size((100, 24)).columns


def hanging(line: str, width: int) -> list[str]:
    """One line wrapped at spaces (never inside a flag or a number) with a hanging indent."""
    if len(line) <= width:
        return [line]
    lead = LEAD.match(line)
    spaces, number = (lead.group(1), lead.group(2)) if lead else ("", None)
    indent = " " * (len(spaces) + (len(number) if number else 2))  # a fix continues under its text
    return textwrap.wrap(line, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


def render_finding(finding: Finding) -> str:
    """One finding as plain text: what a live stream prints as soon as it is complete."""
    return _plain_finding(finding)
