"""One self-contained HTML file to share: each run's summary first, then every finding with its cause and
fixes, and the pictures as inline SVG.

Nothing in it loads anything: no scripts, fonts, images or style sheets from elsewhere (the
style is inline, the pictures are SVG elements), so it opens from a CI artifact, a mail or
a disk the same way. It reads on a 390 px phone (one column; bars take the width left by
their labels) and prints (no backgrounds lost, a finding is not split across pages). Like
every format it prints what the scan result holds: --redact masks it before, and a log
line's full text (which may quote a prompt) is there only with --show-text.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape

from triage import __version__
from triage.model import Finding
from triage.report import TOOL_NAME, ScanResult, by_run, summary_line
from triage.report import runs
from triage.report.sections import laid_out
from triage.report.pictures import PARTS, Picture, Row, finding_pictures, summary_pictures

SVG_WIDTH = 1000  # viewBox units of a bar; the bar is drawn to whatever width the page gives it
SVG_HEIGHT = 20
MIN_SEGMENT = 12  # viewBox units: a segment that is not empty never vanishes (a 1-token overflow)
HEADROOM = 2 * MIN_SEGMENT  # the scale's end stops short of the edge: room for such a tail after it

HTML_LAYOUT = {  # the fixes are one numbered list
    "where": '<p class="where">at {text}</p>',
    "said": '<p class="muted">vLLM said:</p><div class="said">{text}</div>',
    "text": '<p class="muted">Full text:</p><div class="said">{text}</div>',
    "cause": '<p class="cause"><strong>Cause:</strong> {text}</p>',
    "figures": '<p class="muted">Figures from this run\'s log: {text}</p>',
}

STYLE = """
:root { --fg: #1d1d1f; --muted: #5a5a60; --line: #d8d8dc; --error: #c62828; --warning: #b26a00; --info: #1565c0; }
* { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body { margin: 0; color: var(--fg); background: #fff; font: 16px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; }
main { max-width: 60rem; margin: 0 auto; padding: 1rem; }
h1 { font-size: 1.4rem; margin: 0 0 .25rem; }
h2 { font-size: 1.15rem; margin: 1.5rem 0 .5rem; border-bottom: 1px solid var(--line); padding-bottom: .25rem; }
h3 { font-size: 1.02rem; margin: 0 0 .35rem; }
p, ol, ul, dl { margin: .35rem 0; }
code, .said { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: .88em; }
p, li, dd, h1, h2, h3, figcaption, .said, .where { overflow-wrap: anywhere; }
dt { overflow-wrap: break-word; }
.summary { font-weight: 600; }
.muted, .where { color: var(--muted); font-size: .92rem; }
article { border: 1px solid var(--line); border-left: 6px solid var(--line); border-radius: 6px;
  padding: .75rem .9rem; margin: .75rem 0; break-inside: avoid; page-break-inside: avoid; }
article.error { border-left-color: var(--error); }
article.warning { border-left-color: var(--warning); }
article.info { border-left-color: var(--info); }
article.run.ready { border-left-color: #4c9a4c; }
article.run.failed { border-left-color: var(--error); }
.badge { display: inline-block; font-size: .78rem; font-weight: 600; padding: 0 .4rem; border-radius: 4px;
  color: #fff; vertical-align: middle; }
.badge.error { background: var(--error); } .badge.warning { background: var(--warning); }
.badge.info { background: var(--info); }
.said { white-space: pre-wrap; background: #f5f5f7; border-radius: 4px; padding: .4rem .55rem; margin: .4rem 0; }
ol.fixes { padding-left: 1.4rem; }
ol.fixes li { margin: .2rem 0; }
dl.facts { display: grid; grid-template-columns: fit-content(50%) minmax(0, 1fr); gap: .1rem .8rem; font-size: .92rem; }
dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; }
figure.picture { margin: .8rem 0 .2rem; padding: .6rem; border: 1px solid var(--line); border-radius: 6px; }
figure.picture figcaption { font-weight: 600; font-size: .95rem; margin-bottom: .4rem; }
.rows { display: grid; grid-template-columns: max-content minmax(0, 1fr) max-content; gap: .3rem .5rem;
  align-items: center; font-size: .85rem; }
.rows .label, .rows .value { white-space: nowrap; font-variant-numeric: tabular-nums; }
.rows .value { text-align: right; }
.rows .tags { font-weight: 600; }
svg.bar { display: block; width: 100%; height: 1.1rem; background: #f2f2f4; border-radius: 2px; }
ul.legend { list-style: none; padding: 0; margin: .5rem 0 0; font-size: .85rem; display: flex; flex-wrap: wrap; gap: .15rem 1rem; }
ul.legend li { display: flex; align-items: baseline; gap: .35rem; min-width: 0; overflow-wrap: anywhere; }
svg.key { flex: none; width: .8rem; height: .8rem; position: relative; top: .1rem; }
.notes { font-size: .85rem; color: var(--muted); margin: .35rem 0 0; padding-left: 1.1rem; }
@media (max-width: 480px) {
  main { padding: .6rem; }
  .rows { grid-template-columns: minmax(0, 1fr) max-content; }
  .rows .label { grid-column: 1 / -1; margin-bottom: -.25rem; white-space: normal; }
}
@media print {
  body { font-size: 10.5pt; }
  main { max-width: none; padding: 0; }
  * { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  figure.picture, article { break-inside: avoid; page-break-inside: avoid; }
}
"""


def render(result: ScanResult) -> str:
    title = f"{TOOL_NAME}: {summary_line(result)}"
    body = [
        "<header>",
        f"<h1>{TOOL_NAME} report</h1>",
        f'<p class="summary" id="summary">{escape(summary_line(result))}</p>',
        f'<p class="muted">inputs: {escape(", ".join(result.inputs)) or "none"}</p>',
        "</header>",
        *_runs(result),
        *_findings(result),
        *_errors(result),
        f'<footer class="muted"><p>{TOOL_NAME} {escape(__version__)}</p></footer>',
    ]
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title>",
        f"<style>{STYLE}</style>",
        "</head>",
        "<body>",
        "<main>",
        *body,
        "</main>",
        "</body>",
        "</html>",
        "",
    ])


def _runs(result: ScanResult) -> Iterable[str]:
    shown = runs.shown_runs(result)
    if not shown:
        return
    yield '<section id="runs"><h2>Runs</h2>'
    for summary, run in shown:
        yield f'<article class="run {escape(summary.outcome)}" data-source="{escape(summary.source)}" data-run="{summary.number}">'
        yield f"<h3>{escape(run.where)}</h3>"
        yield f'<p class="outcome"><strong>{escape(run.outcome)}</strong></p>'
        yield from _failures(run)
        yield from _figures(run.figures)
        for picture in summary_pictures(summary):
            yield figure(picture)
        yield "</article>"
    yield "</section>"


def _failures(run: runs.RunSections) -> Iterable[str]:
    if run.first_failure is not None:
        yield f'<p class="cause">{escape(run.first_failure)}</p>'
    yield from (f'<p class="muted">{escape(consequence)}</p>' for consequence in run.consequences)


def _figures(figures: Sequence[runs.Figure]) -> Iterable[str]:
    if not figures:
        return
    yield '<dl class="facts">'
    for label, text, line in figures:
        yield f"<dt>{escape(label)}</dt><dd>{escape(text)}{f' (line {line})' if line else ''}</dd>"
    yield "</dl>"


def _findings(result: ScanResult) -> Iterable[str]:
    yield '<section id="findings"><h2>Findings</h2>'
    if not result.findings:
        yield '<p class="muted">No findings.</p>'
    for heading, findings in by_run(result.findings):
        if heading:
            yield f"<h3>{escape(heading)}</h3>"
        for finding in findings:
            yield finding_html(finding)
    yield "</section>"


def finding_html(finding: Finding) -> str:
    severity = escape(finding.severity)
    parts = [
        f'<article class="finding {severity}" data-code="{escape(finding.code)}">',
        (f'<h3><code>{escape(finding.code)}</code> {escape(finding.name)} '
         f'<span class="badge {severity}">{escape(finding.stage)} · {severity}</span></h3>'),
        f"<p><strong>{escape(finding.title)}</strong></p>",
        *laid_out(finding, HTML_LAYOUT, escape),
    ]
    fixes = laid_out(finding, {"fix": "<li>{text}</li>"}, escape)
    if fixes:
        parts.append('<ol class="fixes">' + "".join(fixes) + "</ol>")
    parts += [figure(picture) for picture in finding_pictures(finding)]
    parts.append("</article>")
    return "\n".join(parts)


def _errors(result: ScanResult) -> Iterable[str]:
    if result.errors:
        yield '<section id="errors"><h2>Could not read everything</h2><ul>'
        yield from (f"<li>{escape(error)}</li>" for error in result.errors)
        yield "</ul></section>"


# --- pictures as SVG ---------------------------------------------------------------------


def figure(picture: Picture) -> str:
    rows = "".join(_row(picture, row) for row in picture.rows)
    legend = "".join(
        f"<li>{_key(PARTS[part][2])}<span>{escape(words)}</span></li>" for part, words in picture.legend
    ) + "".join(f'<li>{_key("#1d1d1f", mark=True)}<span>{escape(mark.label)}</span></li>' for mark in picture.marks)
    notes = "".join(f"<li>{escape(note)}</li>" for note in picture.notes)
    return (
        f'<figure class="picture" data-kind="{escape(picture.kind)}">'
        f"<figcaption>{escape(picture.title)}</figcaption>"
        f'<div class="rows">{rows}</div>'
        f'<ul class="legend">{legend}</ul>'
        + (f'<ul class="notes">{notes}</ul>' if notes else "")
        + "</figure>"
    )


def _row(picture: Picture, row: Row) -> str:
    value = escape(row.value) + (f' <span class="tags">{escape(row.tags)}</span>' if row.tags else "")
    return (
        f'<span class="label">{escape(row.label)}</span>'
        f"{bar_svg(picture, row)}"
        f'<span class="value">{value}</span>'
    )


def bar_svg(picture: Picture, row: Row) -> str:
    scale = picture.scale or 1
    usable = SVG_WIDTH - HEADROOM
    shapes = []
    for start, end, part in _placed(row, scale, usable):
        shapes.append(f'<rect x="{start:.1f}" y="0" width="{end - start:.1f}" height="{SVG_HEIGHT}" fill="{PARTS[part][2]}"/>')
    for mark in picture.marks:
        x = mark.at / scale * usable
        shapes.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="0" y2="{SVG_HEIGHT}" stroke="#1d1d1f" stroke-width="2" '
            'vector-effect="non-scaling-stroke"/>'
        )
    label = f"{row.label}: {row.value}" + (f" ({row.tags})" if row.tags else "")
    return (
        f'<svg class="bar" viewBox="0 0 {SVG_WIDTH} {SVG_HEIGHT}" preserveAspectRatio="none" role="img" '
        f'aria-label="{escape(label)}">{"".join(shapes)}</svg>'
    )


def _placed(row: Row, scale: float, usable: float) -> Sequence[tuple[float, float, str]]:
    placed: list[tuple[float, float, str]] = []
    previous = 0.0
    for segment in row.segments:
        if segment.end <= segment.start:
            continue
        start = max(segment.start / scale * usable, previous if segment.start > 0 else 0.0)
        end = max(start + MIN_SEGMENT, segment.end / scale * usable)
        if end > SVG_WIDTH:  # a small tail pushed past the edge: keep it inside, at its minimum
            start, end = min(start, SVG_WIDTH - MIN_SEGMENT), SVG_WIDTH
        placed.append((start, end, segment.part))
        previous = end
    return placed


def _key(colour: str, mark: bool = False) -> str:
    shape = (f'<rect x="5" y="0" width="2" height="12" fill="{colour}"/>' if mark
             else f'<rect x="0" y="0" width="12" height="12" rx="2" fill="{colour}"/>')
    return f'<svg class="key" viewBox="0 0 12 12" aria-hidden="true">{shape}</svg>'
