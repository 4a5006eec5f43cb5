"""Every pattern finds its message with any numbers, behind any vLLM prefix, wrapped or not.

The message of each pattern is made from the rule's own examples: the spans the pattern's
named groups match become slots, filled with random numbers of the field's type (with and
without thousands separators where the {name:int} shorthand accepts them). The scan must
return exactly those numbers.
"""

from __future__ import annotations

import re

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from triage.match.matcher import Matcher
from triage.input.lineparse import parse_line
from triage.rules.ruleset import Pattern, Rule, load_rules
from conftest import scan_events

RULES = load_rules()

# The prefixes vLLM and its launchers put before a message (catalog formats: prefix-v0-no-brackets,
# prefix-brackets, prefix-process-in-format, process-tag-stream-wrapper, process-tag-ray).
PREFIXES = [
    "",
    "INFO 08-12 10:15:03 llm_engine.py:72] ",
    "WARNING 12-20 14:09:33 scheduler.py:1555] ",
    "ERROR 03-20 16:02:51 [core.py:343] ",
    "DEBUG 06-02 21:06:55 [v1/worker/gpu_worker.py:771] ",
    "(APIServer pid=731) INFO 06-02 21:05:09 [api_server.py:1896] ",
    "(EngineCore_DP0 pid=2210) ERROR 01-09 13:44:20 [core.py:936] ",
    "(EngineCore pid=40112) INFO 06-02 21:06:58 [kv_cache_utils.py:1147] ",
    "(VllmWorker rank=1 pid=4242) INFO 05-01 11:29:40 [gpu_worker.py:232] ",
    "(VllmWorkerProcess pid=311) WARNING 11-04 08:03:15 scheduler.py:1089] ",
    "(Worker_TP1 pid=88) INFO 05-01 11:29:40 [gpu_worker.py:232] ",
    "(RayWorkerWrapper pid=5311, ip=10.0.3.17) INFO 05-01 11:29:40 [gpu_worker.py:232] ",
]
NUMERIC = {"int", "float", "gib"}


@dataclass(frozen=True)
class Template:
    """A pattern's message with numeric slots: literal parts between (name, type, separators, negative,
    values); values: "positive" when the pattern refuses a zero there (vLLM prints the part only
    above 0), "warned" when it reads only the counts vLLM warns at (1, 51, 101, ...: VT301's
    cumulative count, whose other digits are a cut one), else "any"."""

    rule: Rule
    pattern: Pattern
    parts: tuple[str, ...]
    slots: tuple[tuple[str, str, bool, bool, str], ...]
    anchored: bool  # the regex starts with ^: a raw line (collect-env), no vLLM prefix

    def render(self, values: dict[str, str]) -> str:
        out = [self.parts[0]]
        for (name, *_), literal in zip(self.slots, self.parts[1:], strict=True):
            out += [values[name], literal]
        return "".join(out)


def templates() -> list[Template]:
    found: dict[tuple[str, str], Template] = {}
    for rule in RULES.rules:
        for example in rule.examples:
            text = parse_line(example.text.encode()).text
            for pattern in rule.patterns:
                match = pattern.compiled.search(text)
                if match is None:
                    continue
                if (rule.code, pattern.id) not in found:
                    found[(rule.code, pattern.id)] = _template(rule, pattern, text, match)
                break
    return list(found.values())


def reads(pattern: Pattern, text: str, start: int, end: int, name: str, value: str) -> bool:
    """The pattern reads this value in the field's place in the text."""
    match = pattern.compiled.search(text[:start] + value + text[end:])
    return match is not None and match.group(name) == value


def _template(rule: Rule, pattern: Pattern, text: str, match) -> Template:
    spans = []
    for name in pattern.fields:
        start, end = match.span(name)
        if start < 0 or rule.field_types.get(name) not in NUMERIC:
            continue
        spans.append((start, end, name))
    spans.sort()
    parts, slots, cursor = [], [], match.start()
    for start, end, name in spans:
        if start < cursor:  # overlapping groups: keep the first
            continue
        parts.append(text[cursor:start])
        separators = pattern.types.get(name) == "int"
        values = "positive" if pattern.compiled.search(text[:start] + "0" + text[end:]) is None else "any"
        if rule.field_types[name] == "int" and not reads(pattern, text, start, end, name, "2"):
            values = "warned"
        slots.append((name, rule.field_types[name], separators, text[start:end].startswith("-"), values))
        cursor = end
    parts.append(text[cursor:])
    return Template(rule, pattern, tuple(parts), tuple(slots), pattern.compiled.pattern.startswith("^"))


EXCEPTION_ROW = re.compile(r"[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)(?::|$)")
PROCESS_TAG = re.compile(r"\([^()]*\bpid=\d+[^()]*\) ")

# Patterns that do not yet hold the property, with why; strict, so a fix shows up as a failure here.
KNOWN_GAPS: dict[tuple[str, str], str] = {}
TEMPLATES = templates()
MATCHERS = {rule.code: Matcher(RULES, [rule]) for rule in RULES.rules if rule.kind != "check"}


