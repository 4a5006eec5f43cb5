"""Pictures of the budget a finding or a run is about: what the report draws under a finding.

A picture only places numbers the diagnosis already carries (a finding's fields, derived
numbers and facts; a run's facts) on one scale: it never works out a diagnosis. When a
number a picture needs is missing, the picture is left out rather than drawn wrong.

The model (Picture, Row, Segment, Mark) is drawn three ways: plain characters for a
terminal without colour or a pipe (plain_lines), colour blocks for rich (rich_text), and
inline SVG for the HTML report (triage.report.html). Markdown wraps the plain lines in a
code block.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import groupby
from typing import Any, NamedTuple

from triage.model import Finding
from triage.plan.kvcache import GIB
from triage.rules.expr import format_value

# A part of a bar: the character plain text fills it with, rich's style and the SVG colour.
PARTS: dict[str, tuple[str, str, str]] = {
    "prompt": ("#", "blue", "#3b6fd8"),
    "completion": ("=", "cyan", "#2aa8b8"),
    "over": ("!", "bold red", "#d62f2f"),
    "window": ("-", "green", "#4c9a4c"),
    "weights": ("#", "magenta", "#8a5cc2"),
    "other": ("+", "yellow", "#c9a227"),
    "kv": ("=", "green", "#4c9a4c"),
    "need": ("~", "cyan", "#2aa8b8"),
    "short": ("!", "bold red", "#d62f2f"),
    "reserved": (".", "bright_black", "#b8b8b8"),
    "sequence": ("=", "green", "#4c9a4c"),
    "sequence2": ("#", "bright_green", "#2e6b2e"),
    "count": ("#", "blue", "#3b6fd8"),
    "suggested": ("*", "bold green", "#1f7a1f"),
}
MARK_CHAR = "|"
MAX_SEQUENCES_DRAWN = 32  # more full-length sequences than this are said, not drawn one by one


# NamedTuples, not dataclasses: every text report imports this module, and a dataclass
# costs several times a NamedTuple to create at import.
class Segment(NamedTuple):
    start: float
    end: float
    part: str  # a key of PARTS


class Mark(NamedTuple):
    at: float
    label: str


class Row(NamedTuple):
    label: str
    segments: list[Segment]
    value: str = ""  # the row's number, printed after the bar
    tags: str = ""  # what falls in this row (a histogram bin's percentiles)


class Picture(NamedTuple):
    kind: str  # overflow, memory, sequences, histogram
    title: str
    rows: list[Row]
    legend: list[tuple[str, str]]  # (part, what it shows, with its number)
    marks: Sequence[Mark] = ()
    notes: Sequence[str] = ()

    @property
    def scale(self) -> float:
        ends = [s.end for row in self.rows for s in row.segments] + [m.at for m in self.marks]
        return max(ends)


def n(value: Any) -> str:
    return format_value(value)


def gib(value: Any) -> str:
    return f"{value:,.2f} GiB"


# --- which pictures a finding or a run gets ----------------------------------------------


def finding_pictures(finding: Finding) -> list[Picture]:
    values = {**finding.facts, **finding.fields, **finding.derived}
    builders = BUILDERS.get(finding.stage, ())
    return [picture for picture in (build(values) for build in builders) if picture is not None]


def run_pictures(facts: Mapping[str, Any]) -> list[Picture]:
    """A run that started: its memory and how many full-length sequences its KV cache holds."""
    pictures = [memory(facts, healthy=True), sequences(facts)]
    return [p for p in pictures if p is not None]


def _numbers(values: Mapping[str, Any], *names: str) -> list[float] | None:
    found = [values.get(name) for name in names]
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in found):
        return None
    return [float(v) for v in found]  # type: ignore[arg-type]


# --- request overflow --------------------------------------------------------------------


def overflow(values: Mapping[str, Any]) -> Picture | None:
    """The window as a bar with the request on it: the prompt, the completion, the part
    over the window, and where max_tokens would have had to end."""
    numbers = _numbers(values, "prompt_tokens", "max_model_len")
    if numbers is None:
        return None
    prompt, window = numbers
    completion = _numbers(values, "completion_tokens")
    request = [Segment(0, prompt, "prompt")]
    legend = [("prompt", f"prompt {n(values['prompt_tokens'])}")]
    total = prompt
    if completion is not None:
        request.append(Segment(prompt, prompt + completion[0], "completion"))
        legend.append(("completion", f"completion (max_tokens) {n(values['completion_tokens'])}"))
        total += completion[0]
    if total <= window:
        return None  # nothing over the window: this is not the picture of a refusal
    request = clip(request, window)
    if isinstance(values.get("over_by"), (int, float)) and values["over_by"] > 0:
        legend.append(("over", f"over the window by {n(values['over_by'])}"))
    elif isinstance(values.get("prompt_cut"), (int, float)) and values["prompt_cut"] > 0:
        legend.append(("over", f"over the window (cut the prompt by {n(values['prompt_cut'])} to leave one token for output)"))
    else:
        legend.append(("over", "over the window"))
    rows = [
        Row("window", [Segment(0, window, "window")], n(values["max_model_len"])),
        Row("request", request, n(values["requested_total"]) if "requested_total" in values
            else n(values["prompt_tokens"]) if completion is None else ""),
    ]
    legend.insert(0, ("window", f"served window (max_model_len) {n(values['max_model_len'])}"))
    notes = []
    fit = values.get("max_tokens_fit")
    if completion is not None and isinstance(fit, (int, float)) and fit > 0:
        notes.append(f"max_tokens would have had to end at the window: at most {n(fit)} instead of {n(values['completion_tokens'])}")
    elif prompt >= window:
        notes.append("the prompt alone reaches the window: no max_tokens fits; only a shorter prompt or a longer window does")
    if values.get("at_least"):
        notes.append("vLLM printed a lower bound (at least): the request was that long or longer")
    mark = Mark(window, f"window {n(values['max_model_len'])}")
    return Picture("overflow", "The request against the window (tokens)", rows, legend, [mark], notes)


def clip(segments: list[Segment], limit: float) -> list[Segment]:
    """The segments with whatever lies beyond limit drawn as over."""
    clipped = []
    for segment in segments:
        if segment.end <= limit:
            clipped.append(segment)
        elif segment.start >= limit:
            clipped.append(Segment(segment.start, segment.end, "over"))
        else:
            clipped += [Segment(segment.start, limit, segment.part), Segment(limit, segment.end, "over")]
    return clipped


# --- many rejections ---------------------------------------------------------------------


def histogram(values: Mapping[str, Any]) -> Picture | None:
    """How long the refused requests were: a bar per bin, the percentiles in their bins, and
    where the window and the suggested --max-model-len fall."""
    bins = values.get("requested_histogram")
    needed = _numbers(values, "requested_p50", "requested_p90", "requested_p99", "requested_max", "max_model_len",
                      "rejected")
    if not bins or needed is None:
        return None
    percentiles = {"p50": values["requested_p50"], "p90": values["requested_p90"], "p99": values["requested_p99"],
                   "max": values["requested_max"]}
    suggested = values.get("recommended_max_model_len")
    rows = []
    for low, high, count in bins:
        tags = [name for name, value in percentiles.items() if low <= value <= high]
        if suggested is not None and low <= suggested <= high:
            tags.append(f"--max-model-len {n(suggested)}")
        rows.append(Row(f"{n(low)}-{n(high)}", [Segment(0, count, "count")] if count else [], n(count), " ".join(tags)))
    window = values["max_model_len"]
    notes = [
        (f"p50 {n(percentiles['p50'])}, p90 {n(percentiles['p90'])}, p99 {n(percentiles['p99'])}, "
         f"max {n(percentiles['max'])} tokens, of {n(values['rejected'])} refused"),
        f"window (max_model_len) {n(window)}: " + (
            "every refused length is above it" if window < bins[0][0] else "it falls inside these bins"),
    ]
    if suggested is not None:
        where = "above the longest" if suggested > bins[-1][1] else "in the bin marked"
        notes.append(f"suggested --max-model-len {n(suggested)} (serves 99% of them) falls {where}")
    legend = [("count", "refused requests per length bin (tokens asked for)")]
    return Picture("histogram", "Requested lengths of the refused requests", rows, legend, [], notes)


# --- memory ------------------------------------------------------------------------------


def shortfall(values: Mapping[str, Any]) -> Picture | None:
    """A startup that could not fit one full-length sequence: the GPU's memory against it."""
    if _numbers(values, "shortfall_gib", "kv_gib_for_window") is None:
        return None
    return memory(values, healthy=False)


