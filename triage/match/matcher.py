"""Find rule matches in chunks of raw log bytes.

One anchor pass over each chunk finds candidate lines. The anchors are literal
texts every match of a pattern holds (triage.match.anchors derives them from the
regexes; a rule's hand-written keywords stand in where that gives nothing good),
plus the skip markers. Only candidate lines are decoded (records.py), and only
the patterns whose anchors the line holds are run on them (on the line alone: those
whose anchors it holds all of). A line holding a skip
marker (vLLM's request log, which quotes whole prompts) is never an event and is
passed over to its end without looking at the prompt. A message wrapped over up
to three lines is joined before matching.

Chunks are scanned in place, in the reader's buffer: a candidate line whose
neighbours lie in the previous or the next chunk is copied with them into a small
buffer, so a message cut by a chunk boundary is still found, and nothing is copied
otherwise. Lines are counted (newlines only, so `sed -n Np` finds them) as the scan
moves, passing over the bytes of request-log lines, so no separate pass counts them.

This module holds the chunk loop and the exact reading of a candidate line. The rest is in
the modules beside it: lines (a candidate and its neighbours in the buffer), targets (what is
tried on a line, and what is kept between lines), fields (a match's typed fields and
excerpt), record_facts (facts read over their whole logger record), second_try and window
(the paste-tolerant reading in the loose form), cut (where a pasted message was cut) and
paste_sweep (a small input searched whole).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from triage.input.reader import Chunk
from triage.input.records import LineParts
from triage.match.anchors import (
    anchors_for,
    keyword_anchor,
    may_match_cut,
    needs_keywords,
    strong_anchor,
)
from triage.match.cut import MARK_STARTS, cut_end, number_cut_at, without_cut_value
from triage.match.engines import cached_closure, make_engine, substring_closure
from triage.match.fields import excerpt, field_reader, whole_groups
from triage.match.lines import (
    CONTEXT_LINES,
    LOOSE_BACK,
    RECORD_TEXT,
    History,
    Lines,
    around,
    end_of_first_lines,
    joins,
    lines_after,
    start_of_last_lines,
    wrapped_end,
    wrapped_request_start,
)
from triage.match.paste_sweep import PASTE_SIZE, whole_paste, with_paste_sweep
from triage.match.record_facts import RECORD_ROLES, match_records, record_targets, taken_records
from triage.match.second_try import read_on, second_try
from triage.match.targets import Cursor, Selection, Target
from triage.match.watchdog import Watchdog
from triage.model import Event, Record
from triage.rules import cache as rulecache
from triage.rules.ruleset import (
    MATCH_TIMEOUT,
    Rule,
    RuleSet,
    builtin_rule_files,
)

# Relative line windows tried when a candidate line does not match on its own.
WRAP_WINDOWS = ((0, 1), (0, 2), (-1, 0), (-1, 1), (-2, 0))
FORWARD_WINDOWS = WRAP_WINDOWS[:2]
MAX_TARGET_SETS = 4096  # cached anchor combinations (bounded: memory stays flat)
MAX_TIMEOUTS = 3  # a pattern that times out this often is skipped for the rest of the scan
HOSTED_STAGES = {"request"}
EVENT_BURST = 256  # events of a chunk handed on together (bounded: a chunk of error lines)
WATCHDOG = Watchdog(MATCH_TIMEOUT)  # bounds the stdlib re searches of built-in patterns


class Matcher:
    def __init__(self, ruleset: RuleSet, rules: Iterable[Rule] | None = None, engine: str = "auto", live: bool = False):
        """live: a line at the end of what was read that matches on its own is reported at
        once, not when the next lines arrive (a pipe or --follow: the newest line may be
        the last for a while); only a message that may go on below still waits for them."""
        self.ruleset = ruleset
        self.live = live
        self.rules = list(rules if rules is not None else ruleset.rules)
        self.skip_markers = [m.encode() for m in ruleset.skip_markers]
        self.skip_marker_texts = list(ruleset.skip_markers)
        self.hosted_markers = list(ruleset.hosted_markers)
        self.warnings: list[str] = []
        self.timeouts: dict[tuple[str, str], int] = {}  # (rule code, pattern id) -> searches cut short
        self.disabled_patterns: set[tuple[str, str]] = set()
        self.targets = self._targets()
        self._by_pattern = {(t.rule.code, t.pattern.id): t for targets in self.targets.values() for t in targets}
        self._facts_by_code: dict[str, list[Target]] = {}
        for target in sorted({id(t): t for ts in self.targets.values() for t in ts}.values(),
                             key=lambda t: (t.rule_index, t.pattern_index)):
            if target.rule.kind == "fact" and target.rule.role in RECORD_ROLES:
                self._facts_by_code.setdefault(target.rule.code, []).append(target)
        self._closure = cached_closure(self.targets, lambda: substring_closure(self.targets))
        self._targets_for: dict[frozenset[bytes], Selection] = {}
        self._watched = False  # the targets' searches use stdlib re under the watchdog
        all_anchors = sorted(set(self.targets) | set(self.skip_markers))
        self.engine = make_engine(all_anchors, engine, self.skip_markers) if all_anchors else None

    def _targets(self) -> dict[bytes, list[Target]]:
        """Anchor -> the patterns a line holding it may match."""
        builtin = {str(path) for path in builtin_rule_files()}
        targets: dict[bytes, list[Target]] = {}
        for index, rule in enumerate(self.rules):
            for pattern_index, pattern in enumerate(rule.patterns):
                derived = anchors_for(pattern.compiled.pattern)
                anchors = derived.anchors
                if needs_keywords(derived):
                    anchors = [keyword_anchor(k) for k in rule.keywords]  # better than a weak anchor
                    weak = [k for k in anchors if not strong_anchor(k)]
                    if weak and rule.file not in builtin:
                        self.warnings.append(
                            f"{rule.file}:{rule.line}: rule {rule.code} pattern {pattern.id}: {derived.warning}, "
                            f"and its keyword {weak[0]!r} is short or starts with a common byte: scans get slower"
                        )
                    needs: frozenset[bytes] = frozenset()
                else:
                    needs = frozenset(anchor.encode() for anchor in anchors)  # each is text the pattern requires
                # a fact's group inside a lookahead may end past the match, where the text was cut
                reads_ahead = rule.kind == "fact" and "(?=" in pattern.compiled.pattern
                target = Target(rule, index, pattern, pattern_index, needs, rule.file in builtin, reads_ahead)
                for anchor in anchors:
                    targets.setdefault(anchor.encode(), []).append(target)
        return targets

    def time_phases(self, phases: Any) -> None:
        """Time the anchor pass and the matching of candidate lines as phases "pass" and
        "match" (a pipeline.Phases: the benchmarks). Only this matcher's two steps are
        wrapped: a scan that is not measured pays nothing."""
        self._candidates = phases.timing("pass", self._candidates)  # type: ignore[method-assign]
        self._match_line = phases.timing("match", self._match_line)  # type: ignore[method-assign]

    @property
    def anchors(self) -> list[bytes]:
        """Every literal the anchor pass looks for (skip markers included), as for grep -F -f."""
        return sorted(set(self.targets) | set(self.skip_markers))

    # --- the chunk loop -------------------------------------------------------------

    def scan(self, source: str, chunks: Iterable[Chunk]) -> Iterator[Event]:
        """Events in the order of the lines they start on."""
        watched = WATCHDOG.arm()
        try:
            yield from self._scan(source, chunks, watched)
        finally:
            if watched:
                WATCHDOG.disarm()

    def _scan(self, source: str, chunks: Iterable[Chunk], watched: bool) -> Iterator[Event]:
        if watched != self._watched:  # the searches bound so far are for the other kind
            for target in {id(t): t for targets in self.targets.values() for t in targets}.values():
                target.search = None
            self._watched = watched
        cursor = Cursor()
        history = History()  # the last lines read, for a candidate at the start of a chunk
        pending: list[_Pending] = []  # candidates at the end of the last chunk
        line_no: int | None = None
        read = 0  # bytes so far: a pipe hands a paste over in pieces of a few kilobytes
        for chunk in whole_paste(chunks, self.live):
            if line_no is None:
                line_no = first = chunk.first_line
            if pending:  # (those whose record the chunk does not end wait on)
                pending = yield from self._scan_seam(source, pending, chunk.data, chunk.end, cursor)
            read += chunk.end
            paste = first == 1 and read <= PASTE_SIZE and not self.live
            lines = yield from self._scan_chunk(source, chunk.data, chunk.end, line_no, history, pending, cursor, paste)
            chunk.lines = lines  # the reader need not count them again
            line_no += lines
            history.add(chunk.data, chunk.end)
        if pending:
            yield from self._scan_seam(source, pending, b"", 0, cursor)
        self.warnings.extend(cursor.warnings)

    def scan_text(self, source: str, text: str) -> list[Event]:
        """Scan a string (rule examples, tests)."""
        return list(self.scan(source, [Chunk(text.encode(), 1)]))

    def _scan_chunk(
        self, source: str, data: bytes | bytearray, end: int, first_line: int, history: History,
        pending: list[_Pending], cursor: Cursor, paste: bool = False,
    ) -> Generator[Event, None, int]:
        """Match the candidate lines of data[:end]; defer those at its end; return its line count.

        data may be the reader's buffer, refilled after this chunk: every search stops at
        end, and what a later chunk needs (deferred candidates, the last lines) is copied.
        The anchor pass lists the chunk's candidates before any is matched, and the events
        go out in bursts: matching a few hundred metrics lines back to back, and diagnosing
        their events so, keeps that code and its data in the CPU caches (a scan of short lines
        spent much of its time bringing them back after each line's share of the pass)."""
        if self.engine is None:
            return data.count(b"\n", 0, end)
        candidates, lines = self._candidates(data, end, first_line, paste)
        if paste:  # the input so far is a paste: swept whole, piece by piece
            candidates = with_paste_sweep(self, data, end, candidates, first_line)
        tail_start = start_of_last_lines(data, CONTEXT_LINES, end)
        head_end = end_of_first_lines(data, LOOSE_BACK, end) if history.tail else 0
        records_from = end - RECORD_TEXT  # a record wrapped from here may run on into the next chunk
        deferring = False  # from a record that runs to the chunk's end on, every candidate waits (in line order)
        events: list[Event] = []
        try:
            for line_start, line_end, line_no, selection in candidates:
                if line_no <= cursor.consumed_until:
                    if selection.records:  # (near the chunk's edges: the lines this chunk holds)
                        taken = Lines(data, line_start, line_end, line_no, end)
                        if not head_end <= line_start < tail_start:
                            buffer, offset = around(data, line_start, end, history, True)
                            taken = Lines(buffer, offset, offset + line_end - line_start, line_no)
                        events += taken_records(self, source, taken, selection, cursor)
                    continue
                if not deferring and selection.records and line_start >= records_from and line_start < tail_start:
                    deferring = Lines(data, line_start, line_end, line_no, end).runs_to_end(self.skip_marker_texts)
                if line_start >= tail_start or deferring:  # its next lines are in the next chunk
                    buffer, offset = around(data, line_start, end, history, bool(selection.loose or selection.records),
                                            RECORD_TEXT if deferring else 0)
                    reported: frozenset[str] = frozenset()
                    if self.live:
                        alone = self._match_alone(source, buffer, offset, line_no, cursor)
                        reported = frozenset(event.rule.code for event in alone)
                        events += alone
                    pending.append(_Pending(buffer, offset, line_no, reported, selection.loose, selection.records))
                elif line_start < head_end:
                    # its previous lines are in earlier chunks
                    buffer, offset = around(data, line_start, end, history, bool(selection.loose or selection.records))
                    events += self._match_at(source, buffer, offset, line_no, cursor, loose=selection.loose,
                                             records=selection.records)
                elif _worth_matching(selection):
                    events += self._match_line(source, Lines(data, line_start, line_end, line_no, end, not paste), selection,
                                               cursor)
                if len(events) >= EVENT_BURST:
                    yield from events
                    events = []
        except KeyboardInterrupt:  # Ctrl-C: what was matched before it is still reported
            yield from events
            raise
        yield from events
        return lines

    def _candidates(
        self, data: bytes | bytearray, end: int, first_line: int, paste: bool = False
    ) -> tuple[list[tuple[int, int, int, Selection]], int]:
        """The lines of data[:end] that hold an anchor, less request-log lines and the rows a
        terminal wrapped them onto: (start, end, number, the patterns to try), and the number of
        lines in data[:end]. paste: a row with a logger's prefix may be such a row too (the
        prompt quoted a log line), as only in a paste from a terminal (a server's own log file
        is not wrapped: its records are not walked back over)."""
        self.engine.new_chunk()  # type: ignore[union-attr]
        search, skip, position = self.engine.search, self.skip_markers, 0  # type: ignore[union-attr]
        counted_to, line_no = 0, first_line
        candidates = []
        while position < end:
            hit = search(data, position, end)
            if hit is None:
                break
            hit_start, hit_end, anchor = hit
            line_start = data.rfind(b"\n", 0, hit_start) + 1
            line_end = data.find(b"\n", hit_end, end)
            line_end = end if line_end < 0 else line_end
            position = line_end + 1
            line_no += data.count(b"\n", counted_to, line_start)
            counted_to = line_start
            if anchor in skip or _holds_any(data, skip, line_start, line_end):
                # a request log line: prompt text quoting an error is not an event, nor on the
                # lines a terminal wrapped it onto
                record_end = wrapped_end(data, line_start, line_end, end, paste)
                position = record_end + 1
                if record_end == line_end < end:
                    line_no, counted_to = line_no + 1, line_end + 1
                continue
            if (first := wrapped_request_start(data, line_start, line_end, end, skip, paste)) is not None:
                # a piece of a request log line whose marker the wrap cut
                position = max(line_end, wrapped_end(data, first, data.find(b"\n", first, end), end, paste)) + 1
                continue
            # the anchors are listed now: hyperscan still holds this stretch's hits
            candidates.append((line_start, line_end, line_no, self._targets_in(data, line_start, line_end)))
        return candidates, line_no - first_line + data.count(b"\n", counted_to, end)

    def _scan_seam(
        self, source: str, pending: list[_Pending], data: bytes | bytearray, end: int, cursor: Cursor
    ) -> Generator[Event, None, list[_Pending]]:
        """The deferred candidates at the end of the last chunk, with the next chunk's first lines;
        returns those that wait on for the chunk after it (with this one's lines): their record
        runs on to this chunk's end (a pipe's short pieces), and every one after them, in order."""
        # (a record wrapped across the seam: as much of it as a record is read)
        following = b"".join(lines_after(data, 0, CONTEXT_LINES, end, RECORD_TEXT if any(d.records for d in pending) else 0))
        whole_chunk = 0 < len(following) == end  # (the next chunk's lines are all in it)
        waiting: list[_Pending] = []
        for deferred in pending:
            buffer = deferred.buffer + following if deferred.buffer.endswith(b"\n") else deferred.buffer
            if waiting or whole_chunk and deferred.records and self._record_waits(buffer, deferred):
                waiting.append(replace(deferred, buffer=buffer))
            elif deferred.line_no > cursor.consumed_until:
                yield from self._match_at(source, buffer, deferred.offset, deferred.line_no, cursor, deferred.reported,
                                          deferred.loose, deferred.records, more=bool(data))
            elif (found := self._line_in(buffer, deferred.offset, deferred.line_no, records=deferred.records)) and \
                    found[0].records:
                yield from taken_records(self, source, found[1], found[0], cursor)
        return waiting

    def _record_waits(self, buffer: bytes, deferred: _Pending) -> bool:
        """The deferred candidate's record may go on past the buffer (up to a record's size)."""
        line_end = buffer.find(b"\n", deferred.offset)
        if line_end < 0 or len(buffer) - deferred.offset > RECORD_TEXT:
            return False
        return Lines(buffer, deferred.offset, line_end, deferred.line_no).runs_to_end(self.skip_marker_texts)

    def _match_at(
        self, source: str, buffer: bytes, line_start: int, line_no: int, cursor: Cursor,
        reported: frozenset[str] = frozenset(), loose: list[Target] | None = None,
        records: list[Target] | None = None, more: bool = True,
    ) -> list[Event]:
        """The events of a candidate line in a small buffer that holds its neighbours (a seam).
        loose, records: the patterns chosen for its second try and the facts read over its
        record where it was found (a paste's sweep). more: the input goes on past the buffer
        (False: the last lines of the input)."""
        found = self._line_in(buffer, line_start, line_no, loose or [], records or [], more)
        if found is None:
            return []
        selection, lines = found
        if not reported:
            return self._match_line(source, lines, selection, cursor)
        targets = [t for t in selection.every if t.rule.code not in reported]
        if not (targets and (lines.next_may_continue() or selection.records)):
            return []
        # the line alone was matched already: only its continuation is new (as _match_line
        # does after a match on the line alone)
        text = lines.parts(0).text
        rest = [t for t in targets if self.cut_short(t, text)]
        events = self._match_wrapped(source, lines, rest, cursor, FORWARD_WINDOWS) if rest else []
        records = [t for t in record_targets(self, selection, events) if t.rule.code not in reported]
        if records:
            events = match_records(self, source, lines, records, events, cursor, cursor.consumed_until)
        self._mark_hosted(events, lines, selection)
        cursor.mark(events)
        return events

    def _match_alone(self, source: str, buffer: bytes, line_start: int, line_no: int, cursor: Cursor) -> list[Event]:
        """The events of one line on its own (live: the lines after it are not read yet)."""
        found = self._line_in(buffer, line_start, line_no)
        if found is None:
            return []
        selection, lines = found
        parts = lines.parts(0)
        targets = lines.alone(selection)
        span = lines.record_span(self.skip_marker_texts) if selection.records else None
        if span is not None and span[0] < 0:  # a piece of a record: its facts wait for its lines
            targets = [t for t in targets if t not in selection.records]
        events = self._match_text(source, parts, parts.text, line_no, line_no, targets, cursor)
        self._mark_hosted(events, lines, selection)
        cursor.mark(events)
        return events

    def _line_in(
        self, buffer: bytes, line_start: int, line_no: int, loose: list[Target] = (),  # type: ignore[assignment]
        records: list[Target] = (),  # type: ignore[assignment]
        more: bool = True,
    ) -> tuple[Selection, Lines] | None:
        """A candidate line in a small buffer of its own and its neighbours: the patterns it
        may match and the lines, or None when it holds no pattern's anchor (nor `loose`).
        more: the input goes on past the buffer."""
        line_end = buffer.find(b"\n", line_start)
        line_end = len(buffer) if line_end < 0 else line_end
        selection = self._targets_in(buffer, line_start, line_end)
        if loose:
            selection = replace(selection, loose=[*selection.loose, *(t for t in loose if t not in selection.loose)])
        if records:
            selection = replace(selection, records=[*selection.records, *(t for t in records if t not in selection.records)])
        return (selection, Lines(buffer, line_start, line_end, line_no, more=more)) if _worth_matching(selection) else None

    def _targets_in(self, buffer: bytes | bytearray, start: int, end: int) -> Selection:
        """The patterns whose anchors the line holds, in rule-file order."""
        found = frozenset(self.engine.found_in(buffer, start, end))  # type: ignore[union-attr]
        selection = self._targets_for.get(found)
        if selection is None:  # a few combinations repeat all through a log (metrics lines)
            held = {inside for anchor in found for inside in self._closure.get(anchor, (anchor,))}
            chosen = {(t.rule_index, t.pattern_index): t for anchor in held for t in self.targets.get(anchor, ())}
            every = [chosen[key] for key in sorted(chosen)]
            # the second try is for findings: a fact's free-text value would run on over the lines
            loose = [chosen[key] for key in sorted(chosen) if chosen[key].rule.kind == "finding"]
            hosted = any(t.rule.stage in HOSTED_STAGES for t in loose)
            records = [t for t in every if t.rule.kind == "fact" and t.rule.role in RECORD_ROLES]
            selection = Selection(every, [t for t in every if t.needs <= held], hosted, loose, records)
            if len(self._targets_for) < MAX_TARGET_SETS:
                self._targets_for[found] = selection
        return selection

    # --- one candidate line ---------------------------------------------------------

    def _match_line(self, source: str, lines: Lines, selection: Selection, cursor: Cursor) -> list[Event]:
        parts = lines.parts(0)
        consumed = cursor.consumed_until
        events = self._match_text(source, parts, parts.text, lines.line_no, lines.line_no, lines.alone(selection), cursor,
                                  lines.digits_at(1))
        if events and self._read_whole(lines, parts, selection, events):
            if selection.records:
                read = {event.rule.code for event in events}
                records = [target for target in selection.records if target.rule.code not in read]
                if records:
                    events = match_records(self, source, lines, records, events, cursor, consumed)
        else:
            events = self._read_around(source, lines, selection, events, cursor, consumed)
        self._mark_hosted(events, lines, selection)
        cursor.mark(events)
        return events

    @staticmethod
    def _read_whole(lines: Lines, parts: LineParts, selection: Selection, events: list[Event]) -> bool:
        """The exact patterns read the line whole, as a line of a server's log is (nearly every
        candidate): it has a logger's prefix, the next line starts a record of its own, and a
        finding read on it leaves no other rule cut short by the line's end (it ends closed).
        Then no message goes on below it, and the second try has nothing to read beside.
        (lines.is_whole_record(), with the candidate's parts at hand: every metrics line asks.)"""
        if parts.level is None or lines.next_may_continue():
            return False
        if not selection.loose:
            return True
        for event in events:
            if event.rule.kind == "finding":
                return not cut_end(parts.text)
        return False

    def _read_around(
        self, source: str, lines: Lines, selection: Selection, events: list[Event], cursor: Cursor, consumed: int
    ) -> list[Event]:
        """The line's events when its lines around may hold more of them: a message wrapped onto
        the next lines, one the line's end cuts short, one damaged for the exact patterns, or a
        fact's record wrapped over lines."""
        parts = lines.parts(0)
        targets = selection.every
        if not events:
            if targets:
                events = self._match_wrapped(source, lines, targets, cursor)
            elif selection.loose:  # found by the paste sweep alone: the exact patterns of the next lines first
                following = self._strict_below(lines)
                events = self._match_wrapped(source, lines, following, cursor, FORWARD_WINDOWS, True) if following else []
        elif lines.next_may_continue():  # one rule matched the line; another's message may go on below
            matched = {event.rule.code for event in events}
            rest = [t for t in targets if t.rule.code not in matched and self.cut_short(t, parts.text)]
            if rest:
                events += self._match_wrapped(source, lines, rest, cursor, FORWARD_WINDOWS)
        if events:  # (a fact's free-text value would run on over the lines: findings only)
            events = [read_on(self, source, lines, event, cursor) if event.rule.kind == "finding" else event
                      for event in events]
        if selection.loose:
            events += second_try(self, source, lines, selection.loose, events, cursor)
        records = record_targets(self, selection, events)
        if records:
            events = match_records(self, source, lines, records, events, cursor, consumed)
        return events

    def targets_on(
        self, lines: Lines, offsets: range, loose: bool = False, given: list[Target] = ()  # type: ignore[assignment]
    ) -> list[Target]:
        """The patterns the anchors of the lines at these offsets choose (their second-try
        patterns when loose), with the given ones, in rule-file order; offset 0 (the candidate) is
        the given ones' part."""
        chosen = {(t.rule_index, t.pattern_index): t for t in given}
        for offset in offsets:
            bounds = lines._bounds(offset) if offset else None
            if bounds is not None:
                selection = self._targets_in(lines.buffer, bounds[0], bounds[1])
                for target in selection.loose if loose else selection.every:
                    chosen.setdefault((target.rule_index, target.pattern_index), target)
        return [chosen[key] for key in sorted(chosen)]

    def _strict_below(self, lines: Lines) -> list[Target]:
        """The exact patterns whose anchors the next lines hold (a message wrapped onto them);
        a lifecycle line below (an exception) is no wrapped message's rest."""
        return [t for t in self.targets_on(lines, range(1, CONTEXT_LINES + 1)) if t.rule.role is None]

    def _mark_hosted(self, events: list[Event], lines: Lines, selection: Selection) -> None:
        if selection.hosted and any(event.rule.stage in HOSTED_STAGES and not event.hosted for event in events):
            context = lines.context_text(self.skip_marker_texts)  # parsing the neighbours costs: only for request errors
            hosted = any(marker in context for marker in self.hosted_markers)
            for event in events:
                event.hosted = event.hosted or (event.rule.stage in HOSTED_STAGES and hosted)

    def cut_short(self, target: Target, text: str) -> bool:
        """The pattern matches the line's end as far as it goes: its message may continue on the next line."""
        if not may_match_cut(target.pattern.compiled.pattern, text):
            return False
        try:
            match = target.pattern.compiled.search(text, partial=True, timeout=MATCH_TIMEOUT)
        except TimeoutError:
            return False
        return match is not None and match.partial and match.end() > match.start()

    def _match_wrapped(
        self, source: str, lines: Lines, targets: list[Target], cursor: Cursor, windows=WRAP_WINDOWS,
        starting_here: bool = False,
    ) -> list[Event]:
        """The events of the first window (lines before, after) in which a message matches.
        Another rule's message that goes on past that window's end (a metrics line is two
        findings) is looked for in the wider windows that start where it does.
        starting_here: only a message that starts on the candidate line itself counts."""
        for index, (before, after) in enumerate(windows):
            texts = [lines.parts(offset).text for offset in range(before, after + 1)]
            if any(t is None for t in texts):
                continue
            if any(lines.parts(offset).level for offset in range(before + 1, after + 1)):
                continue  # a line with a logger's prefix starts a record of its own: no message's rest
            for joined, candidate in joins(texts, -before):
                events = self._match_text(
                    source, lines.parts(0), joined, lines.line_no + before, lines.line_no + after, targets, cursor,
                    lines.digits_at(after + 1), candidate,
                )
                if starting_here:  # rstrip: the spaced join drops the line's trailing blanks
                    events = [e for e in events if joined.find(e.excerpt[:40]) < len(texts[0].rstrip())]
                # a window back from a line that holds a message's tail reads that message again
                events = [e for e in events if not cursor.began(e)]
                if events:
                    matched = {event.rule.code for event in events}
                    # the lines this window takes are not candidates again: the patterns their own
                    # anchors chose are tried here ("Input length (2" / "0132) exceeds ...": the
                    # exception's line and the context-length rule's anchor on the next)
                    below = [t for t in self.targets_on(lines, range(1, after + 1)) if t.rule.code not in matched and t not in targets]
                    if below:
                        events += self._match_text(source, lines.parts(0), joined, lines.line_no + before,
                                                   lines.line_no + after, below, cursor, lines.digits_at(after + 1),
                                                   candidate)
                        matched = {event.rule.code for event in events}
                    # a lifecycle reading alone (a wrapped exception line) does not take the lines it
                    # joined: a message there that goes on past this window is read on their turn
                    if any(event.rule.role is None for event in events):
                        cursor.consumed_until = max(cursor.consumed_until, lines.line_no + after)
                    rest = [t for t in targets if t.rule.code not in matched and self.cut_short(t, joined)]
                    wider = [(b, a) for b, a in windows[index + 1 :] if b == before and a > after]
                    if rest and wider:  # (the wider windows' own lines may choose a rule read here already)
                        wider_events = self._match_wrapped(source, lines, rest, cursor, wider, starting_here)
                        events += [event for event in wider_events if event.rule.code not in matched]
                    return events
        return []

    def _match_text(
        self, source: str, parts: LineParts, text: str, first: int, last: int, targets: list[Target], cursor: Cursor,
        digits_follow: Callable[[], bool] | None = None, candidate: tuple[int, int] | None = None,
    ) -> list[Event]:
        """At most one event per rule: its first pattern (in file order) that matches.
        digits_follow: the next line starts with a digit. A match that ends the text on a
        digit then read a number the wrapping cut ("limit of 4" / "096"): a wider window reads it.
        candidate: where the candidate line's text is in the joined lines. A match that reads
        none of it is another line's own message, not this line's wrapped one (a line damaged
        inside, "i\x01s greater", no longer matched alone and took the message below it)."""
        events: list[Event] = []
        matched_rule = -1  # targets come in rule order: a rule's patterns are next to each other
        disabled = self.disabled_patterns
        record = None
        for target in targets:
            rule, pattern = target.rule, target.pattern
            if target.rule_index == matched_rule or (disabled and (rule.code, pattern.id) in disabled):
                continue
            search = target.search or self.bind_search(target)
            try:
                match = search(text)
            except TimeoutError:
                self.timed_out(rule.code, pattern.id, f"{source}:{first}", cursor)
                continue
            if match is None:
                continue
            start, end = match.span()
            if candidate is not None and not (start < candidate[1] and end > candidate[0]):
                continue
            if end == len(text):
                if digits_follow is not None and text[-1:].isdigit() and digits_follow():
                    continue
                groups = match.groupdict()
            else:
                groups = whole_groups(match, text) if target.reads_ahead else match.groupdict()
                if text[end] in MARK_STARTS and number_cut_at(text, end):
                    groups = without_cut_value(match, groups)
            if record is None:
                record = Record(source, first, last, text, parts.level, parts.time, parts.process, parts.rank)
            read_fields = target.read_fields
            if read_fields is None:
                read_fields = target.read_fields = field_reader(rule, list(groups))
            fields = read_fields(groups)
            quoted = functools.partial(excerpt, text, start, end)
            events.append(Event(rule, record, fields, quoted, pattern.id, pattern.hosted))
            matched_rule = target.rule_index
        return events

    def bind_search(self, target: Target) -> Callable[[str], Any]:
        """A built-in pattern searches with stdlib re under the watchdog where it can run (the
        main thread on POSIX): two to four times quicker on a line. Others keep regex's timeout."""
        if self._watched and target.builtin:
            target.search = WATCHDOG.bound(rulecache.compiled_re(target.pattern.compiled.pattern).search)
        else:
            target.search = functools.partial(target.pattern.compiled.search, timeout=MATCH_TIMEOUT)
        return target.search

    def timed_out(self, code: str, pattern_id: str, where: str, cursor: Cursor) -> None:
        """Warn; after MAX_TIMEOUTS the pattern is off, so a backtracking rule costs seconds, not hours."""
        key = (code, pattern_id)
        self.timeouts[key] = self.timeouts.get(key, 0) + 1
        message = f"{where}: rule {code} pattern {pattern_id} took longer than {MATCH_TIMEOUT}s and was skipped on this line"
        if self.timeouts[key] >= MAX_TIMEOUTS:
            self.disabled_patterns.add(key)
            message += f"; it timed out {MAX_TIMEOUTS} times and is off for the rest of the scan"
        cursor.warnings.append(message)


def _worth_matching(selection: Selection) -> bool:
    return bool(selection.every or selection.loose or selection.records)


def _holds_any(data: bytes | bytearray, markers: list[bytes], start: int, end: int) -> bool:
    for marker in markers:
        if data.find(marker, start, end) >= 0:
            return True
    return False


@dataclass(slots=True)
class _Pending:
    """A candidate at the end of a chunk, copied with its neighbours, waiting for the next lines."""

    buffer: bytes
    offset: int
    line_no: int
    reported: frozenset[str]  # rules already reported for it on its own (live)
    loose: list[Target]  # the patterns of its second try
    records: list[Target] = field(default_factory=list)  # the facts read over its record (a paste's sweep)