def test_every_pattern_has_a_template():
    covered = {(t.rule.code, t.pattern.id) for t in TEMPLATES}
    missing = [
        (rule.code, p.id) for rule in RULES.rules for p in rule.patterns
        if (rule.code, p.id) not in covered and not p.hosted
    ]
    assert not missing


@st.composite
def number(draw, kind: str, separators: bool, negative: bool, values: str = "any"):
    """(text as vLLM would print it, the value the scan must return)."""
    if values == "warned":
        value = 1 + 50 * draw(st.integers(0, 10**5))
        return str(value), value
    if kind == "int":
        value = draw(st.integers(min_value=int(values == "positive") if not negative else -10**6, max_value=10**7))
        if negative:
            value = -abs(value) or -1
        grouped = separators and draw(st.booleans())
        return (f"{value:,}" if grouped else str(value)), value
    decimals = draw(st.integers(min_value=1, max_value=4))
    value = round(draw(st.floats(min_value=0, max_value=2000, allow_nan=False)), decimals)
    return f"{value:.{decimals}f}", float(f"{value:.{decimals}f}")


@st.composite
def filled(draw, template: Template):
    texts, wanted = {}, {}
    for name, kind, separators, negative, values in template.slots:
        if name in texts:  # the same field twice in one message (e.g. the draft window)
            continue
        texts[name], wanted[name] = draw(number(kind, separators, negative, values))
    return texts, wanted


def cuts(draw, line: str, start: int) -> list[int]:
    """Where a terminal or a tracker wraps the line into 1-3 physical lines: anywhere in the
    message, mid-word included (a prefix cut in two is no longer a prefix, for any reader)."""
    pieces = draw(st.integers(min_value=1, max_value=3))
    if pieces == 1 or len(line) - start < 10:
        return []
    return sorted(draw(st.lists(st.integers(start + 1, len(line) - 1), min_size=pieces - 1, max_size=pieces - 1, unique=True)))


def wrap(draw, line: str, at: list[int]) -> list[str]:
    bounds = [0, *at, len(line)]
    lines = [line[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    if draw(st.booleans()):  # a tracker that wraps at a space drops it
        lines = [piece[:-1] if piece.endswith(" ") else piece for piece in lines[:-1]] + lines[-1:]
    return lines


def pattern_anchors(matcher: Matcher, template: Template) -> list[bytes]:
    """The literals the anchor pass looks for on this pattern's behalf: a wrapped message is
    found when one of them is whole on a physical line (the matcher's contract)."""
    return [anchor for anchor, targets in matcher.targets.items() if any(t.pattern is template.pattern for t in targets)]


def _case(template: Template):
    gap = KNOWN_GAPS.get((template.rule.code, template.pattern.id))
    marks = [pytest.mark.xfail(reason=gap, strict=True)] if gap else []
    return pytest.param(template, marks=marks, id=f"{template.rule.code}-{template.pattern.id}")


@pytest.mark.parametrize("template", [_case(t) for t in TEMPLATES])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(data=st.data())
def test_pattern_returns_exactly_the_numbers_it_was_given(template, data):
    texts, wanted = data.draw(filled(template))
    prefix = "" if template.anchored else data.draw(st.sampled_from(PREFIXES))
    line = prefix + template.render(texts)
    at = cuts(data.draw, line, len(prefix))
    lines = wrap(data.draw, line, at)
    matcher = MATCHERS[template.rule.code]
    if at:
        # The anchor pass needs one anchor whole on a physical line; and a message cut right
        # after a complete shorter message of the same rule (a number cut in two, an optional
        # tail on the next line) cannot be told from that shorter message.
        assume(any(anchor in piece.encode() for anchor in pattern_anchors(matcher, template) for piece in lines))
        assume(not any(scan_events(matcher, "cut", line[:cut]) for cut in at))
        # records.py reads a line that starts with ">" as a markdown quote and drops the ">".
        assume(not any(piece.lstrip().startswith(">") for piece in lines[1:]))
        # Two cuts around one space leave a blank line, and a blank line ends a record for any
        # reader (the message is then cut there): no terminal wraps a line so.
        assume(all(piece.strip() for piece in lines))
        # An untagged row that starts like an exception's ("OfMemoryError: ...") under a process's
        # tagged line is another process's exception, as multi-process logs interleave them, unless
        # the line above ends in a blank (the wrap came at a space): no reader can tell them apart.
        assume(not any(EXCEPTION_ROW.match(piece) and not below.endswith(" ") and PROCESS_TAG.match(lines[0])
                       for below, piece in zip(lines, lines[1:], strict=False)))
    events = scan_events(matcher, "generated", "\n".join(lines) + "\n")
    assert events, f"no match for {lines!r}"
    got = {name: events[0].fields.get(name) for name in wanted}
    assert got == pytest.approx(wanted), lines
