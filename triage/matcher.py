"""Find rule matches in chunks of raw log bytes.

One anchor pass over each chunk (the rules' literal keywords, as one bytes
regex) finds candidate lines; only those are decoded (records.py) and only the
patterns of the rules whose keywords the line holds are run on them. Lines that
hold a skip marker (vLLM's request log, which quotes whole prompts) are never
events. A message wrapped over up to three lines is joined before matching.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from triage.reader import Chunk
from triage.records import LineParts, join_variants, parse_line
from triage.ruleset import MATCH_TIMEOUT, Rule, RuleSet
from triage.types import Event, Record

CONTEXT_LINES = 2  # a message may continue over this many lines before or after its anchor
# Relative line windows tried when a candidate line does not match on its own.
WRAP_WINDOWS = ((0, 1), (0, 2), (-1, 0), (-1, 1), (-2, 0))
MAX_EXCERPT = 600
MAX_TIMEOUTS = 3  # a pattern that times out this often is skipped for the rest of the scan
HOSTED_STAGES = {"request"}


@dataclass(slots=True)
class _Cursor:
    """Line numbering and de-duplication across the chunks of one input."""

    consumed_until: int = 0  # last line already used by a joined (wrapped) match
    warnings: list[str] = field(default_factory=list)


class Matcher:
    def __init__(self, ruleset: RuleSet, rules: Iterable[Rule] | None = None):
        self.ruleset = ruleset
        self.rules = list(rules if rules is not None else ruleset.rules)
        self.skip_markers = [m.encode() for m in ruleset.skip_markers]
        self.hosted_markers = list(ruleset.hosted_markers)
        self.rules_by_anchor: dict[bytes, list[Rule]] = {}
        for rule in self.rules:
            for keyword in rule.keywords:
                self.rules_by_anchor.setdefault(keyword.encode(), []).append(rule)
        anchors = sorted(set(self.rules_by_anchor) | set(self.skip_markers), key=len, reverse=True)
        self.anchor_pattern = re.compile(b"|".join(map(re.escape, anchors))) if anchors else None
        self.warnings: list[str] = []
        self.timeouts: dict[tuple[str, str], int] = {}  # (rule code, pattern id) -> searches cut short
        self.disabled_patterns: set[tuple[str, str]] = set()

    @property
    def anchors(self) -> list[bytes]:
        return sorted(self.rules_by_anchor)

    # --- the chunk loop -------------------------------------------------------------

    def scan(self, source: str, chunks: Iterable[Chunk]) -> Iterator[Event]:
        """Events in the order of the lines they start on."""
        cursor = _Cursor()
        carry = b""  # the last lines of the previous chunk: context, and lines not yet scanned
        carry_line = 1
        owned_from = 0  # offset in the buffer where lines not yet scanned begin
        for chunk in chunks:
            buffer = carry + chunk.data if carry else chunk.data
            first_line = carry_line if carry else chunk.first_line
            own_end = _start_of_last_lines(buffer, CONTEXT_LINES)
            yield from self._scan_buffer(source, buffer, first_line, owned_from, own_end, cursor)
            keep_from = _start_of_last_lines(buffer, 2 * CONTEXT_LINES)
            carry = buffer[keep_from:]
            carry_line = first_line + buffer.count(b"\n", 0, keep_from)
            owned_from = own_end - keep_from
        if carry:
            yield from self._scan_buffer(source, carry, carry_line, owned_from, len(carry), cursor)
        self.warnings.extend(cursor.warnings)

    def scan_text(self, source: str, text: str) -> list[Event]:
        """Scan a string (rule examples, tests)."""
        return list(self.scan(source, [Chunk(text.encode(), 1)]))

    def _scan_buffer(
        self, source: str, buffer: bytes, first_line: int, start: int, end: int, cursor: _Cursor
    ) -> Iterator[Event]:
        if self.anchor_pattern is None:
            return
        counted_to, line_no = 0, first_line
        position = start
        while position < end:
            hit = self.anchor_pattern.search(buffer, position, end)
            if hit is None:
                return
            line_start = buffer.rfind(b"\n", 0, hit.start()) + 1
            line_end = buffer.find(b"\n", hit.end())
            line_end = len(buffer) if line_end < 0 else line_end
            position = line_end + 1
            raw = buffer[line_start:line_end]
            if any(marker in raw for marker in self.skip_markers):
                continue  # a request log line: prompt text quoting an error is not an event
            line_no += buffer.count(b"\n", counted_to, line_start)
            counted_to = line_start
            if line_no <= cursor.consumed_until:
                continue
            rules = self._rules_in(raw)
            if rules:
                lines = _Lines(buffer, line_start, line_end, line_no)
                yield from self._match_line(source, lines, rules, cursor)

    def _rules_in(self, raw: bytes) -> list[Rule]:
        seen: dict[str, Rule] = {}
        for anchor in set(self.anchor_pattern.findall(raw)):  # type: ignore[union-attr]
            for rule in self.rules_by_anchor.get(anchor, ()):
                seen.setdefault(rule.code, rule)
        return list(seen.values())

    # --- one candidate line ---------------------------------------------------------

    def _match_line(self, source: str, lines: _Lines, rules: list[Rule], cursor: _Cursor) -> Iterator[Event]:
        parts = lines.parts(0)
        events = self._match_text(source, parts, parts.text, lines.line_no, lines.line_no, rules, cursor)
        if not events:
            events = self._match_wrapped(source, lines, rules, cursor)
        if events:
            context = lines.context_text()
            for event in events:
                event.hosted = event.hosted or (
                    event.rule.stage in HOSTED_STAGES and any(m in context for m in self.hosted_markers)
                )
            yield from events

    def _match_wrapped(self, source: str, lines: _Lines, rules: list[Rule], cursor: _Cursor) -> list[Event]:
        for before, after in WRAP_WINDOWS:
            texts = [lines.parts(offset).text for offset in range(before, after + 1)]
            if any(t is None for t in texts):
                continue
            for joined in _joins(texts):
                events = self._match_text(
                    source, lines.parts(0), joined, lines.line_no + before, lines.line_no + after, rules, cursor
                )
                if events:
                    cursor.consumed_until = max(cursor.consumed_until, lines.line_no + after)
                    return events
        return []

    def _match_text(
        self, source: str, parts: LineParts, text: str, first: int, last: int, rules: list[Rule], cursor: _Cursor
    ) -> list[Event]:
        events = []
        for rule in rules:
            for pattern in rule.patterns:
                if (rule.code, pattern.id) in self.disabled_patterns:
                    continue
                try:
                    match = pattern.compiled.search(text, timeout=MATCH_TIMEOUT)
                except TimeoutError:
                    self._timed_out(rule.code, pattern.id, f"{source}:{first}", cursor)
                    continue
                if match is None:
                    continue
                record = Record(source, first, last, text, parts.level, parts.time, parts.process, parts.rank)
                fields = typed_fields(rule, match.groupdict())
                excerpt = match.group(0)[:MAX_EXCERPT]
                events.append(Event(rule, record, fields, excerpt, pattern.id, pattern.hosted))
                break
        return events

    def _timed_out(self, code: str, pattern_id: str, where: str, cursor: _Cursor) -> None:
        """Warn; after MAX_TIMEOUTS the pattern is off, so a backtracking rule costs seconds, not hours."""
        key = (code, pattern_id)
        self.timeouts[key] = self.timeouts.get(key, 0) + 1
        message = f"{where}: rule {code} pattern {pattern_id} took longer than {MATCH_TIMEOUT}s and was skipped on this line"
        if self.timeouts[key] >= MAX_TIMEOUTS:
            self.disabled_patterns.add(key)
            message += f"; it timed out {MAX_TIMEOUTS} times and is off for the rest of the scan"
        cursor.warnings.append(message)


def typed_fields(rule: Rule, groups: dict[str, str | None]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name, value in groups.items():
        kind = rule.field_types.get(name, "str")
        if kind == "flag":
            fields[name] = bool(value)
        elif value is not None:
            fields[name] = convert(kind, value)
    for name, kind in rule.field_types.items():
        if kind == "flag":  # a flag another pattern of the rule captures is simply off here
            fields.setdefault(name, False)
    return fields


def convert(kind: str, value: str) -> Any:
    if kind == "int":
        cleaned = value.replace(",", "").replace("_", "")
        try:
            return int(cleaned)
        except ValueError:
            try:
                return int(float(cleaned))
            except ValueError:
                return None
    if kind in ("float", "gib"):
        try:
            return float(value.replace(",", ""))
        except ValueError:
            return None
    return value


def _joins(texts: list[str]) -> list[str]:
    joined = [texts[0]]
    for text in texts[1:]:
        joined = [variant for head in joined for variant in join_variants(head, text)]
    return joined


def _start_of_last_lines(buffer: bytes, count: int) -> int:
    """Offset where the last `count` lines of the buffer begin (a final partial line counts)."""
    end = len(buffer)
    if buffer.endswith(b"\n"):
        end -= 1
    for _ in range(count):
        cut = buffer.rfind(b"\n", 0, end)
        if cut < 0:
            return 0
        end = cut
    return end + 1 if end < len(buffer) else len(buffer)


class _Lines:
    """A candidate line and its neighbours in the buffer, parsed lazily."""

    def __init__(self, buffer: bytes, start: int, end: int, line_no: int):
        self.buffer, self.start, self.end, self.line_no = buffer, start, end, line_no
        self._parsed: dict[int, LineParts | None] = {}

    def _bounds(self, offset: int) -> tuple[int, int] | None:
        start, end = self.start, self.end
        for _ in range(abs(offset)):
            if offset < 0:
                if start == 0:
                    return None
                end = start - 1
                start = self.buffer.rfind(b"\n", 0, end) + 1
            else:
                if end >= len(self.buffer):
                    return None
                start = end + 1
                end = self.buffer.find(b"\n", start)
                end = len(self.buffer) if end < 0 else end
                if start >= len(self.buffer):
                    return None
        return start, end

    def parts(self, offset: int) -> LineParts:
        if offset not in self._parsed:
            bounds = self._bounds(offset)
            self._parsed[offset] = parse_line(self.buffer[bounds[0] : bounds[1]]) if bounds else None
        parts = self._parsed[offset]
        return parts if parts is not None else LineParts(None)  # type: ignore[arg-type]

    def context_text(self) -> str:
        texts = [self.parts(o).text for o in range(-CONTEXT_LINES, CONTEXT_LINES + 1)]
        return "\n".join(t for t in texts if t)