def memory(values: Mapping[str, Any], healthy: bool) -> Picture | None:
    """One GPU's memory as a stack: weights, activations and other, the KV cache; the share
    gpu_memory_utilization gives and the card's total when the log printed them; on a failed
    start, one max_model_len sequence's need against the KV cache, the shortfall marked."""
    kv = _numbers(values, "kv_gib_available")
    if kv is None or (healthy and _numbers(values, "kv_tokens") is None):
        return None
    weights = _numbers(values, "weights_gib")
    other = _numbers(values, "other_gib")
    budget = _numbers(values, "budget_gib")
    total = _numbers(values, "total_gib")
    stack, legend, start = [], [], 0.0
    if weights is not None and (other is not None or budget is None):
        stack.append(Segment(0, weights[0], "weights"))
        legend.append(("weights", f"weights {gib(values['weights_gib'])}"))
        start = weights[0]
        if other is not None and other[0] > 0:
            stack.append(Segment(start, start + other[0], "other"))
            legend.append(("other", f"activations, CUDA graphs, other {gib(values['other_gib'])}"))
            start += other[0]
    elif budget is not None:
        start = budget[0] - kv[0]  # the KV cache is what is left at the top of the share
        stack.append(Segment(0, start, "other"))
        legend.append(("other", "weights, activations, other (not printed apart)"))
    stack.append(Segment(start, start + kv[0], "kv"))
    kv_words = f"KV cache {gib(values['kv_gib_available'])}"
    if "kv_tokens" in values:
        kv_words += f" = {n(values['kv_tokens'])} tokens"
    legend.append(("kv", kv_words))
    top = start + kv[0]
    if total is not None and budget is not None and total[0] > top:
        stack.append(Segment(top, total[0], "reserved"))
        legend.append(("reserved", f"outside gpu_memory_utilization (card {gib(values['total_gib'])})"))
    whole = total is not None and budget is not None
    value = gib(values["total_gib"]) if whole else "" if len(stack) > 1 else gib(values["kv_gib_available"])
    rows = [Row("GPU" if len(stack) > 1 else "KV cache", stack, value)]
    marks = []
    if budget is not None:
        utilization = values.get("gpu_memory_utilization")
        share = f"gpu_memory_utilization {n(utilization)} = " if isinstance(utilization, (int, float)) else "share "
        marks.append(Mark(budget[0], share + gib(values["budget_gib"])))
    notes = []
    if not healthy:
        need = values["kv_gib_for_window"]
        window = values.get("max_model_len")
        label = f"one {n(window)}-token sequence" if window is not None else "one full-length sequence"
        rows.append(Row("needs", [Segment(start, top, "need"), Segment(top, start + float(need), "short")], gib(need)))
        legend += [("need", f"KV for {label} {gib(need)}"), ("short", f"short by {gib(values['shortfall_gib'])}")]
    if budget is None:
        notes.append("the log does not print the card's memory: the share gpu_memory_utilization gives is not drawn, "
                     "only the parts the log printed")
    title = "One GPU's memory (GiB)" + (": the KV cache cannot hold one full-length sequence" if not healthy else "")
    return Picture("memory", title, rows, legend, marks, notes)


