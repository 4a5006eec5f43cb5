"""Facts read over their whole logger record: a fact's message wrapped over lines (vLLM's engine
config line and its non-default args are kilobytes: 20 and more lines at 80 columns) is read joined,
from the line with the logger's prefix to the last line before the next record."""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

from triage.input.records import LineParts
from triage.match.anchors import opens_in
from triage.match.cut import number_cut_at, without_cut_value
from triage.match.fields import excerpt, field_reader, whole_groups
from triage.match.lines import Lines, worded_join
from triage.match.targets import Cursor, Selection, Target
from triage.model import Event, Record
from triage.rules.ruleset import MATCH_TIMEOUT

if TYPE_CHECKING:
    from triage.match.matcher import Matcher


WORD, ESCAPE = re.compile(r"[A-Za-z_]+"), re.compile(r"\\.")  # a pattern's words; its escapes (\d, \.) are none
RECORD_ROLES = (None, "ready")  # what the run summary keeps as facts; lifecycle lines are read as they are


def taken_records(matcher: Matcher, source: str, lines: Lines, selection: Selection, cursor: Cursor) -> list[Event]:
    """The facts of a candidate line that an earlier reading took ("GPU KV cache" / "usage:
    0.0%" of a wrapped metrics line, whose finding was read from the line above): read over
    its record, unless that reading began already."""
    events = match_records(matcher, source, lines, selection.records, [], cursor, cursor.consumed_until)
    cursor.mark(events)
    return events


def record_targets(matcher: Matcher, selection: Selection, events: list[Event]) -> list[Target]:
    """The facts to read over the candidate's record: those its anchors chose, and those a
    window read from the lines below."""
    read = [e.rule.code for e in events if e.rule.kind == "fact" and e.rule.role in RECORD_ROLES]
    if not read:
        return selection.records
    chosen = {(t.rule_index, t.pattern_index): t for t in selection.records}
    for code in read:
        for target in matcher._facts_by_code.get(code, ()):
            chosen.setdefault((target.rule_index, target.pattern_index), target)
    return [chosen[key] for key in sorted(chosen)]


def match_records(
    matcher: Matcher, source: str, lines: Lines, targets: list[Target], events: list[Event], cursor: Cursor,
    consumed: int,
) -> list[Event]:
    """The facts of the candidate's logger record read on all its lines. They replace what the
    line or a window read of them (a piece of a record wrapped over more lines); a window's
    reading that ran on into the next record goes. A fact the line read whole is not read
    again. consumed: the last line taken before this candidate; the lines a dropped reading
    took are free again."""
    span = (0, 0) if lines.is_whole_record() else lines.record_span(matcher.skip_marker_texts)
    if span is None:  # a hand wrap's short line above: the record may still start over it
        span = lines.record_span(matcher.skip_marker_texts, short=True)
    if span is None:
        return events
    first, last = span
    if first == last == 0:
        whole = {e.rule.code for e in events if e.record.line == e.record.end_line == lines.line_no}
        targets = [t for t in targets if t.rule.code not in whole]
        if not targets:
            return events
    words = printed_words(targets)
    head, variants, cut_at = lines.record_variants(first, last, words)
    own = {(e.rule.code, e.record.line) for e in events}  # readings it replaces, marked by a second try
    found, codes = read_record(matcher, source, lines, first, last, variants, [], targets, cursor, head, own)
    # a hand wrap's short line: the message may still go on below it, with the rule unread or
    # with values it prints later unread
    rest = [t for t in targets if codes.get(t.rule.code, (0, 1))[1]]
    wider = lines.record_end(last, matcher.skip_marker_texts) if rest else last
    if wider > last:
        # the narrow readings' joins go on: their seams were told already, those below by the words
        below = [lines.parts(offset).text for offset in range(last + 1, wider + 1)]
        read_on = [worded_join([e.record.text, *below], words) for e in found if codes[e.rule.code][1]]
        wider_variants = list(dict.fromkeys([*lines.record_variants(first, wider, words)[1], *read_on]))
        more = read_record(matcher, source, lines, first, wider, wider_variants, [], rest, cursor, head, own)
        fuller = {code for code, (read, _) in more[1].items() if read > codes.get(code, (0, 0))[0]}
        found = [e for e in found if e.rule.code not in fuller] + [e for e in more[0] if e.rule.code in fuller]
        codes = {**more[1], **codes, **{code: more[1][code] for code in fuller}}
    rest = [t for t in targets if t.rule.code not in codes]
    if rest:  # cut short: what its lines say as far as they go
        more = read_record(matcher, source, lines, first, last, [], variants[:1] + cut_at, rest, cursor, head, own)
        found, codes = found + more[0], {**codes, **more[1]}
    # a line read alone whose record reads no more (a progress bar printed after it is no wrap)
    alone = {(e.rule.code, repr(e.fields)) for e in events if e.record.line == e.record.end_line == lines.line_no
             and first == 0}
    same = {e.rule.code for e in found if (e.rule.code, repr(e.fields)) in alone}
    # or a window read more of it than the record's lines did (a hand wrap's short line ended it)
    same |= {e.rule.code for e in found for old in events if old.rule.code == e.rule.code and not lines.runs_on(old)
             and old.fields.items() > e.fields.items()}
    found = [e for e in found if e.rule.code not in same]
    codes = {code: read for code, read in codes.items() if code not in same}
    asked = {target.rule.code for target in targets}
    kept = [e for e in events if e.rule.code not in codes and not (e.rule.code in asked and lines.runs_on(e))]
    if len(kept) < len(events):
        cursor.consumed_until = max([consumed, *(e.record.end_line for e in kept if e.rule.role is None)])
    return sorted([*found, *kept], key=lambda event: event.record.line)


