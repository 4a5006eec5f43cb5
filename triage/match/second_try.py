"""The paste-tolerant second try (triage.match.loose) of a candidate line: the rules the exact
patterns did not read, matched in the loose form of the line and its neighbours."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from triage.match.cut import cut_as_printed, cut_end, cut_inside, drop_cut_value, drop_prose_values, writer_after
from triage.match.fields import excerpt, field_reader
from triage.match.lines import Lines
from triage.match.loose import LooseMatch, LoosePattern, loose_match, normalise
from triage.match.targets import NOT_SHARED, Cursor, Target
from triage.match.window import LooseWindow
from triage.model import Event, Record
from triage.rules.ruleset import MATCH_TIMEOUT, LazyRegex

if TYPE_CHECKING:
    from triage.match.matcher import Matcher


LOOSE_MORE_VALUES = 48  # a number this close after the last value read: a message with more values
FULL_STOP = LazyRegex(r"\\[.?!]\s*$", re.compile)  # a pattern whose message ends a sentence
TIGHT_TRIES = 3  # readings of a pattern whose tight values end at a blank: the writer's words hold few values
GAP_CUT = 64  # at most this much of the clauses a pattern skips (loose form) before a cut: a longer text is another message


def values_apart(reading: LooseMatch, best: LooseMatch) -> bool:
    """The reading has a value where the best reading has none (not the same number under
    another name: a rival wording of one message)."""
    return any(all(end <= low or start >= high for low, high in best.value_spans) for start, end in reading.value_spans)


def read_on(matcher: Matcher, source: str, lines: Lines, event: Event, cursor: Cursor) -> Event:
    """An exact finding that left values of its pattern unread while its message goes on
    below the lines it was read from (an optional clause past the exact windows' few lines:
    VT301's cumulative count ends 330 characters of message, wrapped narrow) is read on in
    the loose form, as far as that goes: the same pattern's reading from the same line
    replaces it when it reads more values. A reading with all its values is left as it is."""
    target = matcher._by_pattern.get((event.rule.code, event.pattern_id))
    if target is None or all(name in event.fields for name in target.pattern.fields):
        return event
    below = lines.parts(event.record.end_line - lines.line_no + 1)
    if below.text is None or below.level is not None:
        return event  # the message ends where it was read: another record or the input's end follows
    consumed = cursor.consumed_until
    window = LooseWindow(lines, matcher.skip_marker_texts)
    start = event.record.line - lines.line_no
    for found, _ in loose_readings(matcher, source, lines, window, [target], cursor):
        if window.lines_of(found.start, found.end)[0] != start:
            continue
        read = loose_event(matcher, source, lines, window, found, target, cursor)
        if read and read[0].fields.keys() - event.fields.keys():
            read[0].fields.update({name: value for name, value in event.fields.items() if value is not None})
            return read[0]
    cursor.consumed_until = consumed  # nothing more was read: the lines below are their own
    return event


def second_try(
    matcher: Matcher, source: str, lines: Lines, targets: list[Target], events: list[Event], cursor: Cursor,
) -> list[Event]:
    """The loose try of the rules the exact patterns did not read on the line. A fact read
    (a config key) may sit inside a damaged message; a finding read exactly leaves only the
    rules whose message the line's end cuts short (a metrics line is two findings, and a
    cut inside the second must not lose it to the first)."""
    beside = frozenset(event.rule.code for event in events if event.rule.kind == "finding")
    text = lines.parts(0).text
    end = cut_end(text) if beside else len(text)
    if beside and not end:  # vLLM's own lines end closed: a finding read, nothing cut beside it (the usual case)
        return []
    matched = {event.rule.code for event in events}
    cut = text[:end]
    # re-punctuated (full-width, a note inside) only where the line holds non-ASCII text: a server's log pays nothing
    loose = not cut.isascii()
    rest = [t for t in targets if t.rule.code not in matched
            and (not beside or matcher.cut_short(t, cut) or loose and loose_cut_short(t, cut))]
    if not rest:
        return []
    cursor.mark(events)
    return match_loose(matcher, source, lines, rest, cursor, beside)


def match_loose(
    matcher: Matcher, source: str, lines: Lines, targets: list[Target], cursor: Cursor,
    beside: frozenset[str] = frozenset(),
) -> list[Event]:
    """The second try, on text people pasted (triage.match.loose): the candidate and its
    neighbours joined in the loose form. At most one event, the pattern that reads the
    most of it; the lines it used are not looked at again. beside: the findings the exact
    patterns read on the candidate line; they do not hold these targets back (and the
    neighbours' patterns are not added: they had their turn with them)."""
    window = LooseWindow(lines, matcher.skip_marker_texts)
    shared = (lines.line_no, beside)
    chosen = targets if beside else window_targets(matcher, lines, window, targets)
    readings = loose_readings(matcher, source, lines, window, chosen, cursor, shared)
    if not readings:
        return []
    # the first of the best (file order); of readings as good, one that keeps the numbers
    best = max(readings, key=lambda reading: (reading[0].score, len(reading[0].fields)))
    # other rules whose message is there whole too (a metrics line is two findings), or cut
    # short but with values where the best reads none of its own: a second message; not one
    # whose head starts inside the best one's ("TOO LARGE SWAP SPACE" in "POSSIBLY TOO LARGE ...")
    others = [r for r in readings if r[1].rule.code != best[1].rule.code
              and (r[0].complete or values_apart(r[0], best[0]))
              and not best[0].start < r[0].start < best[0].head_end]
    events: list[Event] = []
    for found, target in [best, *{r[1].rule.code: r for r in others}.values()]:
        events += loose_event(matcher, source, lines, window, found, target, cursor, shared)
    return events


def loose_readings(
    matcher: Matcher, source: str, lines: Lines, window: LooseWindow, targets: list[Target], cursor: Cursor,
    shared: tuple[int, frozenset[str]] = NOT_SHARED,
) -> list[tuple[LooseMatch, Target]]:
    """The loose readings of these patterns in the window that start on the candidate or above it."""
    readings: list[tuple[LooseMatch, Target]] = []
    for target in targets:
        pattern = target.loose_form()
        if pattern is None or not all(window.may_hold(piece) for piece in pattern.pieces):
            continue
        try:
            found = tight_reading(pattern, window)
        except TimeoutError:
            matcher.timed_out(target.rule.code, target.pattern.id, f"{source}:{lines.line_no}", cursor)
            continue
        if found is not None and not found.complete and not stops_as_pasted(found, window, pattern) \
                and not cut_as_printed(found, window, target):
            continue
        if found is None or found.recased and window.follows_word(found.start):
            continue
        if found.complete and all(start < found.head_end for start, _ in found.value_spans) \
                and FULL_STOP.search(target.pattern.compiled.pattern) and window.runs_on(found.end):
            continue  # all head, its closing dot missing and the sentence going on: the writer's ("a single token and I ...")
        drop_cut_value(found, window)
        drop_prose_values(found, window)
        if writer_after(found, window, target):
            continue
        # a head on a later line is that line's own turn, and a message already read (or
        # one another finding starts inside) is not read again: neither may outscore this line's
        first, last = window.lines_of(found.start, found.end)
        if first <= 0 and not cursor.taken(lines.line_no + first, lines.line_no + last, target.rule.code, shared):
            readings.append((found, target))
    return readings


def tight_reading(pattern: LoosePattern, window: LooseWindow) -> LooseMatch | None:
    """The pattern's loose reading of the window, none of it read over the writer's words:
    a value that takes no blank ends where the text as read has one ("the XFORMERS b..." is
    the backend XFORMERS and a cut inside "backend"; "device and I ..." reads no device), or
    starts there if the message starts with it ("ValueError: cohere2 has ..."); other words
    for the glue of a value end no sentence (the writer's next one: "max_length=. I have 7
    GPUs"), and hold punctuation where vLLM's glue does (a paraphrase keeps the clause's
    brackets and separators, "(4000 in the prompt / 1000", the writer's sentence need not:
    "requested 17210 with 7 GPUs"), and a word vLLM prints as a value does not start the writer's sentence
    ("Free memory on device. Why": vLLM prints no sentence end before a value's word); a
    value of words ends at a sentence's punctuation ("for embedding generation。Please")."""
    text, start = window.text(), 0
    for _ in range(TIGHT_TRIES):
        found = loose_match(pattern, text, MATCH_TIMEOUT, start)
        if found is None:
            return None
        ends = [(span[0] == found.start, blank) for name, span in zip(found.fields, found.value_spans, strict=True)
                if name in pattern.tight for blank in [window.blank_in(*span)] if blank is not None]
        ends += [(False, start) for start, end, punctuated in found.glue_spans if window.after_sentence_end(start)
                 or window.sentence_end_in(start, end) or punctuated and not window.punctuated(start, end)]
        ends += [(False, span[0]) for name, span in zip(found.fields, found.value_spans, strict=True)
                 if name in pattern.tight and not found.fields[name][:1].isdigit() and window.after_sentence_end(span[0])]
        ends += [(False, mark) for name, span in zip(found.fields, found.value_spans, strict=True)
                 if name not in pattern.tight and not found.fields[name][:1].isdigit()
                 for mark in [window.sentence_mark_in(*span)] if mark is not None and mark < span[1]]
        if not ends:
            return words_as_read(found, pattern, window)
        leading, end = min(ends, key=lambda item: item[1])
        text, start = (text, end) if leading else (text[:end], start)
    return None


def words_as_read(found: LooseMatch, pattern: LoosePattern, window: LooseWindow) -> LooseMatch:
    """The reading's values of words as printed ("embedding generation"); one that ends the
    reading where no sentence's punctuation closes it is not read: where it ends is not known,
    and the writer's words may be in it ("for classification and I do not know why")."""
    for name, span in list(zip(found.fields, found.value_spans, strict=True)):
        if name in pattern.tight or found.fields[name][:1].isdigit():
            continue
        if span[1] == found.end and not window.closed_after(span[1]):
            index = found.value_spans.index(span)
            del found.fields[name], found.value_spans[index]
        else:
            found.fields[name] = window.as_read(*span) or found.fields[name]
    return found


def loose_event(
    matcher: Matcher, source: str, lines: Lines, window: LooseWindow, found: LooseMatch, target: Target,
    cursor: Cursor, shared: tuple[int, frozenset[str]] = NOT_SHARED,
) -> list[Event]:
    first, last = window.lines_of(found.start, found.end)
    if first > 0:  # its head is on a later line: that line's own turn (the exact patterns first)
        return []
    if cursor.taken(lines.line_no + first, lines.line_no + last, target.rule.code, shared):
        return []
    parts = lines.parts(first)
    text = window.original(first, last, found.start)
    record = Record(source, lines.line_no + first, lines.line_no + last, text, parts.level, parts.time,
                    parts.process, parts.rank)
    names = list(target.pattern.fields)
    read_fields = target.read_fields = target.read_fields or field_reader(target.rule, names)
    fields = read_fields({name: found.fields.get(name) for name in names})
    cursor.consumed_until = max(cursor.consumed_until, lines.line_no + last)
    return [Event(target.rule, record, fields, excerpt(text, 0, len(text)), target.pattern.id, target.pattern.hosted)]


def window_targets(matcher: Matcher, lines: Lines, window: LooseWindow, targets: list[Target]) -> list[Target]:
    """The candidate's patterns and those whose anchors its neighbours hold: a wrapped
    message's own anchors may all be on other lines than the one that made it a candidate."""
    return matcher.targets_on(lines, range(window.first, window.first + len(window.texts)), True, targets)


def stops_as_pasted(found: LooseMatch, window: LooseWindow, pattern: LoosePattern) -> bool:
    """A loose match that stops short is a paste of its message only when the text stops
    there too (a cut, anywhere: inside a word or a number too), or when only its closing
    words were replaced and no further number follows in their sentence (past its last
    number: when its sentence ends there). Otherwise the text goes on as another message
    with the same head."""
    rest, ends_sentence = window.rest_of_line(found.end)
    if cut_inside(found, window, pattern, rest):
        return True
    rest = rest.strip(".,;:!?")
    if found.values_read:
        following = window.rest_of_sentence(found.end)[:LOOSE_MORE_VALUES]
        return not any(c.isdigit() for c in following)
    # the line ends inside the clauses its pattern skips, cut after a value of theirs; CJK
    # prose after the cut is no clause of the message, unless an English sentence led into
    # the head ("My server shows Running: 5 reqs, ..."). A gap that takes any text takes the
    # writer's words after the head too ("... by default in v0.19 and I wonder"): only
    # cut_as_printed reads a cut there
    prose_after = not any(c.isascii() and c.isalnum() for c in rest) and not window.follows_word(found.start)
    if found.before_gap and not found.free_gap and rest and not prose_after:
        return sum(c.isascii() for c in rest) <= GAP_CUT and any(c.isdigit() for c in rest)
    if found.numbers_read:  # a closing sentence (naming a lever) replaced: the text's sentence ends here too
        # (or the writer's words in another script follow: "you requested 5120。请问怎么办？")
        return not any(c.isascii() and c.isalnum() for c in window.rest_of_sentence(found.end))
    return not any(c.isascii() and c.isalnum() for c in rest) and not (not rest and ends_sentence)


def loose_cut_short(target: Target, text: str) -> bool:
    """The pattern's loose form reads the text up to its end, short of the pattern's: its
    message is cut there though re-punctuated (full-width commas) for the exact one."""
    pattern = target.loose_form()
    if pattern is None:
        return False
    form = normalise(text)
    try:
        found = loose_match(pattern, form, MATCH_TIMEOUT)
    except TimeoutError:
        return False
    return found is not None and not found.complete and found.end == len(form)