def sequences(facts: Mapping[str, Any]) -> Picture | None:
    """The KV cache in tokens, cut into the full-length sequences it holds at once (vLLM's
    own concurrency figure)."""
    numbers = _numbers(facts, "kv_tokens", "concurrency", "concurrency_tokens")
    if numbers is None:
        return None
    tokens, concurrency, length = numbers
    whole = math.floor(concurrency)
    if tokens <= 0 or length <= 0:
        return None
    if whole <= MAX_SEQUENCES_DRAWN:
        cut = [Segment(i * length, min(tokens, (i + 1) * length), "sequence2" if i % 2 else "sequence")
               for i in range(math.ceil(tokens / length))]
    else:
        cut = [Segment(0, tokens, "sequence")]
    rows = [Row("KV cache", cut, n(facts["kv_tokens"]))]
    legend = [("sequence", f"one sequence of {n(facts['concurrency_tokens'])} tokens (max_model_len)")]
    notes = [f"sequences of full length at once: {n(facts['concurrency'])} (vLLM's figure); shorter ones share the cache"]
    return Picture("sequences", "The KV cache in tokens", rows, legend, [], notes)


BUILDERS = {"request": (overflow, histogram), "startup": (shortfall,)}

def plan_scenarios(plan: Any) -> Picture | None:
    """`plan`: each scenario's GPU as a stack (weights, the activation allowance, KV cache,
    the card beyond gpu_memory_utilization), with one max_model_len sequence's need under it."""
    if not plan.scenarios:
        return None
    card = plan.gpu_memory_bytes / GIB if plan.gpu_memory_bytes and not plan.kv_memory_given else None
    overhead = plan.overhead_bytes / GIB if card is not None else 0.0
    rows: list[Row] = []
    legend_parts: set[str] = set()
    for scenario in plan.scenarios:
        weights = scenario.weights_per_gpu / GIB if card is not None else 0.0
        kv = max(0.0, scenario.kv_memory_per_gpu / GIB)
        start = weights + overhead
        stack = [Segment(0, weights, "weights"), Segment(weights, start, "other"), Segment(start, start + kv, "kv")]
        if card is not None and card > start + kv:
            stack.append(Segment(start + kv, card, "reserved"))
        need = scenario.sequence_bytes / GIB
        needs = [Segment(start, start + min(kv, need), "need")]
        if need > kv:
            needs.append(Segment(start + kv, start + need, "short"))
        rows += [Row(scenario.label, stack, gib(scenario.kv_memory_per_gpu / GIB) + " KV"),
                 Row("  needs", needs, gib(need) + (" fits" if scenario.would_start else " NO"))]
        legend_parts.update(segment.part for row in rows[-2:] for segment in row.segments if segment.end > segment.start)
    words = {
        "weights": "weights per GPU", "other": f"allowance for activations and other {gib(overhead)}",
        "kv": "KV cache per GPU", "reserved": f"outside gpu_memory_utilization {n(plan.gpu_memory_utilization)}",
        "need": f"KV for one {n(plan.scenarios[0].max_model_len)}-token sequence", "short": "what it lacks",
    }
    legend = [(part, words[part]) for part in words if part in legend_parts]
    notes = [f"card {gib(card)} ({plan.gpu_name or 'as given'})"] if card is not None else [
        "KV memory given per GPU (--kv-cache-memory): weights and the card are not drawn"]
    return Picture("scenarios", "Each scenario's GPU memory (GiB)", rows, legend, [], notes)


