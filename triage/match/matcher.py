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
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from triage.input.reader import Chunk
from triage.input.records import LineParts, decode, join_variants, parse_line
from triage.match.anchors import (
    anchors_for,
    keyword_anchor,
    needs_keywords,
    strong_anchor,
)
from triage.match.engines import ReEngine, cached_closure, make_engine
from triage.match.loose import (
    QUOTES,
    TRUNCATED,
    LooseMatch,
    LoosePattern,
    derive_all,
    derive_loose,
    loose_match,
    normalise,
)
from triage.match.watchdog import Watchdog
from triage.model import Event, Record
from triage.rules.ruleset import (
    MATCH_TIMEOUT,
    Pattern,
    Rule,
    RuleSet,
    builtin_rule_files,
)

CONTEXT_LINES = 2  # a message may continue over this many lines before or after its anchor
# Relative line windows tried when a candidate line does not match on its own.
WRAP_WINDOWS = ((0, 1), (0, 2), (-1, 0), (-1, 1), (-2, 0))
FORWARD_WINDOWS = WRAP_WINDOWS[:2]
# A line that starts like this is a record of its own, not the rest of a wrapped message.
NEW_RECORD = re.compile(rb"(?:\x1b\[[\d;]*m)*(?:\([^)\n]{1,80}\) )?(?:\x1b\[[\d;]*m)*(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\b")
# Bytes that decoding a line removes or rewrites (records.py), which may join raw text into an
# anchor: escapes, ANSI, CR, NUL and the other control characters (C1 ones in UTF-8), a JSON log record.
REWRITTEN = re.compile(rb"[\\\x1b\r\x00-\x08\x0b\x0c\x0e-\x1f\x7f{]|\xc2[\x80-\x9f]")
MAX_JOIN_LINE = 16 * 1024  # a longer neighbour (a request-log line) is never part of a wrapped message
MAX_EXCERPT = 600
MAX_TARGET_SETS = 4096  # cached anchor combinations (bounded: memory stays flat)
MAX_TIMEOUTS = 3  # a pattern that times out this often is skipped for the rest of the scan
HOSTED_STAGES = {"request"}
EVENT_BURST = 256  # events of a chunk handed on together (bounded: a chunk of error lines)
WATCHDOG = Watchdog(MATCH_TIMEOUT)  # bounds the stdlib re searches of built-in patterns
# The paste-tolerant second try (triage.match.loose): lines before a candidate it joins (a
# head a few lines above the anchor), and the text after it, in characters of the lines read
# (newlines counted), not in lines: a message is read whole at any wrap width (a 330-character
# message hard-wrapped at 40 columns spans nine lines), up to another record or a prompt.
LOOSE_BACK = 4
LOOSE_TEXT = 2400
RECENT_STARTS = 32  # lines that began an event, kept for the second try's de-duplication
# An input this small (one first chunk: a paste, an issue, a chat message) is also swept
# whole in the loose form, so a message whose every anchor was broken by the wrapping is
# still found; a server's log is larger and keeps to the anchor pass.
PASTE_SIZE = 256 * 1024
PASTE_HITS = 64  # places one pattern's head is looked at in such an input, at most
STRING_PREFIX = re.compile(r"^\s*[rRfFbBuU]{1,2}(?=[\"'])")  # f"..." in a traceback's source lines
LOOSE_MORE_VALUES = 48  # a number this close after the last value read: a message with more values
GAP_CUT = 64  # at most this much of the clauses a pattern skips (loose form) before a cut: a longer text is another message
SENTENCE_END = re.compile(r"[.!?\u3002]\s*$")
ASCII_RUN = re.compile(r"[\x00-\x7f]*")
# The mark a viewer, a chat or a tool leaves where it cut a line, as printed: "is lar…",
# "(9.3...", "1... [truncated]" (TRUNCATED: the same marks in the loose form, which keeps no
# lone dots).
MARK_STARTS = frozenset(" \t.\u2026[(<")  # the characters a cut mark (after its blanks) starts with
MARK_SPAN = 40  # a cut mark is looked for in this much of a line's end: a search of whole lines cost every metrics line
CUT_MARK = re.compile(
    r"\s*(?:\.{2,}|\u2026|[\[(<](?:truncated|cut|\.+|\u2026)[\])>])(?:\s*[\[(<](?:truncated|cut)[\])>])?\W*$", re.IGNORECASE
)
# How a line that ends inside a word, a number or a clause (as a cut leaves it) may end; vLLM's
# own lines end closed ("%", ".", ")"): only such a line is asked (by the slower partial match)
# whether it cuts a message short beside one read whole on it.
OPEN_END = ",:;([-_"
NO_TEXT = "\x00"  # no message holds it: only a clause that takes any character reads it
NOT_SHARED: tuple[int, frozenset[str]] = (0, frozenset())  # no line whose findings are another message beside a reading
# A fact's message wrapped over lines is read whole: its lines joined from the one with the
# logger's prefix to the last line before the next record (vLLM's engine config line and its
# non-default args are kilobytes: 20 and more lines at 80 columns).
RECORD_ROLES = (None, "ready")  # what the run summary keeps as facts; lifecycle lines are read as they are
RECORD_BACK = 4  # a fact's anchor lies this many lines below its record's first line, at most
RECORD_LINES = 64
RECORD_TEXT = MAX_JOIN_LINE
MIN_WRAP = 40  # a shorter line ends its record: a hard or hand wrap fills its lines
MAX_WRAP = 320  # a wider line was wrapped by no terminal or page: it is its record whole
WRAP_SLACK = 24  # a wrapped record's inner lines are this much narrower than its first, at most
# A process tag or logger prefix the wrap cut ("(APIServer p" / "id=1) INFO ...", "INFO 06-02 21:05:09
# [sta" / "rtup.py:38] vLLM server version ..."): its record starts on this line all the same.
_LEVEL_WORDS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_CUT_LEVEL = "|".join(sorted({word[:n] for word in _LEVEL_WORDS for n in range(2, len(word))}, key=len, reverse=True))
CUT_LOGGER_PREFIX = re.compile(
    r"(?=.)(?:\([A-Za-z][\w.-]*(?: [a-z]*(?:=[\w.]*,?)?)*$|\([^()]{0,120}\) ?)?"
    rf"(?:(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)(?: [\d-]*(?: [\d:.]*(?: \[?[^\]\s]*)?)?)?|{_CUT_LEVEL})?$"
)
# A Python traceback or exception line starts a record of its own, prefix or none.
EXCEPTION_HEAD = re.compile(r"Traceback \(most recent call last\):|[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)(?::|$)")
MIN_SWEPT_ANCHOR = 6  # characters a fact's anchor keeps in the loose form, at least, to be looked for in a paste


SENTENCE_STOP = re.compile(r"[.!?](?=\s|$)")
# a sentence's end (in quotes too), or a clause's where a paraphrase glues the next one on
SENTENCE_CLOSE = re.compile("[.!?\u3002](?=[\\s\"'\u2019\u201d\u300d]|$)|;|\\s(?:--?|[\u2013\u2014])\\s")
CLOSE_SENTENCE = 160  # a match this close to its sentence's end is shown to it (not a prompt: vLLM's words)


def _may_continue(text: str) -> bool:
    """The line may be the rest of a wrapped message: one that starts with a CJK word is the
    writer's own prose (a full-width bracket or comma may still be the message's)."""
    first = text.lstrip()[:1]
    return first.isascii() or not first.isalpha()


def _cut_end(text: str) -> int:
    """Where the line ends less what a paste adds after a cut (a closing quote, CJK prose,
    blanks, the mark a viewer leaves: "…", "[truncated]"): where a message cut there ends; 0
    when that line does not end open (OPEN_END, or a number cut at its point: "usage: 97.")."""
    end = len(text)
    while end and (text[end - 1].isspace() or not text[end - 1].isascii() or text[end - 1] in QUOTES
                   or text[end - 1] in "?!" and not text[:end - 1].isascii()):  # a question in the prose ("하나요?")
        end -= 1
    mark = _cut_mark(text, end) if end and not text[end - 1].isalnum() else None
    if mark:
        end = mark.start()
    last = text[end - 1 : end]
    return end if last and (last.isalnum() or last in OPEN_END or last == "." and text[end - 2 : end - 1].isdigit()) else 0


def _values_apart(reading: LooseMatch, best: LooseMatch) -> bool:
    """The reading has a value where the best reading has none (not the same number under
    another name: a rival wording of one message)."""
    return any(all(end <= low or start >= high for low, high in best.value_spans) for start, end in reading.value_spans)


