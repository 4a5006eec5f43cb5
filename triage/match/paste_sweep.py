"""A small input (a paste, an issue, a chat message) swept whole in the loose form, so a message whose
every anchor the wrapping broke is still a candidate."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from triage.input.reader import Chunk
from triage.input.records import parse_line
from triage.match.lines import MAX_JOIN_LINE, cut_request_end, wrapped_end
from triage.match.loose import derive_all, normalise
from triage.match.record_facts import RECORD_ROLES
from triage.match.targets import Selection, Target
from triage.match.window import STRING_PREFIX

if TYPE_CHECKING:
    from triage.match.matcher import Matcher


# An input this small (one first chunk: a paste, an issue, a chat message) is also swept
# whole in the loose form, so a message whose every anchor was broken by the wrapping is
# still found; a server's log is larger and keeps to the anchor pass.
PASTE_SIZE = 256 * 1024
PASTE_HITS = 64  # places one pattern's head is looked at in such an input, at most
MIN_SWEPT_ANCHOR = 6  # characters a fact's anchor keeps in the loose form, at least, to be looked for in a paste


def whole_paste(chunks: Iterable[Chunk], live: bool) -> Iterator[Chunk]:
    """The chunks, with a paste's (an input of at most PASTE_SIZE from its first line) joined
    into one. The reader hands a pipe's or an in-memory text's bytes over in pieces (the 8 KiB
    that sniffing peeked, then the rest), and a record wrapped across a seam between two was
    swept by neither and read whole by no candidate: only the lines either side of a seam are
    kept for the next piece. Live, or once the input is larger, the chunks pass as they come
    (a server's log: one comparison a chunk)."""
    pieces = iter(chunks)
    held: list[bytes] = []
    size = 0
    passed: Chunk | None = None
    try:
        for passed in pieces:
            if live or (not held and passed.first_line != 1) or size + passed.end > PASTE_SIZE:
                break
            held.append(bytes(passed.data[: passed.end]))  # the reader refills its buffer for the next
            size += passed.end
        else:
            passed = None
    except (Exception, KeyboardInterrupt):  # a bound or bad gzip data ended the input, or Ctrl-C: what was read is matched
        if held:
            yield Chunk(b"".join(held), 1)
        raise
    if held:
        yield Chunk(b"".join(held), 1)
    if passed is not None:
        yield passed
        yield from pieces


def with_paste_sweep(
    matcher: Matcher, data: bytes | bytearray, end: int, candidates: list[tuple[int, int, int, Selection]],
    first_line: int = 1,
) -> list[tuple[int, int, int, Selection]]:
    """The candidates, and the lines of a small input where a pattern's head starts in the
    loose form of the whole input (its lines joined), for the second try."""
    starts, forms, position, line_no, markers = [], [], 0, first_line, matcher.skip_markers
    while position < end:
        line_end = data.find(b"\n", position, end)
        line_end = end if line_end < 0 else line_end
        raw = bytes(data[position:line_end])
        if any(marker in raw for marker in markers):  # a request-log line, its wrapped pieces too
            record_end: int | None = wrapped_end(data, position, line_end, end, records=True)
        else:
            record_end = cut_request_end(data, position, line_end, end, markers, records=True)
        if record_end is not None:
            line_no += data.count(b"\n", line_end, record_end)
            line_end = record_end
        elif len(raw) <= MAX_JOIN_LINE:
            starts.append((position, line_end, line_no))
            forms.append(normalise(STRING_PREFIX.sub("", parse_line(raw).text)).lower())
        position, line_no = line_end + 1, line_no + 1
    joined, offsets, total = "".join(forms), [], 0
    for form in forms:
        offsets.append(total)
        total += len(form)
    added: dict[int, list[Target]] = {}
    targets = finding_targets(matcher, )
    underived = [t.pattern.compiled.pattern for t in targets if t.loose is False]
    if underived:
        derived = derive_all(underived)
        for target in targets:
            if target.loose is False:
                target.loose = derived[target.pattern.compiled.pattern]
    for target in targets:
        pattern = target.loose_form()
        if pattern is None or not pattern.probe:
            continue
        at = joined.find(pattern.probe)
        for _ in range(PASTE_HITS):
            if at < 0:
                break
            added.setdefault(bisect.bisect_right(offsets, at) - 1, []).append(target)
            at = joined.find(pattern.probe, at + 1)
    records = swept_records(matcher, joined, offsets)
    if not added and not records:
        return candidates
    listed = {candidate[2]: candidate for candidate in candidates}
    for index in sorted(added.keys() | records.keys()):
        start, stop, number = starts[index]
        known = listed.get(number)
        selection = known[3] if known is not None else Selection([], [], True)
        loose = [*selection.loose, *(t for t in added.get(index, ()) if t not in selection.loose)]
        facts = [*selection.records, *(t for t in records.get(index, ()) if t not in selection.records)]
        listed[number] = (start, stop, number, replace(selection, loose=loose, records=facts))
    return [listed[number] for number in sorted(listed)]


def swept_records(matcher: Matcher, joined: str, offsets: list[int]) -> dict[int, list[Target]]:
    """The lines of a small input where a fact's anchor starts in the loose form of the whole
    input: a wrap that cut the anchor itself ("Available KV cache me" / "mory: 11.25 GiB")
    left no line holding it. The exact pattern still reads the record."""
    found: dict[int, list[Target]] = {}
    for anchor, targets in matcher.targets.items():
        facts = [t for t in targets if t.rule.kind == "fact" and t.rule.role in RECORD_ROLES]
        probe = normalise(anchor.decode("utf-8", "replace")).lower() if facts else ""
        if len(probe) < MIN_SWEPT_ANCHOR:
            continue
        at = joined.find(probe)
        for _ in range(PASTE_HITS):
            if at < 0:
                break
            line = found.setdefault(bisect.bisect_right(offsets, at) - 1, [])
            line += [t for t in facts if t not in line]
            at = joined.find(probe, at + 1)
    return {index: sorted(targets, key=lambda t: (t.rule_index, t.pattern_index)) for index, targets in found.items()}


def finding_targets(matcher: Matcher) -> list[Target]:
    every = {(t.rule_index, t.pattern_index): t for targets in matcher.targets.values() for t in targets}
    return [every[key] for key in sorted(every) if every[key].rule.kind == "finding"]
