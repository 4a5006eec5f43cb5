"""Human output as plain text (piped, NO_COLOR): no rich here, so the default output on a
pipe does not pay for importing it (rich_format.py draws the panels)."""

from __future__ import annotations

from collections.abc import Iterator

from triage.report import ScanResult, by_run, facts_used, summary_line, where
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
    for heading, findings in by_run(result.findings):
        if heading:
            yield f"== {heading} =="
        for finding in findings:
            yield _plain_finding(finding, width)
    for source, pictures in run_summaries(result):
        yield "\n".join([f"{source}: the run's memory and KV cache", *plain_block(pictures, width, "  ")])
    yield summary_line(result)


def _plain_finding(finding: Finding, width: int | None = None) -> str:
    lines = [
        f"{finding.code} {finding.name} [{finding.stage}, {finding.severity}] {finding.title}",
        f"  at {where(finding)}",
    ]
    if finding.excerpt:  # gate assertions quote no line
        lines.append(f"  vLLM said: {finding.excerpt}")
    if finding.text is not None:  # only with --show-text
        lines.append(f"  full text: {finding.text}")
    if finding.cause:
        lines.append("  cause: " + " ".join(finding.cause))
    if finding.facts:
        lines.append(f"  figures from this run's log: {facts_used(finding)}")
    for number, fix in enumerate(finding.fixes, 1):
        lines.append(f"  {number}. {fix}")
    pictures = finding_pictures(finding)
    if pictures:
        lines += ["", *plain_block(pictures, width or terminal_width(), "  ")]
    return "\n".join(lines)


def render_finding(finding: Finding) -> str:
    """One finding as plain text: what a live stream prints as soon as it is complete."""
    return _plain_finding(finding)
