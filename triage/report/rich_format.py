"""Human output on a terminal: rich panels, the same sections as the plain text."""

from __future__ import annotations

import io
import shutil

from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from triage.model import Finding
from triage.report import ScanResult, facts_used, summary_line, where
from triage.report.runs import grouped, one_line_consequence, runs_per_input, summary_lines, worth_showing
from triage.report.pictures import finding_pictures, rich_text, run_summaries

STYLE = {"error": "red", "warning": "yellow", "info": "cyan"}
OUTCOME_STYLE = {"ready": "green", "failed": "red", "unknown": "yellow"}


def render_rich(result: ScanResult) -> str:
    width = min(shutil.get_terminal_size((100, 24)).columns, 120)
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=width, highlight=False)
    runs = runs_per_input(result)
    for summary, heading, findings in grouped(result):
        if summary is not None and worth_showing(summary):
            head, *rest = summary_lines(summary, runs.get(summary.source, 1))
            style = OUTCOME_STYLE[summary.outcome]
            console.print(Panel(Text("\n".join(line.strip() for line in rest)), title=Text(head, style=f"bold {style}"),
                                title_align="left", border_style=style))
        elif heading:
            console.rule(heading)
        for finding in findings:
            if finding.root is not False:
                console.print(_panel(finding, width - 4))
        for finding in findings:
            if finding.root is False:
                console.print(Text(one_line_consequence(finding), style="dim"))
    for source, pictures in run_summaries(result):
        console.print(Panel(Group(*(rich_text(p, width - 4) for p in pictures)), title=f"{source}: the run's memory and KV cache",
                            title_align="left", border_style="green"))
    console.print(Text(summary_line(result), style="bold"))
    return buffer.getvalue()


def _panel(finding: Finding, width: int) -> Panel:
    style = STYLE[finding.severity]
    body = [Text(where(finding), style="dim")]
    if finding.excerpt:
        body.append(Text.assemble(("vLLM said: ", "bold"), (finding.excerpt, "italic")))
    if finding.text is not None:  # only with --show-text
        body.append(Text.assemble(("Full text: ", "bold"), finding.text))
    if finding.cause:
        body.append(Text.assemble(("Cause: ", "bold"), " ".join(finding.cause)))
    if finding.facts:
        body.append(Text.assemble(("Figures from this run's log: ", "bold"), facts_used(finding)))
    for number, fix in enumerate(finding.fixes, 1):
        body.append(Text.assemble((f" {number}. ", "bold " + style), fix))
    for picture in finding_pictures(finding):
        body += [Text(""), rich_text(picture, width)]
    title = Text.assemble(
        (f"{finding.code} ", f"bold {style}"),
        (finding.name, "bold"),
        (f"  {finding.stage} · {finding.severity}", style),
    )
    return Panel(Group(*body), title=title, title_align="left", subtitle=finding.title, subtitle_align="left", border_style=style)
