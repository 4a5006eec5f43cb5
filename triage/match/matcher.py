"""Find rule matches in the records of chunks of raw log bytes.

One path for every message: the anchor pass (literal texts every match of a pattern holds,
derived from the regexes; anchors.py) finds candidate rows in a chunk's raw bytes; the
record that holds a candidate is assembled (triage.input.assemble: its rows decided once,
joined, then decoded, with a map back to their lines); the exact patterns whose anchors it
holds are matched on it; and the finding rules they did not read are tried in the loose form
(reading.py), which reads a message as people paste it. A record holding a request-log line
(a prompt quoted whole) is passed over without being decoded.

The reader ends every chunk at a record's first row, so a record is never cut by a chunk.
The records of the input's first PASTE_SIZE bytes are all read, not only those the anchor
pass points at, and their text is swept in the loose form for the heads of messages whose
every anchor a wrap or a re-quoting broke: a paste, an issue, a chat message is that small.
Past it (a server's log) a record is swept only when it is a paste's: several rows, or no
logger header.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any

from triage.input.assemble import MAX_ROW, LogRecord, Rows, assemble, record_around, request_end
from triage.input.lineparse import holds_byte_of
from triage.input.reader import Chunk
from triage.match.anchors import anchors_for, keyword_anchor, may_match_cut, needs_keywords, opens_in, strong_anchor
from triage.match.cut import MARK_STARTS, cut_end, number_cut_at, without_cut_value
from triage.match.engines import cached_closure, make_engine, substring_closure
from triage.match.fields import excerpt, field_reader, whole_groups
from triage.match.loose import LooseMatch, derive_all, normalise
from triage.match.reading import loose_cut_short, loose_readings
from triage.match.regex_tree import seam_tolerant
from triage.match.targets import Selection, Target
from triage.match.watchdog import Watchdog
from triage.match.window import Window, may_continue
from triage.match.cut import before_mark, cut_mark
from triage.model import Event, Record
from triage.rules import cache as rulecache
from triage.rules.ruleset import MATCH_TIMEOUT, Rule, RuleSet, builtin_rule_files

MAX_TARGET_SETS = 4096  # cached anchor combinations (bounded: memory stays flat)
MAX_TIMEOUTS = 3  # a pattern that times out this often is skipped for the rest of the scan
HOSTED_STAGES = {"request"}
EVENT_BURST = 256  # events of a chunk handed on together (bounded: a chunk of error lines)
WATCHDOG = Watchdog(MATCH_TIMEOUT)  # bounds the stdlib re searches of built-in patterns
PASTE_SIZE = 256 * 1024  # the input's first bytes, whose every record is read and swept
MIN_SWEPT_ANCHOR = 6  # characters a fact's anchor keeps in the loose form, at least, to be swept for
RECORD_ROLES = (None, "ready")  # facts the run summary keeps: read over their whole record, cut or not
HOSTED_CONTEXT = 2  # rows around a record its hosted markers may stand on (a client's URL line)
Found = tuple[int, int, dict[str, str | None], list[tuple[int, int]], int, int]  # span, groups, values, the text read
Taken = tuple[str, int, int, list[tuple[int, int]]]  # an exact reading's rule, its span of the record's text, its values
# Bytes that decoding a row removes or rewrites, which may join raw text into an anchor:
# escapes, ANSI, CR, NUL and the other control characters, a JSON log record, an HTML entity.
REWRITTEN = bytes([*b"\\\x1b\r{&", *range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F, 0xC2])


class Matcher:
    def __init__(self, ruleset: RuleSet, rules: Iterable[Rule] | None = None, engine: str = "auto", live: bool = False):
        """live: kept for the callers that say so; a record is reported when its chunk is read,
        and the reader hands a live input's last record on when the input goes quiet."""
        self.ruleset = ruleset
        self.live = live
        self.rules = list(rules if rules is not None else ruleset.rules)
        self.skip_markers = [m.encode() for m in ruleset.skip_markers]
        self.markers = tuple(self.skip_markers)
        self.hosted_markers = list(ruleset.hosted_markers)
        self.warnings: list[str] = []
        self.timeouts: dict[tuple[str, str], int] = {}  # (rule code, pattern id) -> searches cut short
        self.disabled_patterns: set[tuple[str, str]] = set()
        self.targets = self._targets()
        unique = sorted({id(t): t for ts in self.targets.values() for t in ts}.values(), key=lambda t: (t.rule_index, t.pattern_index))
        self._findings = [t for t in unique if t.rule.kind == "finding"]
        self._swept_facts = self._fact_probes(unique)
        self._closure = cached_closure(self.targets, lambda: substring_closure(self.targets))
        self._targets_for: dict[frozenset[bytes], Selection] = {}
        self._watched = False  # the targets' searches use stdlib re under the watchdog
        self._derived = False  # the loose forms of every finding pattern are known (a sweep asked)
        all_anchors = sorted(set(self.targets) | set(self.skip_markers))
        self.engine = make_engine(all_anchors, engine, self.skip_markers) if all_anchors else None

    def _targets(self) -> dict[bytes, list[Target]]:
        """Anchor -> the patterns a row holding it may match."""
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

    def _fact_probes(self, targets: list[Target]) -> list[tuple[str, list[Target]]]:
        """The anchors of the facts a run keeps, in the loose form: a wrap that cut an anchor
        itself ("Available KV cache me" / "mory: 11.25 GiB") left no row holding it."""
        probes: dict[str, list[Target]] = {}
        for anchor, anchored in self.targets.items():
            facts = [t for t in anchored if t.rule.kind == "fact" and t.rule.role in RECORD_ROLES]
            probe = normalise(anchor.decode("utf-8", "replace")).lower() if facts else ""
            if len(probe) >= MIN_SWEPT_ANCHOR:
                probes.setdefault(probe, []).extend(t for t in facts if t not in probes.get(probe, []))
        return list(probes.items())

    def time_phases(self, phases: Any) -> None:
        """Time the anchor pass (finding the next candidate, and the anchors a record holds) and
        the reading of records as phases "pass" and "match" (a pipeline.Phases: the benchmarks;
        "match" holds the anchors' part too). Only these steps are wrapped: a scan that is not
        measured pays nothing."""
        self._search = phases.timing("pass", self._search)  # type: ignore[method-assign]
        self._targets_in = phases.timing("pass", self._targets_in)  # type: ignore[method-assign]
        self._read = phases.timing("match", self._read)  # type: ignore[method-assign]

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
                target.search = target.seam_search = None
            self._watched = watched
        for chunk in chunks:
            chunk.lines = yield from self._scan_chunk(source, chunk)  # the reader need not count them again

    def _scan_chunk(self, source: str, chunk: Chunk) -> Generator[Event, None, int]:
        """Read the records of chunk.data[:end]: every one in the input's first PASTE_SIZE
        bytes, then those that hold an anchor. data may be the reader's buffer, refilled after
        this chunk: every search stops at end. Returns the chunk's line count."""
        data, end = chunk.data, chunk.end
        if self.engine is None:
            return data.count(b"\n", 0, end)
        self.engine.new_chunk()
        swept_to = max(0, min(end, PASTE_SIZE - chunk.offset))
        rows = Rows(data, end, self.markers, paste=swept_to)
        position, counted, line = 0, 0, chunk.first_line
        events: list[Event] = []
        try:
            while position < end:
                row_start = position if position < swept_to else self._search(data, position, end)
                if row_start is None:
                    break
                line += data.count(b"\n", counted, row_start)
                counted = row_start
                stop = self._skipped(data, row_start, end)
                if stop is None:
                    first, first_line, stop = record_around(rows, row_start, line)
                    record = assemble(rows, first, first_line, stop)
                    if not record.skip:
                        events += self._read(source, record, rows, first, stop, row_start < swept_to)
                rows.floor = position = stop + 1
                if len(events) >= EVENT_BURST:
                    yield from events
                    events = []
        except KeyboardInterrupt:  # Ctrl-C: what was matched before it is still reported
            yield from events
            raise
        yield from events
        return line - chunk.first_line + data.count(b"\n", counted, end)

    def _search(self, data: bytes | bytearray, position: int, end: int) -> int | None:
        """Where the next row that holds an anchor starts (None: none in data[position:end])."""
        hit = self.engine.search(data, position, end)  # type: ignore[union-attr]
        return None if hit is None else max(position, data.rfind(b"\n", 0, hit[0]) + 1)

    def _skipped(self, data: bytes | bytearray, start: int, end: int) -> int | None:
        """The end of the request-log line that starts at `start` (a prompt: passed over whole,
        with the rows a terminal wrapped it onto, without decoding it); None: no such line."""
        row_end = data.find(b"\n", start, end)
        row_end = end if row_end < 0 else row_end
        for marker in self.skip_markers:
            if data.find(marker, start, row_end) >= 0:
                return request_end(data, start, row_end, end, self.markers)
        return None

    # --- one record --------------------------------------------------------------------

    def _read(self, source: str, record: LogRecord, rows: Rows, start: int, stop: int, swept: bool) -> list[Event]:
        """The events of one record: its exact patterns, then the loose form for the finding
        rules they did not read. A paste's record (the input's first bytes, several rows, or no
        logger's header) is also swept in the loose form for messages whose every anchor a wrap
        broke."""
        selection = self._targets_in(rows.data, start, stop)
        paste = len(record.rows) > 1 or record.head.level is None
        findings, facts = self._swept(record) if swept or paste else ([], [])
        if not (selection.every or findings or facts):
            return []
        alone = len(record.rows) == 1 and not holds_byte_of(rows.data[start:stop], REWRITTEN)
        targets = _merged(selection.alone if alone and len(selection.alone) < len(selection.every) else selection.every, facts)
        events, read = self._exact(source, record, targets)
        loose = _merged(selection.findings, findings)
        if loose and (paste or swept or not _read_closed(record, events)):
            events += self._loose(source, record, loose, events, read)
        if selection.hosted or findings:
            self._mark_hosted(events, rows, start, stop)
        events.sort(key=lambda event: event.record.line)
        return events

    def _swept(self, record: LogRecord) -> tuple[list[Target], list[Target]]:
        """The finding patterns whose head, and the facts whose anchor, the record holds in
        the loose form (a message whose every anchor a wrap or a re-quoting broke)."""
        form = normalise(record.text).lower()
        self._derive_loose_forms()
        findings = [t for t in self._findings if (loose := t.loose_form()) is not None and loose.probe and loose.probe in form]
        facts = sorted({id(t): t for probe, targets in self._swept_facts if probe in form for t in targets}.values(),
                       key=lambda t: (t.rule_index, t.pattern_index))
        return findings, facts

    def _derive_loose_forms(self) -> None:
        """Every finding pattern's loose form, derived together (from the rule cache)."""
        if self._derived:
            return
        underived = [t.pattern.compiled.pattern for t in self._findings if t.loose is False]
        if underived:
            derived = derive_all(underived)
            for target in self._findings:
                if target.loose is False:
                    target.loose = derived[target.pattern.compiled.pattern]
        self._derived = True

    def _targets_in(self, buffer: bytes | bytearray, start: int, end: int) -> Selection:
        """The patterns whose anchors the record holds, in rule-file order."""
        found = frozenset(self.engine.found_in(buffer, start, end))  # type: ignore[union-attr]
        selection = self._targets_for.get(found)
        if selection is None:  # a few combinations repeat all through a log (metrics lines)
            held = {inside for anchor in found for inside in self._closure.get(anchor, (anchor,))}
            chosen = {(t.rule_index, t.pattern_index): t for anchor in held for t in self.targets.get(anchor, ())}
            every = [chosen[key] for key in sorted(chosen)]
            findings = [t for t in every if t.rule.kind == "finding"]
            hosted = any(t.rule.stage in HOSTED_STAGES for t in findings)
            selection = Selection(every, [t for t in every if t.needs <= held], hosted, findings)
            if len(self._targets_for) < MAX_TARGET_SETS:
                self._targets_for[found] = selection
        return selection

    # --- the exact patterns --------------------------------------------------------------

    def _exact(self, source: str, record: LogRecord, targets: list[Target]) -> tuple[list[Event], list[Taken]]:
        """The rules' exact readings of the record, and where the findings among them and their
        values are in its text. Each row is read alone, then each line a terminal's wrap cut into
        rows, then the record's rows joined (a message a writer wrapped by hand, an exception's
        message over its rows); the joins with each pattern's seam-tolerant form, as a wrap may
        have replaced a blank. A join's reading stands where no row's does, or where it reads
        more of the same message. A rule's first pattern (in file order) that reads a place wins
        it; a fact states one value a row (a logger's record is one row vLLM printed, however it
        was wrapped), a finding is read as often as its message is there. A fact the run keeps
        that no pattern reads whole is read as far as the record goes (cut short)."""
        if len(record.rows) == 1:
            return self._exact_row(source, record, targets)
        events: list[Event] = []
        spans: dict[str, list[tuple[int, int]]] = {}  # rule -> what its readings took of the text
        read: list[Taken] = []  # what the findings read
        places = self._places(record)
        for target in targets:
            rule, pattern = target.rule, target.pattern
            if self.disabled_patterns and (rule.code, pattern.id) in self.disabled_patterns:
                continue
            taken = spans.setdefault(rule.code, [])

            def timed_out(at: int, target: Target = target) -> None:
                self.timed_out(target.rule.code, target.pattern.id, f"{source}:{record.lines(at, at)[0]}")

            for start, end, groups, values, low, high in self._found(target, record, places, taken, timed_out):
                taken.append((start, end))
                event = self._event(source, record, target, start, end, groups, low, high)
                if rule.kind == "finding":
                    read.append((rule.code, start, end, values))
                    if any(e.rule is rule and e.record.line == event.record.line and e.fields == event.fields for e in events):
                        continue  # (the same message again on its line: a client's error quotes it twice)
                events.append(event)
        for target in targets:
            if target.rule.kind == "fact" and target.rule.role in RECORD_ROLES and not spans.get(target.rule.code):
                cut = self._cut_fact(record, target)
                if cut is not None:
                    spans[target.rule.code] = [cut[:2]]
                    events.append(self._event(source, record, target, *cut))
        return events, read

    def _exact_row(self, source: str, record: LogRecord, targets: list[Target]) -> tuple[list[Event], list[Taken]]:
        """_exact() of a record of one row, nearly every record of a server's log: each rule's
        first pattern that matches it, a finding as often as its message is there."""
        text, events, read = record.text, [], []
        matched: dict[str, list[tuple[int, int]]] = {}
        disabled = self.disabled_patterns
        for target in targets:
            rule = target.rule
            taken = matched.get(rule.code)
            if taken is not None and rule.kind != "finding" or disabled and (rule.code, target.pattern.id) in disabled:
                continue
            search = target.search or self.bind_search(target)
            at = 0
            while True:
                try:
                    match = search(text, at) if at else search(text)
                except TimeoutError:
                    self.timed_out(rule.code, target.pattern.id, f"{source}:{record.line}")
                    break
                if match is None:
                    break
                start, end = match.span()
                if taken is None:
                    taken = matched[rule.code] = []
                if not any(start < high and end > low for low, high in taken):
                    taken.append((start, end))
                    event = self._event(source, record, target, start, end, _groups(target, match, text))
                    if rule.kind != "finding":
                        events.append(event)
                        break
                    read.append((rule.code, start, end, [match.span(name) for name in target.pattern.fields
                                                         if match.group(name) is not None]))
                    if not any(e.rule is rule and e.fields == event.fields for e in events):
                        events.append(event)
                at = max(end, start + 1)
                if at >= len(text):
                    break
        for target in targets:
            if target.rule.kind == "fact" and target.rule.role in RECORD_ROLES and target.rule.code not in matched:
                cut = self._cut_fact(record, target)
                if cut is not None:
                    matched[target.rule.code] = [cut[:2]]
                    events.append(self._event(source, record, target, *cut))
        return events, read

    @staticmethod
    def _places(record: LogRecord) -> list[tuple[int, int, bool]]:
        """Where the record is read, in turn: (start, end of text, joined: with the seam-tolerant
        form) of each row, each line wrapped over rows, and the whole record."""
        text = record.text
        if len(record.rows) == 1:
            return [(0, len(text), False)]
        bounds = record.bounds()
        # (a row's text less the blank the join put before it: the row above's, or a line's break)
        places = [(low + (text[low : low + 1] == " " and index > 0), high, False)
                  for index, (low, high) in enumerate(itertools.pairwise(bounds))]
        firsts = [*record.wraps, len(record.rows)]
        places += [(bounds[first], bounds[after], True) for first, after in itertools.pairwise(firsts) if after - first > 1]
        return [*places, (0, len(text), True)]

    @staticmethod
    def _cut_by_wrap(record: LogRecord, end: int, high: int) -> bool:
        """A reading that ends where its row does may be cut there: a number that goes on in
        the next row ("limit of 4" / "096"), or, inside a line a terminal's wrap cut into rows,
        a value that does ("version 0." / "10.1.1", "model nvidia/" / "Llama-3.1-8B"): a join
        that reads on from the same place reads it whole."""
        text = record.text
        if end != high or high >= len(text) or text[high].isspace() or text[end - 1].isspace():
            return False
        return text[end - 1].isdigit() and text[high].isdigit() or record.row_at(high) not in record.wraps

    def _found(self, target: Target, record: LogRecord, places: list[tuple[int, int, bool]], taken: list[tuple[int, int]],
               timed_out: Callable[[int], None]) -> list[Found]:
        """The target's readings of the record's places: of those that overlap (or, of a fact,
        start on one line vLLM logged), the first that reads the most, or reads on past where its
        row cut the other, or (a fact) starts first. timed_out(at): a search from text[at] ran
        too long."""
        fact = target.rule.kind != "finding"
        as_printed = target.rule.role not in RECORD_ROLES  # a traceback's or a process's line: joined only if no row reads it
        found: list[Found] = []
        for low, high, joined in places:
            if as_printed and joined and (found or taken):
                break
            for reading in self._readings(target, record, low, high, joined, taken, timed_out):
                start, end, groups, _ = reading
                line = record.call_at(start)
                same = [f for f in found if f[0] < end and start < f[1] or fact and record.call_at(f[0]) == line]
                fields = sum(value is not None for value in groups.values())
                if not same or any(fields > sum(value is not None for value in f[2].values()) or
                                   f[0] == start and end > f[1] and self._cut_by_wrap(record, f[1], f[5]) or
                                   fact and start < f[0] and record.call_at(f[0]) == line for f in same):  # (a line's first message)
                    found = [f for f in found if f not in same] + [(*reading, low, high)]
        found.sort(key=lambda reading: reading[0])
        if fact and taken:  # a fact states one value a line: a pattern before this one read some
            found = [f for f in found if not any(record.call_at(f[0]) == record.call_at(start) for start, _ in taken)]
        return found

    def _readings(self, target: Target, record: LogRecord, low: int, high: int, joined: bool, taken: list[tuple[int, int]],
                  timed_out: Callable[[int], None]) -> Iterator[tuple[int, int, dict[str, str | None], list[tuple[int, int]]]]:
        """The target's readings of the record's text[low:high], in order, none overlapping one
        taken: their span in text, their groups as read, and their values' spans (a fact: the
        first alone)."""
        text = record.text
        piece = text if low == 0 and high == len(text) else text[low:high]
        search = (target.seam_search or self.bind_seam_search(target)) if joined else (target.search or self.bind_search(target))
        at = 0
        while at <= len(piece):
            try:
                match = search(piece, at)
            except TimeoutError:
                timed_out(low + at)
                return
            if match is None:
                return
            at = max(match.end(), match.start() + 1)
            start, end = match.start() + low, match.end() + low
            if any(start < high_ and end > low_ for low_, high_ in taken):
                continue
            values = [(match.start(name) + low, match.end(name) + low) for name in target.pattern.fields
                      if match.group(name) is not None]
            yield start, end, _groups(target, match, piece), values
            if target.rule.kind != "finding":
                return

    def _event(self, source: str, record: LogRecord, target: Target, start: int, end: int,
               groups: dict[str, str | None], low: int = 0, high: int | None = None) -> Event:
        """The event of a reading at text[start:end] of the record, read in text[low:high] (its
        line, or the record's lines): that is the text the event quotes and keeps."""
        read_fields = target.read_fields
        if read_fields is None:
            read_fields = target.read_fields = field_reader(target.rule, list(groups))
        first, last = record.lines(start, end) if len(record.rows) > 1 else (record.line, record.line)
        head, text = record.head, record.text
        if low or high is not None and high < len(text):
            text, start, end = text[low:high], start - low, end - low
        where = Record(source, first, last, text, head.level, head.time, head.process, head.rank)
        return Event(target.rule, where, read_fields(groups), functools.partial(excerpt, text, start, end), target.pattern.id,
                     target.pattern.hosted)

    def _cut_fact(self, record: LogRecord, target: Target) -> tuple[int, int, dict[str, str | None]] | None:
        """A fact's message cut short in the record (a paste that stops inside it, a progress
        bar printed after it): its span and the groups it closed before the record's text
        ends, as far as the record goes, or its first rows go (the rows after the cut are not its)."""
        source_text = target.pattern.compiled.pattern
        bounds = record.bounds()
        for stop in [len(record.text), *reversed(bounds[1:-1])]:
            text = record.text[:stop]  # (a blank after a number at the cut: it was printed whole)
            if not text.strip() or not opens_in(source_text, text) or not may_match_cut(source_text, text):
                continue
            try:
                cut = target.pattern.compiled.search(text, partial=True, timeout=MATCH_TIMEOUT)
            except TimeoutError:
                return None
            if cut is None or not cut.partial:
                continue
            groups = {name: value if value is not None and cut.end(name) < len(text) else None
                      for name, value in cut.groupdict().items()}
            if any(value is not None for value in groups.values()):  # not the head alone: a fact is its values
                return cut.start(), cut.end(), groups
        return None

    def bind_search(self, target: Target) -> Callable[..., Any]:
        """A built-in pattern searches with stdlib re under the watchdog where it can run (the
        main thread on POSIX): two to four times quicker on a row. Others keep regex's timeout."""
        if self._watched and target.builtin:
            target.search = WATCHDOG.bound(rulecache.compiled_re(target.pattern.compiled.pattern).search)
        else:
            target.search = functools.partial(target.pattern.compiled.search, timeout=MATCH_TIMEOUT)
        return target.search

    def bind_seam_search(self, target: Target) -> Callable[..., Any]:
        """The search of the target's seam-tolerant form (regex_tree.SeamTolerant), for rows joined."""
        source = seam_tolerant(target.pattern.compiled.pattern) or target.pattern.compiled.pattern
        if self._watched and target.builtin:
            target.seam_search = WATCHDOG.bound(rulecache.compiled_re(source).search)
        else:
            target.seam_search = functools.partial(rulecache.compiled_regex(source).search, timeout=MATCH_TIMEOUT)
        return target.seam_search

    # --- the loose form ------------------------------------------------------------------

    def _loose(self, source: str, record: LogRecord, targets: list[Target], exact: list[Event],
               taken: list[Taken]) -> list[Event]:
        """The finding rules the exact patterns did not read, in the loose form of the record's
        rows: each stretch of rows a message may run over (a row of the writer's prose in
        another script, or one after a viewer's cut mark, starts another), none over a message
        the exact patterns read."""
        read = {e.rule.code for e in exact if e.rule.kind == "finding"}
        if read and len(record.rows) == 1 and record.head.level is not None:
            # a server's line read: only a second message the line's end cuts short (a metrics line)
            end = cut_end(record.text)
            if not end:
                return []
            cut = record.text[:end]
            targets = [t for t in targets if t.rule.code not in read
                       and (self.cut_short(t, cut) or not cut.isascii() and loose_cut_short(t, cut))]
            if not targets:
                return []
            taken = []  # (the row's findings are another message beside this one: a metrics line is two)
        form = normalise(record.text).lower()  # (a quick test before the map of the loose form is made)
        targets = [t for t in targets if (loose := t.loose_form()) is not None and all(piece in form for piece in loose.pieces)]
        if not targets:
            return []
        events: list[Event] = []
        for window, offsets in _windows(record):
            def overlaps(found: LooseMatch, code: str, window: Window = window, offsets: list[int] = offsets) -> bool:
                """The reading reads a message an exact reading of a finding read: it overlaps
                that reading, of the same rule, or of another with no value where that one has
                none (a rival wording of the message, not a second finding of it: a metrics
                line is two)."""
                low, high = _record_span(window, offsets, found.start, found.end)
                values = [_record_span(window, offsets, *span) for span in found.value_spans]
                return any(low < end and high > start and (
                    rule == code or not any(all(b <= v_low or a >= v_high for v_low, v_high in spans) for a, b in values))
                    for rule, start, end, spans in taken)

            def timed_out(target: Target, window: Window = window) -> None:
                self.timed_out(target.rule.code, target.pattern.id, f"{source}:{window.lines[0]}")

            for found, target in loose_readings(window, targets, overlaps, timed_out):
                first, last = window.rows_of(found.start, found.end)
                text = window.original(first, last, found.start)
                head = record.head
                where = Record(source, window.lines[first], window.lines[last], text, head.level, head.time, head.process,
                               head.rank)
                names = list(target.pattern.fields)
                read_fields = target.read_fields = target.read_fields or field_reader(target.rule, names)
                fields = read_fields({name: found.fields.get(name) for name in names})
                events.append(Event(target.rule, where, fields, excerpt(text, 0, len(text)), target.pattern.id,
                                    target.pattern.hosted))
        return events

    def cut_short(self, target: Target, text: str) -> bool:
        """The pattern matches the text's end as far as it goes: its message may be cut there."""
        if not may_match_cut(target.pattern.compiled.pattern, text):
            return False
        try:
            match = target.pattern.compiled.search(text, partial=True, timeout=MATCH_TIMEOUT)
        except TimeoutError:
            return False
        return match is not None and match.partial and match.end() > match.start()

    def _mark_hosted(self, events: list[Event], rows: Rows, start: int, stop: int) -> None:
        """A request error that a hosted API sent (its markers on the record or the rows
        around it: a client's URL line) is no vLLM server's."""
        if not any(event.rule.stage in HOSTED_STAGES and not event.hosted for event in events):
            return
        data = rows.data
        for _ in range(HOSTED_CONTEXT):
            above = rows.before(start)
            start = start if above is None else above
        for _ in range(HOSTED_CONTEXT):
            stop = stop if stop >= rows.end else rows.row_end(stop + 1)
        context = [row for row in bytes(data[start:stop]).split(b"\n")
                   if len(row) <= MAX_ROW and not any(marker in row for marker in self.skip_markers)]
        text = "\n".join(rows_text.decode("utf-8", "replace") for rows_text in context)
        hosted = any(marker in text for marker in self.hosted_markers)
        for event in events:
            event.hosted = event.hosted or (event.rule.stage in HOSTED_STAGES and hosted)

    def timed_out(self, code: str, pattern_id: str, where: str) -> None:
        """Warn; after MAX_TIMEOUTS the pattern is off, so a backtracking rule costs seconds, not hours."""
        key = (code, pattern_id)
        self.timeouts[key] = self.timeouts.get(key, 0) + 1
        message = f"{where}: rule {code} pattern {pattern_id} took longer than {MATCH_TIMEOUT}s and was skipped on this line"
        if self.timeouts[key] >= MAX_TIMEOUTS:
            self.disabled_patterns.add(key)
            message += f"; it timed out {MAX_TIMEOUTS} times and is off for the rest of the scan"
        self.warnings.append(message)