# --- plain characters and rich colour ----------------------------------------------------

LABEL_SHARE = 3  # the label column takes at most a third of the width


class Layout(NamedTuple):
    label: int
    value: int
    bar: int
    stacked: bool  # the label on its own line above the bar (a narrow terminal)


def layout(picture: Picture, width: int) -> Layout:
    label = max(len(row.label) for row in picture.rows)
    value = max(len(row.value) for row in picture.rows)
    tags = max((len(row.tags) + 1 for row in picture.rows if row.tags), default=0)
    room = width - 2 - label - 1 - value - tags - 1 - len(picture.marks) - 2
    if room >= 12 and label <= width // LABEL_SHARE:
        return Layout(label, value, room, False)
    return Layout(0, value, max(8, width - 4 - value - tags - len(picture.marks) - 2), True)


def cells(picture: Picture, row: Row, bar: int) -> list[str | None]:
    """The row as bar cells, each a part name or None (empty); a segment that is not empty
    gets at least one cell, so a small overflow never disappears, and none falls off the end."""
    scale = (picture.scale or 1) / (bar - 1)  # the last cell is left for a tail too small to round to one
    segments = [s for s in row.segments if s.end > s.start]
    # each segment's start and end cell, in order; a segment's end is at least one past its start
    points = [round(value / scale) for s in segments for value in (s.start, s.end)]
    gaps = [0 if index % 2 == 0 else 1 for index in range(len(points))]
    for index in range(1, len(points)):
        points[index] = max(points[index], points[index - 1] + gaps[index])
    points[-1:] = [min(points[-1], bar)] if points else []
    for index in range(len(points) - 2, -1, -1):
        points[index] = min(points[index], points[index + 1] - gaps[index + 1])
    filled: list[str | None] = [None] * bar
    for number, segment in enumerate(segments):
        for index in range(max(0, points[2 * number]), min(points[2 * number + 1], bar)):
            filled[index] = segment.part
    return filled


def mark_cells(picture: Picture, bar: int) -> list[int]:
    scale = (picture.scale or 1) / (bar - 1)
    return sorted({min(bar, round(mark.at / scale)) for mark in picture.marks})


def _bar_pieces(picture: Picture, row: Row, bar: int) -> list[tuple[str, str | None]]:
    """(text, part) runs of one row's bar with the marks inserted between cells."""
    filled = cells(picture, row, bar)
    marks = mark_cells(picture, bar)
    pieces: list[tuple[str, str | None]] = []
    for index in range(bar + 1):
        if index in marks:
            pieces.append((MARK_CHAR, "mark"))
        if index < bar:
            part = filled[index]
            pieces.append((PARTS[part][0] if part else " ", part))
    return pieces


