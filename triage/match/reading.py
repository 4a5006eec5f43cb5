"""The paste-tolerant reading of a record (triage.match.loose): the finding rules the exact
patterns did not read, matched in the loose form of the record's rows, each message once."""

from __future__ import annotations

import re
from collections.abc import Callable

from triage.match.cut import cut_as_printed, cut_inside, drop_cut_value, drop_prose_values, writer_after
from triage.match.loose import LooseMatch, LoosePattern, loose_match, normalise
from triage.match.targets import Target
from triage.match.window import Window
from triage.rules.ruleset import MATCH_TIMEOUT, LazyRegex

LOOSE_MORE_VALUES = 48  # a number this close after the last value read: a message with more values
FULL_STOP = LazyRegex(r"\\[.?!]\s*$", re.compile)  # a pattern whose message ends a sentence
TIGHT_TRIES = 3  # readings of a pattern whose tight values end at a blank: the writer's words hold few values
GAP_CUT = 64  # at most this much of the clauses a pattern skips (loose form) before a cut: a longer text is another message
MAX_READINGS = 64  # readings of one pattern in one window, at most (each a message of its own)

Reading = tuple[LooseMatch, Target]


def values_apart(reading: LooseMatch, best: LooseMatch) -> bool:
    """The reading has a value where the best reading has none (not the same number under
    another name: a rival wording of one message)."""
    return any(all(end <= low or start >= high for low, high in best.value_spans) for start, end in reading.value_spans)


def loose_readings(
    window: Window, targets: list[Target], taken: Callable[[LooseMatch, str], bool], on_timeout: Callable[[Target], None],
) -> list[Reading]:
    """The messages of these patterns in the window, in the loose form: where readings of
    several rules overlap, the one that reads the most of it (the first of the best, in file
    order), and others whose message is there whole too (a metrics line is two findings) or
    cut short but with values where the best reads none of its own. taken(reading): it
    reads a message the exact patterns read (not a second message beside it)."""
    readings: list[Reading] = []
    for target in targets:
        pattern = target.loose_form()
        if pattern is None or not all(window.may_hold(piece) for piece in pattern.pieces):
            continue
        try:
            readings += _readings_of(target, pattern, window, taken)
        except TimeoutError:
            on_timeout(target)
    return _chosen(readings)


def _readings_of(target: Target, pattern: LoosePattern, window: Window, taken: Callable[[LooseMatch, str], bool]) -> list[Reading]:
    found_here: list[Reading] = []
    position = 0
    for _ in range(MAX_READINGS):
        found = tight_reading(pattern, window, position)
        if found is None:
            break
        position = max(found.end, found.start + 1)
        if _accepted(found, window, pattern, target) and not taken(found, target.rule.code):
            found_here.append((found, target))
    return found_here


def _accepted(found: LooseMatch, window: Window, pattern: LoosePattern, target: Target) -> bool:
    """A loose match is a reading of the message: it stops where the pasted text does, its
    head starts a sentence, and what follows it is not the writer's own words."""
    quoted = _past_head(found) and window.quoted(found.start, found.end)  # (what follows the closing quote is the writer's)
    if not found.complete and not quoted and not stops_as_pasted(found, window, pattern) \
            and not cut_as_printed(found, window, target):
        return False
    if found.recased and window.follows_word(found.start):
        return False
    if found.complete and all(start < found.head_end for start, _ in found.value_spans) \
            and FULL_STOP.search(target.pattern.compiled.pattern) and window.runs_on(found.end):
        return False  # all head, its closing dot missing and the sentence going on: the writer's ("a single token and I ...")
    drop_cut_value(found, window)
    drop_prose_values(found, window)
    return quoted or not writer_after(found, window, target)


def _past_head(found: LooseMatch) -> bool:
    """The reading read a value past the message's head (not vLLM's opening words alone)."""
    return any(start >= found.head_end for start, _ in found.value_spans)


def _chosen(readings: list[Reading]) -> list[Reading]:
    """Of readings that overlap, the best and those beside it that read a second message (not
    one whose head starts inside the best one's: "TOO LARGE SWAP SPACE" in "POSSIBLY TOO LARGE ...")."""
    chosen: list[Reading] = []
    readings = sorted(readings, key=lambda reading: reading[0].start)
    index = 0
    while index < len(readings):
        group, end = [readings[index]], readings[index][0].end
        index += 1
        while index < len(readings) and readings[index][0].start < end:
            group.append(readings[index])
            end = max(end, readings[index][0].end)
            index += 1
        best = max(group, key=lambda reading: (reading[0].score, len(reading[0].fields)))
        others = [r for r in group if r[1].rule.code != best[1].rule.code
                  and (r[0].complete or values_apart(r[0], best[0]))
                  and not best[0].start < r[0].start < best[0].head_end]
        chosen += [best, *{r[1].rule.code: r for r in others}.values()]
    return chosen


def tight_reading(pattern: LoosePattern, window: Window, position: int = 0) -> LooseMatch | None:
    """The pattern's loose reading of the window from `position` on, none of it read over the
    writer's words: a value that takes no blank ends where the text as read has one ("the
    XFORMERS b..." is the backend XFORMERS and a cut inside "backend"; "device and I ..." reads
    no device), or starts there if the message starts with it ("ValueError: cohere2 has ...");
    other words for the glue of a value end no sentence (the writer's next one: "max_length=. I
    have 7 GPUs"), and hold punctuation where vLLM's glue does (a paraphrase keeps the clause's
    brackets and separators, "(4000 in the prompt / 1000", the writer's sentence need not:
    "requested 17210 with 7 GPUs"), and a word vLLM prints as a value does not start the writer's
    sentence ("Free memory on device. Why": vLLM prints no sentence end before a value's word); a
    value of words ends at a sentence's punctuation ("for embedding generation。Please")."""
    text, start = window.text(), position
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


def words_as_read(found: LooseMatch, pattern: LoosePattern, window: Window) -> LooseMatch:
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


def stops_as_pasted(found: LooseMatch, window: Window, pattern: LoosePattern) -> bool:
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