def _merged(first: list[Target], second: list[Target]) -> list[Target]:
    """Both lists of targets, once each, in rule-file order."""
    if not second:
        return first
    chosen = {(t.rule_index, t.pattern_index): t for t in [*first, *second]}
    return [chosen[key] for key in sorted(chosen)]


def _read_closed(record: LogRecord, events: list[Event]) -> bool:
    """The record was read whole by its exact patterns, as a row of a server's log is: a
    finding read on it, and its text ends closed (no second message cut short after it)."""
    return any(event.rule.kind == "finding" for event in events) and not cut_end(record.text)


def _groups(target: Target, match: Any, text: str) -> dict[str, str | None]:
    """A match's groups as read: one read ahead to where the text was cut, or one running up
    to a viewer's cut mark (its further digits lost), is not read."""
    if match.end() == len(text):
        return match.groupdict()
    groups = whole_groups(match, text) if target.reads_ahead else match.groupdict()
    if text[match.end()] in MARK_STARTS and number_cut_at(text, match.end()):
        groups = without_cut_value(match, groups)
    return groups


def _windows(record: LogRecord) -> Iterator[tuple[Window, list[int]]]:
    """The stretches of the record's rows a message may run over, in the loose form, each with
    where its rows start in the record's text: a row of the writer's prose in another script,
    or a row after one a viewer cut, starts another stretch."""
    bounds = record.bounds()
    lines: list[int] = []
    texts: list[str] = []
    offsets: list[int] = []
    for index, row in enumerate(record.rows):
        text = record.text[bounds[index] : bounds[index + 1]]
        cut_above = bool(texts) and cut_mark(texts[-1], len(texts[-1])) is not None
        if texts and (cut_above or not may_continue(text)):
            yield Window(lines, texts, ends=False), offsets
            lines, texts, offsets = [], [], []
        lines.append(row.line)
        texts.append(before_mark(text))
        offsets.append(bounds[index])
    if texts:
        yield Window(lines, texts), offsets


def _record_span(window: Window, offsets: list[int], start: int, end: int) -> tuple[int, int]:
    """The loose span start..end of the window as a span of the record's text."""
    first, last = window.rows_of(start, end)
    return offsets[first] + window.at(first, start), offsets[last] + window.at(last, end)