def printed_words(targets: list[Target]) -> frozenset[str]:
    """The words the targets' patterns print (a wrap may cut one: "te" / "nsor_parallel_size")."""
    return frozenset().union(*(pattern_words(target.pattern.compiled.pattern) for target in targets))


@functools.cache
def pattern_words(source: str) -> frozenset[str]:
    return frozenset(word for word in WORD.findall(ESCAPE.sub(" ", source)) if len(word) > 3)


def read_record(
    matcher: Matcher, source: str, lines: Lines, first: int, last: int, variants: list[str], cut_at: list[str],
    targets: list[Target], cursor: Cursor, parts: LineParts, own: set[tuple[str, int]],
) -> tuple[list[Event], dict[str, tuple[int, int]]]:
    """Each rule's first pattern that matches the record's lines joined (variants: the ways
    the wrap may have cut them; a value is taken from the first that reads it), or else that
    matches as far as the record goes (a cut: the fields it closed before its end). Also the
    rules whose reading of this record began already (an earlier line of it was the
    candidate): what this line read of them is a piece of it. own: (rule, line) of the
    readings this one replaces, which do not count as begun. The rules read, each with the
    number of its pattern's groups read and left unread."""
    events: list[Event] = []
    codes: dict[str, tuple[int, int]] = {}
    for target in targets:
        if target.rule.code in codes or (target.rule.code, target.pattern.id) in matcher.disabled_patterns:
            continue
        try:
            groups, text = record_groups(matcher, target, variants, cut_at)
        except TimeoutError:
            matcher.timed_out(target.rule.code, target.pattern.id, f"{source}:{lines.line_no + first}", cursor)
            continue
        if groups is None:
            continue
        record = Record(source, lines.line_no + first, lines.line_no + last, text, parts.level, parts.time,
                        parts.process, parts.rank)
        read_fields = target.read_fields = target.read_fields or field_reader(target.rule, list(groups))
        event = Event(target.rule, record, read_fields(groups), excerpt(text, 0, len(text)), target.pattern.id,
                      target.pattern.hosted)
        unread = sum(value is None for value in groups.values())
        codes[target.rule.code] = (len(groups) - unread, unread)
        if (target.rule.code, record.line) in own or not cursor.began(event):
            events.append(event)
    return events, codes


def record_groups(
    matcher: Matcher, target: Target, variants: list[str], cut_at: list[str],
) -> tuple[dict[str, str | None] | None, str]:
    """The pattern's groups in the joined record (None: no reading), and the text read. The
    message that starts first wins: a join that ran "GPU" / "KV cache usage" together finds
    the "CPU KV cache usage" after it; other joins that read it fill in its missing values."""
    search = target.search or matcher.bind_search(target)
    readings = []
    for variant in variants:  # (none: only the cut readings)
        match = search(variant)
        if match is not None:
            before = variant[: match.start()]
            groups = whole_groups(match, variant)
            if number_cut_at(variant, match.end()):  # "to 6144… (truncated)" of 61440
                groups = without_cut_value(match, groups)
            readings.append((len(before) - before.count(" "), groups, variant))
    if readings:
        start = min(reading[0] for reading in readings)
        found = [reading for reading in readings if reading[0] == start]
        groups, text = found[0][1], found[0][2]
        for _, other, _ in found[1:]:
            groups = {name: value if value is not None else other.get(name) for name, value in groups.items()}
        return groups, text
    for text in cut_at:
        if not opens_in(target.pattern.compiled.pattern, text):  # no group can have closed in it
            continue
        cut = target.pattern.compiled.search(text, partial=True, timeout=MATCH_TIMEOUT)
        if cut is None or not cut.partial:
            continue
        groups = {name: value if value is not None and cut.end(name) < len(text) else None
                  for name, value in cut.groupdict().items()}
        if any(value is not None for value in groups.values()):  # not the head alone: a fact is its values
            return groups, text
    return None, ""