def excerpt(text: str, start: int, end: int) -> str:
    """What a report quotes of a message: the match, taken on to the end of its sentence when
    that is near (a pattern may stop inside a parenthesis: "(5.0 GiB"); cut at a word, with
    "...", when it goes on or is longer than MAX_EXCERPT."""
    stop = SENTENCE_STOP.search(text, end - 1 if end > start else end)
    if stop is not None and stop.end() - end <= CLOSE_SENTENCE:
        end = stop.end()
    elif stop is None and len(text) - end <= CLOSE_SENTENCE:
        end = len(text)  # the message's last words, unpunctuated
    piece = text[start:end]
    if len(piece) > MAX_EXCERPT:
        cut = piece.rfind(" ", 0, MAX_EXCERPT - 3)  # a word this far back, or one huge "word": cut it
        return piece[: cut if cut > MAX_EXCERPT // 2 else MAX_EXCERPT - 3].rstrip() + "..."
    if text[end:].strip() and not SENTENCE_STOP.match(text, end - 1):
        return piece.rstrip() + "..."
    return piece


@dataclass(slots=True)
class _Cursor:
    """Line numbering and de-duplication across the chunks of one input."""

    consumed_until: int = 0  # last line already used by a joined (wrapped) match
    started: dict[int, set[tuple[str, bool]]] = field(default_factory=dict)  # recent lines that began an event: (rule, finding)

    def mark(self, events: list[Event]) -> None:
        for event in events:
            self.started.setdefault(event.record.line, set()).add((event.rule.code, event.rule.kind == "finding"))
        if len(self.started) > 2 * RECENT_STARTS:
            for line in sorted(self.started)[:-RECENT_STARTS]:
                del self.started[line]

    def began(self, event: Event) -> bool:
        """This rule's event already began on the event's first line: the same message again."""
        return (event.rule.code, event.rule.kind == "finding") in self.started.get(event.record.line, ())

    def taken(self, first: int, last: int, code: str, shared: tuple[int, frozenset[str]] = NOT_SHARED) -> bool:
        """Lines first..last hold the start of another finding, or of this rule: the loose form
        must not read a message again, nor run over one (a fact inside it, a config key, may).
        shared: a line and the findings on it that are another message beside this one."""
        beside_line, beside = shared
        return any(
            finding and not (line == beside_line and seen in beside) or seen == code
            for line in range(first, last + 1) for seen, finding in self.started.get(line, ())
        )
    warnings: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Target:
    rule: Rule
    rule_index: int
    pattern: Pattern
    pattern_index: int
    needs: frozenset[bytes]  # anchors a line holds all of when it matches alone; empty: keywords, any one
    builtin: bool  # a built-in pattern: tested to match alike with stdlib re
    search: Any = None  # text -> match or None, bounded in time; made on first use
    read_fields: Any = None  # its groupdict -> typed fields, made on its first match
    loose: LoosePattern | None | bool = False  # its paste-tolerant form, derived on first need (None: none)

    def loose_form(self) -> LoosePattern | None:
        """Its paste-tolerant form (None: its head is too short to tell it from prose)."""
        if self.loose is False:
            self.loose = derive_loose(self.pattern.compiled.pattern)
        return self.loose if isinstance(self.loose, LoosePattern) else None


@dataclass(slots=True)
class _Selection:
    """The patterns to try on a candidate line, from the anchors it holds."""

    every: list[_Target]  # any of its anchors is there: it may match a message wrapped over lines
    alone: list[_Target]  # all of its anchors are there: it may match the line on its own
    hosted: bool  # some are request rules: a hosted API may have sent their message
    loose: list[_Target] = field(default_factory=list)  # the second try on damaged text (findings; a paste's sweep adds more)
    records: list[_Target] = field(default_factory=list)  # facts, read over their whole record when it is wrapped


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
        self._facts_by_code: dict[str, list[_Target]] = {}
        for target in sorted({id(t): t for ts in self.targets.values() for t in ts}.values(),
                             key=lambda t: (t.rule_index, t.pattern_index)):
            if target.rule.kind == "fact" and target.rule.role in RECORD_ROLES:
                self._facts_by_code.setdefault(target.rule.code, []).append(target)
        self._closure = cached_closure(self.targets, lambda: _substring_closure(self.targets))
        self._targets_for: dict[frozenset[bytes], _Selection] = {}
        self._watched = False  # the targets' searches use stdlib re under the watchdog
        all_anchors = sorted(set(self.targets) | set(self.skip_markers))
        self.engine = make_engine(all_anchors, engine, self.skip_markers) if all_anchors else None

    def _targets(self) -> dict[bytes, list[_Target]]:
        """Anchor -> the patterns a line holding it may match."""
        builtin = {str(path) for path in builtin_rule_files()}
        targets: dict[bytes, list[_Target]] = {}
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
                target = _Target(rule, index, pattern, pattern_index, needs, rule.file in builtin)
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
        cursor = _Cursor()
        history = _History()  # the last lines read, for a candidate at the start of a chunk
        pending: list[_Pending] = []  # candidates at the end of the last chunk
        line_no: int | None = None
        read = 0  # bytes so far: a pipe hands a paste over in pieces of a few kilobytes
        for chunk in chunks:
            if line_no is None:
                line_no = first = chunk.first_line
            if pending:
                yield from self._scan_seam(source, pending, chunk.data, chunk.end, cursor)
            pending = []
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
        self, source: str, data: bytes | bytearray, end: int, first_line: int, history: _History,
        pending: list[_Pending], cursor: _Cursor, paste: bool = False,
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
        candidates, lines = self._candidates(data, end, first_line)
        if paste:  # the input so far is a paste: swept whole, piece by piece
            candidates = self._with_paste_sweep(data, end, candidates, first_line)
        tail_start = _start_of_last_lines(data, CONTEXT_LINES, end)
        head_end = _end_of_first_lines(data, CONTEXT_LINES, end) if history.tail else 0
        events: list[Event] = []
        try:
            for line_start, line_end, line_no, selection in candidates:
                if line_no <= cursor.consumed_until:
                    if selection.records:  # (near the chunk's edges: the lines this chunk holds)
                        taken = _Lines(data, line_start, line_end, line_no, end)
                        if not head_end <= line_start < tail_start:
                            buffer, offset = _around(data, line_start, end, history, True)
                            taken = _Lines(buffer, offset, offset + line_end - line_start, line_no)
                        events += self._taken_records(source, taken, selection, cursor)
                    continue
                if line_start >= tail_start:  # its next lines are in the next chunk
                    buffer, offset = _around(data, line_start, end, history, bool(selection.loose or selection.records))
                    reported: frozenset[str] = frozenset()
                    if self.live:
                        alone = self._match_alone(source, buffer, offset, line_no, cursor)
                        reported = frozenset(event.rule.code for event in alone)
                        events += alone
                    pending.append(_Pending(buffer, offset, line_no, reported, selection.loose, selection.records))
                elif line_start < head_end:
                    # its previous lines are in earlier chunks
                    buffer, offset = _around(data, line_start, end, history, bool(selection.loose or selection.records))
                    events += self._match_at(source, buffer, offset, line_no, cursor, loose=selection.loose,
                                             records=selection.records)
                elif _worth_matching(selection):
                    events += self._match_line(source, _Lines(data, line_start, line_end, line_no, end, not paste), selection,
                                               cursor)
                if len(events) >= EVENT_BURST:
                    yield from events
                    events = []
        except KeyboardInterrupt:  # Ctrl-C: what was matched before it is still reported
            yield from events
            raise
        yield from events
        return lines

    def _with_paste_sweep(
        self, data: bytes | bytearray, end: int, candidates: list[tuple[int, int, int, _Selection]], first_line: int = 1,
    ) -> list[tuple[int, int, int, _Selection]]:
        """The candidates, and the lines of a small input where a pattern's head starts in the
        loose form of the whole input (its lines joined), for the second try."""
        starts, forms, position, line_no = [], [], 0, first_line
        while position < end:
            line_end = data.find(b"\n", position, end)
            line_end = end if line_end < 0 else line_end
            raw = bytes(data[position:line_end])
            if len(raw) <= MAX_JOIN_LINE and not any(marker in raw for marker in self.skip_markers):
                starts.append((position, line_end, line_no))
                forms.append(normalise(STRING_PREFIX.sub("", parse_line(raw).text)).lower())
            position, line_no = line_end + 1, line_no + 1
        joined, offsets, total = "".join(forms), [], 0
        for form in forms:
            offsets.append(total)
            total += len(form)
        added: dict[int, list[_Target]] = {}
        targets = self._all_targets()
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
        records = self._swept_records(joined, offsets)
        if not added and not records:
            return candidates
        listed = {candidate[2]: candidate for candidate in candidates}
        for index in sorted(added.keys() | records.keys()):
            start, stop, number = starts[index]
            known = listed.get(number)
            selection = known[3] if known is not None else _Selection([], [], True)
            loose = [*selection.loose, *(t for t in added.get(index, ()) if t not in selection.loose)]
            facts = [*selection.records, *(t for t in records.get(index, ()) if t not in selection.records)]
            listed[number] = (start, stop, number, replace(selection, loose=loose, records=facts))
        return [listed[number] for number in sorted(listed)]

    def _swept_records(self, joined: str, offsets: list[int]) -> dict[int, list[_Target]]:
        """The lines of a small input where a fact's anchor starts in the loose form of the whole
        input: a wrap that cut the anchor itself ("Available KV cache me" / "mory: 11.25 GiB")
        left no line holding it. The exact pattern still reads the record."""
        found: dict[int, list[_Target]] = {}
        for anchor, targets in self.targets.items():
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

    def _all_targets(self) -> list[_Target]:
        every = {(t.rule_index, t.pattern_index): t for targets in self.targets.values() for t in targets}
        return [every[key] for key in sorted(every) if every[key].rule.kind == "finding"]

    def _candidates(
        self, data: bytes | bytearray, end: int, first_line: int
    ) -> tuple[list[tuple[int, int, int, _Selection]], int]:
        """The lines of data[:end] that hold an anchor, less request-log lines: (start, end,
        number, the patterns to try), and the number of lines in data[:end]."""
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
                if line_end < end:  # a request log line: prompt text quoting an error is not an event
                    line_no, counted_to = line_no + 1, line_end + 1
                continue
            # the anchors are listed now: hyperscan still holds this stretch's hits
            candidates.append((line_start, line_end, line_no, self._targets_in(data, line_start, line_end)))
        return candidates, line_no - first_line + data.count(b"\n", counted_to, end)

    def _scan_seam(
        self, source: str, pending: list[_Pending], data: bytes | bytearray, end: int, cursor: _Cursor
    ) -> Iterator[Event]:
        """The deferred candidates at the end of the last chunk, with the next chunk's first lines."""
        following = b"".join(_lines_after(data, 0, CONTEXT_LINES, end))
        for deferred in pending:
            buffer = deferred.buffer + following if deferred.buffer.endswith(b"\n") else deferred.buffer
            if deferred.line_no > cursor.consumed_until:
                yield from self._match_at(source, buffer, deferred.offset, deferred.line_no, cursor, deferred.reported,
                                          deferred.loose, deferred.records, more=bool(data))
            elif (found := self._line_in(buffer, deferred.offset, deferred.line_no, records=deferred.records)) and \
                    found[0].records:
                yield from self._taken_records(source, found[1], found[0], cursor)

    def _match_at(
        self, source: str, buffer: bytes, line_start: int, line_no: int, cursor: _Cursor,
        reported: frozenset[str] = frozenset(), loose: list[_Target] | None = None,
        records: list[_Target] | None = None, more: bool = True,
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
        rest = [t for t in targets if self._cut_short(t, text)]
        events = self._match_wrapped(source, lines, rest, cursor, FORWARD_WINDOWS) if rest else []
        records = [t for t in self._record_targets(selection, events) if t.rule.code not in reported]
        if records:
            events = self._match_records(source, lines, records, events, cursor, cursor.consumed_until)
        self._mark_hosted(events, lines, selection)
        cursor.mark(events)
        return events

    def _match_alone(self, source: str, buffer: bytes, line_start: int, line_no: int, cursor: _Cursor) -> list[Event]:
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
        self, buffer: bytes, line_start: int, line_no: int, loose: list[_Target] = (),  # type: ignore[assignment]
        records: list[_Target] = (),  # type: ignore[assignment]
        more: bool = True,
    ) -> tuple[_Selection, _Lines] | None:
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
        return (selection, _Lines(buffer, line_start, line_end, line_no, more=more)) if _worth_matching(selection) else None

    def _targets_in(self, buffer: bytes | bytearray, start: int, end: int) -> _Selection:
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
            selection = _Selection(every, [t for t in every if t.needs <= held], hosted, loose, records)
            if len(self._targets_for) < MAX_TARGET_SETS:
                self._targets_for[found] = selection
        return selection

    # --- one candidate line ---------------------------------------------------------

    def _match_line(self, source: str, lines: _Lines, selection: _Selection, cursor: _Cursor) -> list[Event]:
        parts = lines.parts(0)
        consumed = cursor.consumed_until
        events = self._match_text(source, parts, parts.text, lines.line_no, lines.line_no, lines.alone(selection), cursor,
                                  lines.digits_at(1))
        targets = selection.every
        if not events:
            if targets:
                events = self._match_wrapped(source, lines, targets, cursor)
            elif selection.loose:  # found by the paste sweep alone: the exact patterns of the next lines first
                following = self._strict_below(lines)
                events = self._match_wrapped(source, lines, following, cursor, FORWARD_WINDOWS, True) if following else []
        elif lines.next_may_continue():  # one rule matched the line; another's message may go on below
            matched = {event.rule.code for event in events}
            rest = [t for t in targets if t.rule.code not in matched and self._cut_short(t, parts.text)]
            if rest:
                events += self._match_wrapped(source, lines, rest, cursor, FORWARD_WINDOWS)
        if events:  # (a fact's free-text value would run on over the lines: findings only)
            events = [self._read_on(source, lines, event, cursor) if event.rule.kind == "finding" else event
                      for event in events]
        if selection.loose:
            events += self._second_try(source, lines, selection.loose, events, cursor)
        records = self._record_targets(selection, events)
        if records:
            events = self._match_records(source, lines, records, events, cursor, consumed)
        self._mark_hosted(events, lines, selection)
        cursor.mark(events)
        return events

    def _taken_records(self, source: str, lines: _Lines, selection: _Selection, cursor: _Cursor) -> list[Event]:
        """The facts of a candidate line that an earlier reading took ("GPU KV cache" / "usage:
        0.0%" of a wrapped metrics line, whose finding was read from the line above): read over
        its record, unless that reading began already."""
        events = self._match_records(source, lines, selection.records, [], cursor, cursor.consumed_until)
        cursor.mark(events)
        return events

    def _record_targets(self, selection: _Selection, events: list[Event]) -> list[_Target]:
        """The facts to read over the candidate's record: those its anchors chose, and those a
        window read from the lines below."""
        read = [e.rule.code for e in events if e.rule.kind == "fact" and e.rule.role in RECORD_ROLES]
        if not read:
            return selection.records
        chosen = {(t.rule_index, t.pattern_index): t for t in selection.records}
        for code in read:
            for target in self._facts_by_code.get(code, ()):
                chosen.setdefault((target.rule_index, target.pattern_index), target)
        return [chosen[key] for key in sorted(chosen)]

    def _match_records(
        self, source: str, lines: _Lines, targets: list[_Target], events: list[Event], cursor: _Cursor,
        consumed: int,
    ) -> list[Event]:
        """The facts of the candidate's logger record read on all its lines. They replace what the
        line or a window read of them (a piece of a record wrapped over more lines); a window's
        reading that ran on into the next record goes. A fact the line read whole is not read
        again. consumed: the last line taken before this candidate; the lines a dropped reading
        took are free again."""
        one_line = lines.parts(0).level is not None and not lines.next_may_continue()  # (a server's log: most lines)
        span = (0, 0) if one_line else lines.record_span(self.skip_marker_texts)
        if span is None:
            return events
        first, last = span
        if first == last == 0:
            whole = {e.rule.code for e in events if e.record.line == e.record.end_line == lines.line_no}
            targets = [t for t in targets if t.rule.code not in whole]
            if not targets:
                return events
        head, variants, cut_at = lines.record_variants(first, last)
        own = {(e.rule.code, e.record.line) for e in events}  # readings it replaces, marked by a second try
        found, codes = self._read_record(source, lines, first, last, variants, [], targets, cursor, head, own)
        rest = [t for t in targets if t.rule.code not in codes]
        wider = lines.record_end(last, self.skip_marker_texts) if rest else last
        if wider > last:  # a hand wrap's short line: the message may still go on below it
            more = self._read_record(source, lines, first, wider, lines.record_variants(first, wider)[1], [], rest,
                                     cursor, head, own)
            found, codes, rest = found + more[0], codes | more[1], [t for t in rest if t.rule.code not in more[1]]
        if rest:  # cut short: what its lines say as far as they go
            more = self._read_record(source, lines, first, last, [], variants[:1] + cut_at, rest, cursor, head, own)
            found, codes = found + more[0], codes | more[1]
        # a line read alone whose record reads no more (a progress bar printed after it is no wrap)
        alone = {(e.rule.code, repr(e.fields)) for e in events if e.record.line == e.record.end_line == lines.line_no
                 and first == 0}
        same = {e.rule.code for e in found if (e.rule.code, repr(e.fields)) in alone}
        # or a window read more of it than the record's lines did (a hand wrap's short line ended it)
        same |= {e.rule.code for e in found for old in events if old.rule.code == e.rule.code and not lines.runs_on(old)
                 and old.fields.items() > e.fields.items()}
        found = [e for e in found if e.rule.code not in same]
        codes -= same
        asked = {target.rule.code for target in targets}
        kept = [e for e in events if e.rule.code not in codes and not (e.rule.code in asked and lines.runs_on(e))]
        if len(kept) < len(events):
            cursor.consumed_until = max([consumed, *(e.record.end_line for e in kept if e.rule.role is None)])
        return sorted([*found, *kept], key=lambda event: event.record.line)

    def _read_record(
        self, source: str, lines: _Lines, first: int, last: int, variants: list[str], cut_at: list[str],
        targets: list[_Target], cursor: _Cursor, parts: LineParts, own: set[tuple[str, int]],
    ) -> tuple[list[Event], set[str]]:
        """Each rule's first pattern that matches the record's lines joined (variants: the ways
        the wrap may have cut them; a value is taken from the first that reads it), or else that
        matches as far as the record goes (a cut: the fields it closed before its end). Also the
        rules whose reading of this record began already (an earlier line of it was the
        candidate): what this line read of them is a piece of it. own: (rule, line) of the
        readings this one replaces, which do not count as begun."""
        events: list[Event] = []
        codes: set[str] = set()
        for target in targets:
            if target.rule.code in codes or (target.rule.code, target.pattern.id) in self.disabled_patterns:
                continue
            try:
                groups, text = self._record_groups(target, variants, cut_at)
            except TimeoutError:
                self._timed_out(target.rule.code, target.pattern.id, f"{source}:{lines.line_no + first}", cursor)
                continue
            if groups is None:
                continue
            record = Record(source, lines.line_no + first, lines.line_no + last, text, parts.level, parts.time,
                            parts.process, parts.rank)
            read_fields = target.read_fields = target.read_fields or field_reader(target.rule, list(groups))
            event = Event(target.rule, record, read_fields(groups), excerpt(text, 0, len(text)), target.pattern.id,
                          target.pattern.hosted)
            codes.add(target.rule.code)
            if (target.rule.code, record.line) in own or not cursor.began(event):
                events.append(event)
        return events, codes

    def _record_groups(self, target: _Target, variants: list[str], cut_at: list[str]
                       ) -> tuple[dict[str, str | None] | None, str]:
        """The pattern's groups in the joined record (None: no reading), and the text read. The
        message that starts first wins: a join that ran "GPU" / "KV cache usage" together finds
        the "CPU KV cache usage" after it; other joins that read it fill in its missing values."""
        search = target.search or self._bind_search(target)
        readings = []
        for variant in variants:  # (none: only the cut readings)
            match = search(variant)
            if match is not None:
                before = variant[: match.start()]
                readings.append((len(before) - before.count(" "), _whole_groups(match, variant), variant))
        if readings:
            start = min(reading[0] for reading in readings)
            found = [reading for reading in readings if reading[0] == start]
            groups, text = found[0][1], found[0][2]
            for _, other, _ in found[1:]:
                groups = {name: value if value is not None else other.get(name) for name, value in groups.items()}
            return groups, text
        for text in cut_at:
            cut = target.pattern.compiled.search(text, partial=True, timeout=MATCH_TIMEOUT)
            if cut is None or not cut.partial:
                continue
            groups = {name: value if value is not None and cut.end(name) < len(text) else None
                      for name, value in cut.groupdict().items()}
            if any(value is not None for value in groups.values()):  # not the head alone: a fact is its values
                return groups, text
        return None, ""

    def _read_on(self, source: str, lines: _Lines, event: Event, cursor: _Cursor) -> Event:
        """An exact finding that left values of its pattern unread while its message goes on
        below the lines it was read from (an optional clause past the exact windows' few lines:
        VT301's cumulative count ends 330 characters of message, wrapped narrow) is read on in
        the loose form, as far as that goes: the same pattern's reading from the same line
        replaces it when it reads more values. A reading with all its values is left as it is."""
        target = self._by_pattern.get((event.rule.code, event.pattern_id))
        if target is None or all(name in event.fields for name in target.pattern.fields):
            return event
        below = lines.parts(event.record.end_line - lines.line_no + 1)
        if below.text is None or below.level is not None:
            return event  # the message ends where it was read: another record or the input's end follows
        consumed = cursor.consumed_until
        window = _LooseWindow(lines, self.skip_marker_texts)
        start = event.record.line - lines.line_no
        for found, _ in self._loose_readings(source, lines, window, [target], cursor):
            if window.lines_of(found.start, found.end)[0] != start:
                continue
            read = self._loose_event(source, lines, window, found, target, cursor)
            if read and read[0].fields.keys() - event.fields.keys():
                read[0].fields.update({name: value for name, value in event.fields.items() if value is not None})
                return read[0]
        cursor.consumed_until = consumed  # nothing more was read: the lines below are their own
        return event

    def _second_try(
        self, source: str, lines: _Lines, targets: list[_Target], events: list[Event], cursor: _Cursor
    ) -> list[Event]:
        """The loose try of the rules the exact patterns did not read on the line. A fact read
        (a config key) may sit inside a damaged message; a finding read exactly leaves only the
        rules whose message the line's end cuts short (a metrics line is two findings, and a
        cut inside the second must not lose it to the first)."""
        beside = frozenset(event.rule.code for event in events if event.rule.kind == "finding")
        text = lines.parts(0).text
        end = _cut_end(text) if beside else len(text)
        if beside and not end:  # vLLM's own lines end closed: a finding read, nothing cut beside it (the usual case)
            return []
        matched = {event.rule.code for event in events}
        cut = text[:end]
        # re-punctuated (full-width, a note inside) only where the line holds non-ASCII text: a server's log pays nothing
        loose = not cut.isascii()
        rest = [t for t in targets if t.rule.code not in matched
                and (not beside or self._cut_short(t, cut) or loose and self._loose_cut_short(t, cut))]
        if not rest:
            return []
        cursor.mark(events)
        return self._match_loose(source, lines, rest, cursor, beside)

    def _match_loose(
        self, source: str, lines: _Lines, targets: list[_Target], cursor: _Cursor, beside: frozenset[str] = frozenset()
    ) -> list[Event]:
        """The second try, on text people pasted (triage.match.loose): the candidate and its
        neighbours joined in the loose form. At most one event, the pattern that reads the
        most of it; the lines it used are not looked at again. beside: the findings the exact
        patterns read on the candidate line; they do not hold these targets back (and the
        neighbours' patterns are not added: they had their turn with them)."""
        window = _LooseWindow(lines, self.skip_marker_texts)
        shared = (lines.line_no, beside)
        chosen = targets if beside else self._window_targets(lines, window, targets)
        readings = self._loose_readings(source, lines, window, chosen, cursor, shared)
        if not readings:
            return []
        # the first of the best (file order); of readings as good, one that keeps the numbers
        best = max(readings, key=lambda reading: (reading[0].score, len(reading[0].fields)))
        # other rules whose message is there whole too (a metrics line is two findings), or cut
        # short but with values where the best reads none of its own: a second message; not one
        # whose head starts inside the best one's ("TOO LARGE SWAP SPACE" in "POSSIBLY TOO LARGE ...")
        others = [r for r in readings if r[1].rule.code != best[1].rule.code
                  and (r[0].complete or _values_apart(r[0], best[0]))
                  and not best[0].start < r[0].start < best[0].head_end]
        events: list[Event] = []
        for found, target in [best, *{r[1].rule.code: r for r in others}.values()]:
            events += self._loose_event(source, lines, window, found, target, cursor, shared)
        return events

    def _loose_readings(
        self, source: str, lines: _Lines, window: _LooseWindow, targets: list[_Target], cursor: _Cursor,
        shared: tuple[int, frozenset[str]] = NOT_SHARED,
    ) -> list[tuple[LooseMatch, _Target]]:
        """The loose readings of these patterns in the window that start on the candidate or above it."""
        readings: list[tuple[LooseMatch, _Target]] = []
        for target in targets:
            pattern = target.loose_form()
            if pattern is None or not window.may_hold(pattern.probe):
                continue
            try:
                found = loose_match(pattern, window.text(), MATCH_TIMEOUT)
            except TimeoutError:
                self._timed_out(target.rule.code, target.pattern.id, f"{source}:{lines.line_no}", cursor)
                continue
            if found is not None and not found.complete and not self._stops_as_pasted(found, window, pattern) \
                    and not _cut_as_printed(found, window, target):
                continue
            if found is None or found.recased and window.follows_word(found.start):
                continue
            _drop_cut_value(found, window)
            # a head on a later line is that line's own turn, and a message already read (or
            # one another finding starts inside) is not read again: neither may outscore this line's
            first, last = window.lines_of(found.start, found.end)
            if first <= 0 and not cursor.taken(lines.line_no + first, lines.line_no + last, target.rule.code, shared):
                readings.append((found, target))
        return readings

    def _loose_event(
        self, source: str, lines: _Lines, window: _LooseWindow, found: LooseMatch, target: _Target, cursor: _Cursor,
        shared: tuple[int, frozenset[str]] = NOT_SHARED,
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

    def _targets_on(
        self, lines: _Lines, offsets: range, loose: bool = False, given: list[_Target] = ()  # type: ignore[assignment]
    ) -> list[_Target]:
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

    def _strict_below(self, lines: _Lines) -> list[_Target]:
        """The exact patterns whose anchors the next lines hold (a message wrapped onto them);
        a lifecycle line below (an exception) is no wrapped message's rest."""
        return [t for t in self._targets_on(lines, range(1, CONTEXT_LINES + 1)) if t.rule.role is None]

    def _window_targets(self, lines: _Lines, window: _LooseWindow, targets: list[_Target]) -> list[_Target]:
        """The candidate's patterns and those whose anchors its neighbours hold: a wrapped
        message's own anchors may all be on other lines than the one that made it a candidate."""
        return self._targets_on(lines, range(window.first, window.first + len(window.texts)), True, targets)

    @staticmethod
    def _stops_as_pasted(found: LooseMatch, window: _LooseWindow, pattern: LoosePattern) -> bool:
        """A loose match that stops short is a paste of its message only when the text stops
        there too (a cut, anywhere: inside a word or a number too), or when only its closing
        words were replaced and no further number follows in their sentence (past its last
        number: when its sentence ends there). Otherwise the text goes on as another message
        with the same head."""
        rest, ends_sentence = window.rest_of_line(found.end)
        if _cut_inside(found, window, pattern, rest):
            return True
        rest = rest.strip(".,;:!?")
        if found.values_read:
            following = window.rest_of_sentence(found.end)[:LOOSE_MORE_VALUES]
            return not any(c.isdigit() for c in following)
        # the line ends inside the clauses its pattern skips, cut after a value of theirs; CJK
        # prose after the cut is no clause of the message, unless an English sentence led into
        # the head ("My server shows Running: 5 reqs, ...")
        prose_after = not any(c.isascii() and c.isalnum() for c in rest) and not window.follows_word(found.start)
        if found.before_gap and rest and not prose_after:
            return sum(c.isascii() for c in rest) <= GAP_CUT and any(c.isdigit() for c in rest)
        if found.numbers_read:  # a closing sentence (naming a lever) replaced: the text's sentence ends here too
            return not any(c.isalnum() for c in window.rest_of_sentence(found.end))
        return not any(c.isascii() and c.isalnum() for c in rest) and not (not rest and ends_sentence)

    def _mark_hosted(self, events: list[Event], lines: _Lines, selection: _Selection) -> None:
        if selection.hosted and any(event.rule.stage in HOSTED_STAGES and not event.hosted for event in events):
            context = lines.context_text(self.skip_marker_texts)  # parsing the neighbours costs: only for request errors
            hosted = any(marker in context for marker in self.hosted_markers)
            for event in events:
                event.hosted = event.hosted or (event.rule.stage in HOSTED_STAGES and hosted)

    @staticmethod
    def _loose_cut_short(target: _Target, text: str) -> bool:
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

    def _cut_short(self, target: _Target, text: str) -> bool:
        """The pattern matches the line's end as far as it goes: its message may continue on the next line."""
        try:
            match = target.pattern.compiled.search(text, partial=True, timeout=MATCH_TIMEOUT)
        except TimeoutError:
            return False
        return match is not None and match.partial and match.end() > match.start()

    def _match_wrapped(
        self, source: str, lines: _Lines, targets: list[_Target], cursor: _Cursor, windows=WRAP_WINDOWS,
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
            for joined, candidate in _joins(texts, -before):
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
                    below = [t for t in self._targets_on(lines, range(1, after + 1)) if t.rule.code not in matched and t not in targets]
                    if below:
                        events += self._match_text(source, lines.parts(0), joined, lines.line_no + before,
                                                   lines.line_no + after, below, cursor, lines.digits_at(after + 1),
                                                   candidate)
                        matched = {event.rule.code for event in events}
                    # a lifecycle reading alone (a wrapped exception line) does not take the lines it
                    # joined: a message there that goes on past this window is read on their turn
                    if any(event.rule.role is None for event in events):
                        cursor.consumed_until = max(cursor.consumed_until, lines.line_no + after)
                    rest = [t for t in targets if t.rule.code not in matched and self._cut_short(t, joined)]
                    wider = [(b, a) for b, a in windows[index + 1 :] if b == before and a > after]
                    if rest and wider:  # (the wider windows' own lines may choose a rule read here already)
                        wider_events = self._match_wrapped(source, lines, rest, cursor, wider, starting_here)
                        events += [event for event in wider_events if event.rule.code not in matched]
                    return events
        return []

    def _match_text(
        self, source: str, parts: LineParts, text: str, first: int, last: int, targets: list[_Target], cursor: _Cursor,
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
            search = target.search or self._bind_search(target)
            try:
                match = search(text)
            except TimeoutError:
                self._timed_out(rule.code, pattern.id, f"{source}:{first}", cursor)
                continue
            if match is None or candidate is not None and not (match.start() < candidate[1] and match.end() > candidate[0]):
                continue
            if digits_follow is not None and match.end() == len(text) and text[-1:].isdigit() and digits_follow():
                continue
            if record is None:
                record = Record(source, first, last, text, parts.level, parts.time, parts.process, parts.rank)
            groups = _whole_groups(match, text) if rule.kind == "fact" and match.end() < len(text) else match.groupdict()
            if number_cut_at(text, match.end()):
                groups = _without_cut_value(match, groups)
            read_fields = target.read_fields
            if read_fields is None:
                read_fields = target.read_fields = field_reader(rule, list(groups))
            fields = read_fields(groups)
            events.append(Event(rule, record, fields, excerpt(text, match.start(), match.end()), pattern.id, pattern.hosted))
            matched_rule = target.rule_index
        return events

    def _bind_search(self, target: _Target) -> Callable[[str], Any]:
        """A built-in pattern searches with stdlib re under the watchdog where it can run (the
        main thread on POSIX): two to four times quicker on a line. Others keep regex's timeout."""
        if self._watched and target.builtin:
            target.search = WATCHDOG.bound(re.compile(target.pattern.compiled.pattern).search)
        else:
            target.search = functools.partial(target.pattern.compiled.search, timeout=MATCH_TIMEOUT)
        return target.search

    def _timed_out(self, code: str, pattern_id: str, where: str, cursor: _Cursor) -> None:
        """Warn; after MAX_TIMEOUTS the pattern is off, so a backtracking rule costs seconds, not hours."""
        key = (code, pattern_id)
        self.timeouts[key] = self.timeouts.get(key, 0) + 1
        message = f"{where}: rule {code} pattern {pattern_id} took longer than {MATCH_TIMEOUT}s and was skipped on this line"
        if self.timeouts[key] >= MAX_TIMEOUTS:
            self.disabled_patterns.add(key)
            message += f"; it timed out {MAX_TIMEOUTS} times and is off for the rest of the scan"
        cursor.warnings.append(message)


def field_reader(rule: Rule, names: list[str]) -> Callable[[dict[str, str | None]], dict[str, Any]]:
    """A pattern's groupdict -> its typed fields; the types are looked up once per pattern,
    not on every match (a metrics line matches two patterns a few times a second)."""
    types = rule.field_types
    plan = [(name, _CONVERTERS.get(types.get(name, "str"))) for name in names]
    # a flag another pattern of the rule captures is simply off here: the message it matched
    # lacks that wording. Not for a fact: another line that does not say a thing says nothing
    # of it, except to the rule's own arithmetic (a counter: one per line that has it)
    counted = {name for expression in rule.derived.values() for name in expression.names}
    flags_off = {
        name: False for name, kind in types.items()
        if kind == "flag" and name not in names and (rule.kind != "fact" or name in counted)
    }

    def read(groups: dict[str, str | None]) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        for name, to_type in plan:
            value = groups[name]
            if value is not None:
                fields[name] = to_type(value) if to_type else value
            elif to_type is bool:
                fields[name] = False
        if flags_off:
            fields.update(flags_off)
        return fields

    return read


def _to_int(value: str) -> int | None:
    try:
        return int(value)  # the usual case: digits alone
    except ValueError:
        cleaned = value.replace(",", "").replace("_", "")
    try:
        return int(cleaned)
    except ValueError:
        try:
            return int(float(cleaned))
        except ValueError:
            return None


def _to_float(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        try:
            return float(value.replace(",", ""))
        except ValueError:
            return None


def _to_bool(value: str) -> bool | None:
    return {"true": True, "false": False}.get(value.lower())


_CONVERTERS: dict[str | None, Callable[[str], Any] | None] = {
    "flag": bool, "bool": _to_bool, "int": _to_int, "float": _to_float, "gib": _to_float,
}


def _whole_groups(match: Any, text: str) -> dict[str, str | None]:
    """The match's groups, less those read ahead of it (a lookahead: "max_seq_len=...") that run
    to the end of the text: the line or the window may have been cut there ("max_seq_len=327" of
    32768, "dtype=torch.", "0." of 0.9). A True or False there is whole: no shorter text reads as one."""
    groups = match.groupdict()
    if match.end() < len(text):
        for name, value in groups.items():
            if value and match.end(name) == len(text) and value not in ("True", "False"):
                groups[name] = None
    return groups


def _glue(before: str, after: str) -> str:
    """What a wrap at a space dropped between two lines of a record: the space, unless the lines
    already keep it or the wrap cut a number ("131," / "072", "0." / "92")."""
    if before[-1:].isspace() or not before or not after:
        return ""
    if (before[-1].isdigit() or before[-1] in ".,") and (after[0].isdigit() or after[0] in ".,") and (
            before[-1].isdigit() or after[0].isdigit()):
        return ""
    return " "


def _cut_prefix_joined(texts: list[str]) -> tuple[LineParts, list[str]]:
    """A record's first two lines joined where the wrap cut its logger prefix, that prefix read
    off (the cut may have dropped the space after the time): its parts, and its lines so."""
    for glue in ("", " "):
        parts = parse_line((texts[0] + glue + texts[1]).encode())
        if parts.level is not None:
            return parts, [parts.text, *texts[2:]]
    return LineParts(texts[0]), texts


def _worth_matching(selection: _Selection) -> bool:
    return bool(selection.every or selection.loose or selection.records)


def _holds_any(data: bytes | bytearray, markers: list[bytes], start: int, end: int) -> bool:
    for marker in markers:
        if data.find(marker, start, end) >= 0:
            return True
    return False


def _cut_mark(text: str, end: int) -> Any:
    """The cut mark text[:end] ends in, if any (a metrics line ends in '%': no regex for it)."""
    start = max(0, end - MARK_SPAN)
    tail = text[start:end]
    if ".." not in tail and "\u2026" not in tail and not ("trunc" in (lowered := tail.lower()) or "cut" in lowered):
        return None
    return CUT_MARK.search(text, start, end)


def number_cut_at(text: str, end: int) -> bool:
    """A number ends at `end` and the line's cut mark follows it, spaces or a separator between
    or not ("limit of 4…", "from 0.…", "size: 485,…", "has 1 [truncated]"): its digits so far
    may not be all of it."""
    if text[end : end + 1] not in MARK_STARTS:
        return False  # (nearly every match: it ends the line or goes on with its message)
    return _cut_mark(text, len(text)) is not None and CUT_MARK.match(text, end) is not None \
        and text[:end].rstrip(" .,")[-1:].isdigit()


def _without_cut_value(match: Any, groups: dict[str, str | None]) -> dict[str, str | None]:
    """The match ends where the line was cut (a mark follows): a value that runs up to the
    cut has lost its further digits ("exceeds limit of 4…"), so it is not read."""
    text, end = match.string, match.end()
    return {name: None if value is not None and not text[match.end(name) : end].strip(" .,") else value
            for name, value in groups.items()}


def _drop_cut_value(found: LooseMatch, window: _LooseWindow) -> None:
    """A value that runs up to where the line was cut (a mark follows: "limit of 4…") has lost
    its further digits: it is not read."""
    rest, _ = window.rest_of_line(found.end)
    if (TRUNCATED.fullmatch(rest) or not rest) and window.ends_in_cut_mark(found.end, after_number=True):
        text = window.text()
        kept = [(name, span) for name, span in zip(found.fields, found.value_spans, strict=True)
                if text[span[1] : found.end].strip(" .,")]
        found.fields = {name: found.fields[name] for name, _ in kept}
        found.value_spans = [span for _, span in kept]


def _cut_inside(found: LooseMatch, window: _LooseWindow, pattern: LoosePattern, rest: str) -> bool:
    """The text ends inside the message: what follows the match on its line is the start of
    the message's next words or number (up to prose in another script after it, or the mark a
    viewer leaves where it cut), and no line below goes on with it."""
    ascii_part = ASCII_RUN.match(rest).group(0)  # type: ignore[union-attr]
    if any(c.isascii() and c.isalnum() for c in rest[len(ascii_part):]):
        return False
    marked = TRUNCATED.search(ascii_part)
    cut = ascii_part[: marked.start()] if marked else ascii_part
    if not cut and (marked or window.ends_in_cut_mark(found.end)):
        return True
    if not cut or found.before_gap or not window.ends_text(found.end):
        # a line below goes on with it (wrapped there, not cut); or the rest would fall in the
        # clauses the pattern skips, which take any text: _stops_as_pasted weighs those
        return False
    text, end = window.text(), found.end + len(cut)
    try:
        return pattern.cut_at(text, found.start, end, MATCH_TIMEOUT)
    except TimeoutError:
        return False


def _cut_as_printed(found: LooseMatch, window: _LooseWindow, target: _Target) -> bool:
    """The text ends inside the message as vLLM prints it: where the loose form cannot tell a
    cut from prose written after a message (inside the clauses a pattern skips, right after a
    sentence's dot, inside words a paraphrase may replace), the exact pattern reads the text
    as printed up to the cut and wants more. Only where the text really ends: at a viewer's
    mark, or, with none, at another record, a blank line or the input's end, and then not in
    a clause that takes any text (".*?": prose written after the head reads as well there).
    A question or prose in another script after where the loose form stopped is the writer's."""
    first, last = window.lines_of(found.start, found.end)
    whole = window.original(first, last, found.start)
    unread = window.unread(found.end)
    read = whole[: len(whole) - len(unread)]
    unread = unread.rstrip()
    mark = _cut_mark(unread, len(unread))
    unread = unread[: mark.start()].rstrip() if mark else unread
    if any(c in "?!" or not c.isascii() for c in unread) or not mark and not window.ends_text(found.end):
        return False
    search = functools.partial(target.pattern.compiled.search, partial=True, timeout=MATCH_TIMEOUT)
    try:
        if not _reads_on(search(read + unread), read) or not mark and _reads_on(search(read + NO_TEXT), read):
            return False
    except TimeoutError:
        return False
    return True


def _reads_on(match: Any, text: str) -> bool:
    """The exact pattern read the text from its head to its end and wants more."""
    return match is not None and match.partial and not text[: match.start()].strip(QUOTES + " ")


class _LooseWindow:
    """The lines around a candidate, in the loose form, read as far as they are needed."""

    def __init__(self, lines: _Lines, skip_markers: list[str]):
        self.lines, self.skip_markers = lines, skip_markers
        self.first = 0
        self.texts: list[str] = []  # decoded messages, from line offset self.first on
        self.forms: list[str] = []  # their loose forms
        self.ahead = 0  # the last offset read
        self._lower: str | None = None
        self._text: str | None = None
        start = self._read(0)
        if start is None:
            return
        for offset in range(-1, -LOOSE_BACK - 1, -1):
            if self._read(offset, front=True) is None:
                break
        for offset in range(1, 3):  # the head is within a few lines: enough for may_hold
            if self._read(offset) is None:
                break

    def _read(self, offset: int, front: bool = False) -> str | None:
        parts = self.lines.parts(offset)
        text = parts.text
        if text is None or any(marker in text for marker in self.skip_markers):
            return None  # past the input, a long line, or a request-log line (a prompt): not joined
        # a logger's prefix starts another record: a message is not read on into it, nor back
        # from its own first line into the one before
        if parts.level is not None and not front and offset > 0 or front and self.lines.parts(offset + 1).level:
            return None
        if offset > 0 and not front and not _may_continue(text):  # the writer's own prose below a cut message
            return None
        form = normalise(STRING_PREFIX.sub("", text))
        if front:
            self.texts.insert(0, text)
            self.forms.insert(0, form)
            self.first = offset
        else:
            self.texts.append(text)
            self.forms.append(form)
            self.ahead = offset
        self._lower = self._text = None
        return form

    def may_hold(self, probe: str) -> bool:
        """The head's longest piece is in the lines read so far (a cheap test before the regex)."""
        if self._lower is None:
            self._lower = "".join(self.forms).lower()
        return probe in self._lower

    def text(self) -> str:
        if self._text is None:
            if self.texts and self.ahead >= 0:
                size = sum(len(text) + 1 for text in self.texts)
                while size < LOOSE_TEXT and self._read(self.ahead + 1) is not None:
                    size += len(self.texts[-1]) + 1
            self._text = "".join(self.forms)
        return self._text

    def rest_of_line(self, end: int) -> tuple[str, bool]:
        """What follows `end` on its line (loose form), and whether that line ends a sentence."""
        position = 0
        for index, form in enumerate(self.forms):
            if end <= position + len(form):
                return form[end - position :], bool(SENTENCE_END.search(self.texts[index]))
            position += len(form)
        return "", False

    def ends_text(self, end: int) -> bool:
        """The line that holds `end` is the last of the text: another record, a blank line or the
        input's end follows it."""
        return self.lines.ends_after(self.lines_of(end, end)[1])

    def ends_in_cut_mark(self, end: int, after_number: bool = False) -> bool:
        """The line that holds `end` ends in the mark a viewer leaves where it cut ("9.3...":
        the loose form keeps no lone dots); after_number: the mark follows a number."""
        text = self.texts[self.lines_of(end, end)[1] - self.first]
        mark = _cut_mark(text, len(text))
        return mark is not None and (not after_number or number_cut_at(text, mark.start()))

    def unread(self, end: int) -> str:
        """The text as read after `end` on its line."""
        index = self.lines_of(end, end)[1] - self.first
        return self.texts[index][self._raw_start(index, end) :]

    def rest_of_sentence(self, end: int) -> str:
        """The loose form of what follows `end` up to the end of its sentence, over the lines
        below: a number there is more of the message, one after it (a JSON error's code, a
        "(parameter=..., value=N)" note) is not."""
        index = self.lines_of(end, end)[1] - self.first  # at a line's end: the next line
        skip = end - sum(map(len, self.forms[:index]))
        text = self.texts[index]
        low, high = 0, len(text)  # the first offset whose rest is no longer than what follows the match
        while low < high:
            middle = (low + high) // 2
            if len(normalise(STRING_PREFIX.sub("", text[middle:]))) <= len(self.forms[index]) - skip:
                high = middle
            else:
                low = middle + 1
        below = list(itertools.takewhile(_may_continue, self.texts[index + 1 :]))
        rest = " ".join([text[low:], *below])
        stop = SENTENCE_CLOSE.search(rest)
        return normalise(rest[: stop.start() if stop else len(rest)])

    def lines_of(self, start: int, end: int) -> tuple[int, int]:
        """The line offsets (relative to the candidate) of a span of text()."""
        first = last = None
        position = 0
        for index, form in enumerate(self.forms):
            if first is None and start < position + len(form):
                first = index
            if end <= position + len(form):
                last = index
                break
            position += len(form)
        first = 0 if first is None else first
        last = len(self.forms) - 1 if last is None else max(last, first)
        return first + self.first, last + self.first

    def original(self, first: int, last: int, start: int) -> str:
        """The lines first..last as read, from where the match starts on the first."""
        texts = self.texts[first - self.first : last - self.first + 1]
        return " ".join([texts[0][self._raw_start(first - self.first, start) :], *texts[1:]])

    def follows_word(self, start: int) -> bool:
        """A lower-case word stands right before `start` (on its line or the one before): a
        head found there with its first letter in another case is inside another sentence
        ("Possibly too large swap space" is not "Too large swap space ..."), while after a log
        level, a quote or a bracket ("ERROR: this model's ...") it starts the message."""
        index = self.lines_of(start, start)[0] - self.first
        before = " ".join([*self.texts[max(index - 1, 0) : index], self.texts[index][: self._raw_start(index, start)]]).rstrip()
        return before[-1:].isascii() and before[-1:].islower()

    def _raw_start(self, index: int, start: int) -> int:
        """Where on line `index` (of texts) the loose-form offset `start` is in the text as read."""
        skip = start - sum(map(len, self.forms[:index]))  # loose-form characters before the match on its line
        wanted = len(self.forms[index]) - skip
        low, high = 0, len(self.texts[index])  # the last offset whose rest still has the whole match in loose form
        while low < high:
            middle = (low + high + 1) // 2
            if len(normalise(STRING_PREFIX.sub("", self.texts[index][middle:]))) >= wanted:
                low = middle
            else:
                high = middle - 1
        return low


def _joins(texts: list[str], candidate: int) -> list[tuple[str, tuple[int, int]]]:
    """The ways the lines may join, each with where the text of texts[candidate] is in it (its
    blanks at a seam may be gone: a joined line's text is the variant's end, less its leading
    blanks at most; the one before it may lose its trailing blanks)."""
    joined = [(texts[0], (0, len(texts[0])))]
    for index, text in enumerate(texts[1:], 1):
        grown = []
        for head, (start, end) in joined:
            for variant in join_variants(head, text):
                seam = len(variant) - len(text.lstrip())
                grown.append((variant, (seam, len(variant)) if index == candidate else (start, min(end, seam))))
        joined = grown
    return joined


def _around(data: bytes | bytearray, line_start: int, end: int, history: _History, loose: bool = False
            ) -> tuple[bytes, int]:
    """A small buffer with the candidate line whole and up to CONTEXT_LINES lines on either
    side within data[:end] (before it, from the earlier chunks when data holds fewer), and
    the line's offset in it: for a line near a chunk's edge, whose neighbours the next
    chunk or the last one holds. loose: the candidate has a second try, whose window takes
    LOOSE_BACK lines before it and LOOSE_TEXT bytes of lines after it from data (a paste's
    last lines are such candidates: its whole message is above them).

    A neighbour longer than MAX_JOIN_LINE is never part of a wrapped message, so only its
    first MAX_JOIN_LINE + 1 bytes are copied: with request logging on, copying whole
    neighbours at every seam was a copy of much of the input.
    """
    line_end = data.find(b"\n", line_start, end)
    line_end = end if line_end < 0 else line_end + 1
    before = _lines_before(data, line_start, LOOSE_BACK if loose else CONTEXT_LINES)
    if len(before) < CONTEXT_LINES:
        before = history.lines_before(CONTEXT_LINES - len(before)) + before
    head = b"".join(before)
    after = b"".join(_lines_after(data, line_end, CONTEXT_LINES, end, LOOSE_TEXT if loose else 0))
    return head + data[line_start:line_end] + after, len(head)


def _lines_before(buffer: bytes | bytearray, end: int, count: int) -> list[bytes]:
    """Up to `count` whole lines of the buffer that end at `end`, oldest first, long ones clipped."""
    lines: list[bytes] = []
    while end > 0 and len(lines) < count:
        start = buffer.rfind(b"\n", 0, end - 1) + 1
        lines.append(_clipped(buffer, start, end))
        end = start
    lines.reverse()
    return lines


def _lines_after(buffer: bytes | bytearray, start: int, count: int, limit: int, size: int = 0) -> list[bytes]:
    """Up to `count` lines of buffer[:limit] from `start` on, long ones clipped; size: as many
    more as begin within that many bytes of `start`."""
    lines: list[bytes] = []
    first = start
    while start < limit and (len(lines) < count or start - first < size):
        end = buffer.find(b"\n", start, limit)
        end = limit if end < 0 else end + 1
        lines.append(_clipped(buffer, start, end))
        start = end
    return lines


def _clipped(buffer: bytes | bytearray, start: int, end: int) -> bytes:
    """buffer[start:end], one line; cut to MAX_JOIN_LINE + 1 bytes (still too long to join) when longer."""
    newline = b"\n" if buffer[end - 1 : end] == b"\n" else b""
    if end - start - len(newline) > MAX_JOIN_LINE:
        return bytes(buffer[start : start + MAX_JOIN_LINE + 1]) + newline
    return bytes(buffer[start:end])


def _start_of_last_lines(buffer: bytes | bytearray, count: int, limit: int) -> int:
    """Offset where the last `count` lines of buffer[:limit] begin (a final partial line counts)."""
    end = limit
    if buffer[limit - 1 : limit] == b"\n":
        end -= 1
    for _ in range(count):
        cut = buffer.rfind(b"\n", 0, end)
        if cut < 0:
            return 0
        end = cut
    return end + 1 if end < limit else limit


def _end_of_first_lines(buffer: bytes | bytearray, count: int, limit: int) -> int:
    """Offset just past the first `count` lines of buffer[:limit]."""
    end = 0
    for _ in range(count):
        cut = buffer.find(b"\n", end, limit)
        if cut < 0:
            return limit
        end = cut + 1
    return end


def _substring_closure(targets: dict[bytes, list]) -> dict[bytes, tuple[bytes, ...]]:
    """For an anchor that holds shorter anchors, all of them: the engine reports only the longest."""
    anchors = list(targets)
    if not anchors:
        return {}
    find = ReEngine(anchors).found_in  # the longest anchor at each place inside another
    known, lengths = set(anchors), sorted({len(a) for a in anchors})
    closure = {}
    for anchor in anchors:
        found = find(anchor, 0, len(anchor))
        found |= {f[:n] for f in found for n in lengths if n < len(f) and f[:n] in known}  # and their prefixes
        inside = tuple(sorted(found))
        if len(inside) > 1:
            closure[anchor] = inside
    return closure


class _History:
    """The last CONTEXT_LINES lines read (copied, long ones clipped): the reader reuses its buffer."""

    def __init__(self) -> None:
        self.tail: list[bytes] = []

    def add(self, data: bytes | bytearray, end: int) -> None:
        lines = _lines_before(data, end, CONTEXT_LINES)
        if len(lines) < CONTEXT_LINES:  # a chunk of fewer lines: the older ones still count
            lines = self.tail[-(CONTEXT_LINES - len(lines)) :] + lines
        self.tail = lines

    def lines_before(self, count: int) -> list[bytes]:
        """The last `count` lines read (fewer at the start of the input)."""
        return self.tail[-count:] if count > 0 else []


@dataclass(slots=True)
class _Pending:
    """A candidate at the end of a chunk, copied with its neighbours, waiting for the next lines."""

    buffer: bytes
    offset: int
    line_no: int
    reported: frozenset[str]  # rules already reported for it on its own (live)
    loose: list[_Target]  # the patterns of its second try
    records: list[_Target] = field(default_factory=list)  # the facts read over its record (a paste's sweep)


class _Lines:
    """A candidate line and its neighbours in the buffer, parsed lazily."""

    def __init__(self, buffer: bytes | bytearray, start: int, end: int, line_no: int, limit: int = -1, more: bool = True):
        self.buffer, self.start, self.end, self.line_no = buffer, start, end, line_no
        self.limit = len(buffer) if limit < 0 else limit  # the buffer's lines end here
        self.more = more  # the input may go on past the buffer's end (False: it ends there)
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
                if end >= self.limit:
                    return None
                start = end + 1
                end = self.buffer.find(b"\n", start, self.limit)
                end = self.limit if end < 0 else end
                if start >= self.limit:
                    return None
        return start, end

    def parts(self, offset: int) -> LineParts:
        if offset not in self._parsed:
            bounds = self._bounds(offset)
            if bounds and offset and bounds[1] - bounds[0] > MAX_JOIN_LINE:
                bounds = None  # a request-log line or a prompt: never a wrapped message's other half
            self._parsed[offset] = parse_line(self.buffer[bounds[0] : bounds[1]]) if bounds else None
        parts = self._parsed[offset]
        return parts if parts is not None else LineParts(None)  # type: ignore[arg-type]

    def alone(self, selection: _Selection) -> list[_Target]:
        """The patterns that may match this line on its own. A pattern needs all its anchors
        in the raw bytes unless decoding rewrites them (escapes, ANSI, CR, NUL, a JSON log
        record): then any of them will do."""
        if REWRITTEN.search(self.buffer, self.start, self.end):
            return selection.every
        return selection.alone

    def digits_at(self, offset: int) -> Callable[[], bool]:
        """Whether the line at this offset goes on with a digit (its prefixes and indentation
        off): a line with a logger's prefix is a record of its own, whatever it starts with."""
        def goes_on_with_digit() -> bool:
            parts = self.parts(offset)
            return parts.level is None and (parts.text or "").lstrip()[:1].isdigit()
        return goes_on_with_digit

    def record_span(self, skip_markers: list[str]) -> tuple[int, int] | None:
        """The first and last line (offsets) of the logger record the candidate is part of: back to
        the line with the logger's prefix, on to the last line before the next record (a blank line,
        a request-log line, a short line all end one). None: the candidate is in no logger record."""
        first = 0
        while not self.starts_record(first, logger=True):
            if first <= -RECORD_BACK or self.starts_record(first) or not self._continues(first - 1, skip_markers):
                return None  # (an exception's lines are no logger record)
            first -= 1
        last, size = 0, sum(len(self.parts(offset).text) for offset in range(first, 1))
        full = self.width(first) - WRAP_SLACK  # a line this wide was filled by the wrap
        while last - first < RECORD_LINES and size < RECORD_TEXT and self._continues(last, skip_markers,
                                                                                     full if last > first else 0):
            last += 1
            size += len(self.parts(last).text)
        return first, last

    def record_end(self, last: int, skip_markers: list[str]) -> int:
        """The record's last line when the lines after `last` that start no record are taken too,
        whatever their width, up to CONTEXT_LINES of them (a hand wrap: "enabled " / "with ...")."""
        end = last
        while end - last < CONTEXT_LINES and self._continues(end, skip_markers, wide=True):
            end += 1
        return end

    def record_variants(self, first: int, last: int) -> tuple[LineParts, list[str], list[str]]:
        """The record's first line's parts, and its lines joined the ways the wrap may have cut
        them, likeliest first: with a space where a line's own leading blank was read off
        (more than the other lines have), run together, and with a space at every cut that is not
        inside a number ("len" / "40960"); then its first lines alone, longest first (for a
        record cut short, only its partial match)."""
        texts = [self.parts(offset).text for offset in range(first, last + 1)]
        own = self._own_spaces(first + 1, last)
        head = self.parts(first)
        if head.level is None and len(texts) > 1:  # its logger prefix goes on on the next line
            outer = head
            head, joined = _cut_prefix_joined(texts)
            head.process, head.rank = head.process or outer.process, head.rank or outer.rank
            head.time = head.time or outer.time
            if len(joined) < len(texts):
                texts, own = joined, own[1:]
        glued = texts[0] + "".join((" " if space and not before[-1:].isspace() else "") + after
                                   for before, after, space in zip(texts, texts[1:], own, strict=False))
        spaced = texts[0] + "".join(_glue(before, after) + after for before, after in zip(texts, texts[1:], strict=False))
        variants = list(dict.fromkeys(text.lstrip() for text in (glued, "".join(texts), spaced)))
        # where a cut record may end: before the lines that followed the cut (a progress bar)
        cut_at = ["".join(texts[:count]).lstrip() for count in range(len(texts) - 1, 0, -1)]
        return head, variants, cut_at

    def _own_spaces(self, start: int, last: int) -> list[bool | None]:
        """For each continuation line, whether its text began with a blank that reading it
        dropped: more blanks before its text than the fewest any continuation line has (the
        indentation or the prefix's own space). None: not known (a single continuation line)."""
        runs: list[int | None] = []
        for offset in range(start, last + 1):
            bounds, text = self._bounds(offset), self.parts(offset).text
            decoded = decode(self.buffer[bounds[0] : bounds[1]]) if bounds else ""
            before = decoded[: len(decoded) - len(text)] if decoded.endswith(text) else None
            runs.append(None if before is None else len(before) - len(before.rstrip()))
        known = [run for run in runs if run is not None]
        if len(known) < 2:
            return [None] * len(runs)
        lead = min(known)
        return [None if run is None else run > lead for run in runs]

    def _continues(self, offset: int, skip_markers: list[str], full: int = 0, wide: bool = False) -> bool:
        """The line after this one is more of its record: this one is filled as a wrap fills it
        (at least `full` wide: the record's first line's width, less a word a hand wrap moved on),
        and the next one has text, no logger prefix nor another process's tag of its own, and is
        no request-log line. wide: whatever this one's width."""
        following = self._bounds(offset + 1)
        if following is None:
            return False
        width = self.width(offset)
        if not wide and (width < max(MIN_WRAP, full) or width > MAX_WRAP):
            return False
        if NEW_RECORD.match(self.buffer, following[0], following[1]):
            return False
        this, after = self.parts(offset), self.parts(offset + 1)
        if (after.process or after.rank) and (after.process, after.rank) != (this.process, this.rank):
            return False  # another process's line ("[rank1]: Traceback ..." after an untagged record)
        text = after.text
        return bool(text and text.strip()) and not self.starts_record(offset + 1) and not any(m in text for m in skip_markers)

    def runs_on(self, event: Event) -> bool:
        """The event's lines run on into another record (a window joined the next record's line)."""
        offsets = range(event.record.line - self.line_no + 1, event.record.end_line - self.line_no + 1)
        return any(self.starts_record(offset) for offset in offsets)

    def width(self, offset: int) -> int:
        """The columns the line takes on a terminal (colour codes take none), 0 past the buffer."""
        bounds = self._bounds(offset)
        return len(decode(self.buffer[bounds[0] : bounds[1]])) if bounds else 0

    def starts_record(self, offset: int, logger: bool = False) -> bool:
        """The line has a logger's prefix, or the first part of one that the wrap cut, or (unless
        `logger`) it is a traceback's or an exception's first line."""
        parts = self.parts(offset)
        text = parts.text
        return parts.level is not None or text is not None and (
            CUT_LOGGER_PREFIX.match(text) is not None or not logger and EXCEPTION_HEAD.match(text) is not None)

    def ends_after(self, offset: int) -> bool:
        """The text ends with the line at this offset: a blank line, another record or the
        input's end follows (not the end of a buffer that holds only some lines of it)."""
        following = self.parts(offset + 1)
        if following.text is None:
            return self._bounds(offset + 1) is not None or not self.more  # a long line is another record
        return not following.text.strip() or following.level is not None

    def next_may_continue(self) -> bool:
        """There is a next line and it does not start a record of its own."""
        start = self.end + 1
        return start < self.limit and NEW_RECORD.match(self.buffer, start, self.limit) is None

    def context_text(self, skip_markers: list[str]) -> str:
        """The lines around the candidate, less request-log lines (a prompt may name any host)."""
        texts = [self.parts(o).text for o in range(-CONTEXT_LINES, CONTEXT_LINES + 1)]
        return "\n".join(t for t in texts if t and not any(m in t for m in skip_markers))