def plain_lines(picture: Picture, width: int) -> list[str]:
    """The picture in characters only, no line longer than width."""
    shape = layout(picture, width)
    lines = wrap_words(picture.title, width, "")
    for row in picture.rows:
        bar = "".join(text for text, _ in _bar_pieces(picture, row, shape.bar)).rstrip()
        bar = bar.ljust(shape.bar + len(picture.marks))
        tail = f" {row.value.rjust(shape.value)}" + (f" {row.tags}" if row.tags else "")
        if shape.stacked:
            lines += [f"  {row.label}", f"  [{bar}]{tail}"]
        else:
            lines.append(f"  {row.label.ljust(shape.label)} [{bar}]{tail}")
    keys = [f"{PARTS[part][0]} {words}" for part, words in picture.legend]
    keys += [f"{MARK_CHAR} {mark.label}" for mark in picture.marks]
    lines += wrap_items(keys, width, "  ")
    lines += [line for note in picture.notes for line in wrap_words(note, width, "  ")]
    return [line.rstrip()[:width] for line in lines]


def legend_lines(items: Sequence[str], width: int, indent: int = 2) -> list[list[int]]:
    """Which legend keys share a line: as many side by side as fit (3 spaces apart)."""
    lines: list[list[int]] = []
    used = width
    for index, item in enumerate(items):
        if lines and used + 3 + len(item) <= width:
            lines[-1].append(index)
            used += 3 + len(item)
        else:
            lines.append([index])
            used = indent + len(item)
    return lines


def wrap_items(items: Sequence[str], width: int, indent: str) -> list[str]:
    """Legend keys side by side, as many as fit a line (a key longer than the line wraps)."""
    joined = ["   ".join(items[index] for index in line) for line in legend_lines(items, width, len(indent))]
    return [wrapped for line in joined for wrapped in wrap_words(line, width, indent)]


def wrap_words(text: str, width: int, indent: str) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width=max(20, width), initial_indent=indent, subsequent_indent=indent + "  ")


def rich_text(picture: Picture, width: int) -> Any:
    """The picture as rich Text: the same layout with colour blocks."""
    from rich.text import Text

    shape = layout(picture, width)
    text = Text()
    text.append(picture.title + "\n", style="bold")
    for row in picture.rows:
        if shape.stacked:
            text.append(f"  {row.label}\n  ")
        else:
            text.append(f"  {row.label.ljust(shape.label)} ")
        for part, run in groupby(part for _, part in _bar_pieces(picture, row, shape.bar)):
            length = len(list(run))
            if part == "mark":
                text.append("│" * length, style="bold")
            elif part is None:
                text.append(" " * length)
            else:
                text.append("█" * length, style=PARTS[part][1])
        text.append(f" {row.value.rjust(shape.value)}")
        if row.tags:
            text.append(f" {row.tags}", style="bold")
        text.append("\n")
    keys = [("█", PARTS[part][1], words) for part, words in picture.legend]
    keys += [("│", "bold", mark.label) for mark in picture.marks]
    for line in legend_lines([f"{swatch} {words}" for swatch, _, words in keys], width):
        for index, item in enumerate(line):
            swatch, style, _ = keys[item]
            text.append("  " if index == 0 else "   ")
            text.append(swatch + " ", style=style)
            text.append(keys[item][2])
        text.append("\n")
    for note in picture.notes:
        text.append(f"  {note}\n", style="dim")
    text.rstrip()
    return text


# --- what a report draws -----------------------------------------------------------------

MIN_WIDTH, MAX_WIDTH = 40, 120


def terminal_width() -> int:
    """The width pictures are drawn to: the terminal's (COLUMNS when set, 80 in a pipe),
    kept between 40 and 120 columns."""
    import shutil

    return min(max(shutil.get_terminal_size((80, 24)).columns, MIN_WIDTH), MAX_WIDTH)


def summary_pictures(summary: Any) -> list[Picture]:
    """A run's pictures from its summary; none for a run that failed (its finding draws it)."""
    return run_pictures(summary.facts) if summary.outcome != "failed" else []


def run_summaries(result: Any) -> list[tuple[str, list[Picture]]]:
    """Each run that did not fail, with the pictures of its memory and KV cache, headed by
    its input (and its number when the input holds several runs)."""
    drawn = []
    for source, runs in result.runs.items():
        summaries = [run.summary for run in runs if run.summary is not None]
        for summary in summaries:
            pictures = summary_pictures(summary)
            if pictures:
                drawn.append((source if len(summaries) == 1 else f"{source}: run {summary.number}", pictures))
    return drawn


def plain_block(pictures: Sequence[Picture], width: int, indent: str = "") -> list[str]:
    """Pictures in plain characters, a blank line between them, indented."""
    lines: list[str] = []
    for picture in pictures:
        if lines:
            lines.append("")
        lines += [indent + line if line else line for line in plain_lines(picture, width - len(indent))]
    return lines
