"""Human output on a terminal: rich panels, the same sections as the plain text."""

from __future__ import annotations

import io
import shutil

from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from triage.model import Finding
from triage.report import ScanResult, summary_line
from triage.report.sections import Section, finding_sections
from triage.report.runs import grouped, one_line_consequence, run_sections, runs_per_input, worth_showing
from triage.report.text import summary_lines
from triage.report.pictures import finding_pictures, rich_text, run_summaries

STYLE = {"error": "red", "warning": "yellow", "info": "cyan"}
OUTCOME_STYLE = {"ready": "green", "failed": "red", "unknown": "yellow"}
LABELS = {"said": "vLLM said: ", "text": "Full text: ", "cause": "Cause: ", "figures": "Figures from this run's log: "}


def render_rich(result: ScanResult) -> str:
    width = min(shutil.get_terminal_size((100, 24)).columns, 120)
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=width, highlight=False)
    runs = runs_per_input(result)
    for summary, heading, findings in grouped(result):
        if summary is not None and worth_showing(summary):
            head, *rest = summary_lines(run_sections(summary, runs.get(summary.source, 1)))
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
    body = [_section_text(section, style) for section in finding_sections(finding)]
    for picture in finding_pictures(finding):
        body += [Text(""), rich_text(picture, width)]
    title = Text.assemble(
        (f"{finding.code} ", f"bold {style}"),
        (finding.name, "bold"),
        (f"  {finding.stage} · {finding.severity}", style),
    )
    return Panel(Group(*body), title=title, title_align="left", subtitle=finding.title, subtitle_align="left", border_style=style)


def _section_text(section: Section, style: str) -> Text:
    if section.kind == "where":
        return Text(section.text, style="dim")
    if section.kind == "fix":
        return Text.assemble((f" {section.number}. ", "bold " + style), section.text)
    return Text.assemble((LABELS[section.kind], "bold"), (section.text, "italic" if section.kind == "said" else ""))
