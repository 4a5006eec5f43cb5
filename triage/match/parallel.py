"""--jobs N: one file scanned by N processes, each over its own run of whole lines.

The file is cut at line boundaries into N parts. Each process reads its part plus
LEAD lines before and after it, so a message wrapped across a cut and the lines around
a candidate are there as in one scan, and keeps the events whose first line lies in
its own part. Line numbers are counted per part and made global once all parts are
counted; the events then go to the diagnosis in line order, as from one scan.

Only for a plain file on disk (a pipe or gzip cannot be cut), and only where processes
can be forked; elsewhere the scan is the usual one.
"""

from __future__ import annotations

import itertools
import io
import multiprocessing
import os
import stat
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, fields as dataclass_fields
from typing import Any, BinaryIO

from triage.match.lines import CONTEXT_LINES
from triage.match.matcher import Matcher
from triage.input.reader import GZIP_MAGIC, Chunk, NotText, iter_chunks, tallied
from triage.model import Event, Record

LEAD = 2 * CONTEXT_LINES  # lines read before and after a part
MIN_PART = 8 * 1024 * 1024  # smaller parts are not worth a process
PART_SIZE = 32 * 1024 * 1024  # larger files are cut into more parts than processes: flat memory
BACK_WINDOW = 64 * 1024  # how far back the lead-in is looked for (a longer line is never joined)

_matcher: Matcher | None = None  # set before forking: the workers inherit it
RECORD_FIELDS = [f.name for f in dataclass_fields(Record)]  # sent as a plain tuple: it pickles much faster than the dataclass


@dataclass(slots=True)
class _Part:
    start: int  # first byte of the part (a line start)
    stop: int  # first byte after it (a line start, or the file size)
    read_from: int  # where its process starts reading (LEAD lines before start)
    read_to: int  # where it stops reading (LEAD lines after stop)
    lead_lines: int  # newlines in [read_from, start)


@dataclass(slots=True)
class _Found:
    """What a process sends back: events without their rule objects, and its line count."""

    events: list[tuple]  # rule index, the record's fields, the event's fields, excerpt, pattern id, hosted
    lines: int  # newlines in [start, stop)
    warnings: list[str]
    not_text: tuple[int, int] = (0, 0)  # lines and bytes that are not text in [start, stop)


def can_split(path: str) -> bool:
    """A plain file on disk, not gzip, and a platform that forks."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return False
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as handle:
            return handle.read(2) != GZIP_MAGIC
    except OSError:
        return False


def scan_split(matcher: Matcher, path: str, jobs: int, junk: NotText | None = None) -> Iterator[Event]:
    """The events of the file in line order, found by `jobs` processes.

    The file is cut into parts of at most PART_SIZE, so that no more than jobs + 1 parts'
    events wait in memory for the diagnosis, which takes them in order meanwhile. junk: where
    the lines that are not text are counted, each by the part that owns it."""
    global _matcher
    parts = _parts(path, jobs)
    junk = junk if junk is not None else NotText()
    if len(parts) < 2:
        with open(path, "rb") as handle:
            yield from matcher.scan(path, tallied(iter_chunks(handle), junk))
        return
    _matcher = matcher  # the processes forked below inherit it
    by_rule = dict(enumerate(matcher.rules))
    first_line, consumed = 1, 0
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        waiting: deque = deque()
        for index in range(len(parts)):
            waiting.append((parts[index], pool.apply_async(_scan_part, (path, parts[index]))))
            if len(waiting) <= jobs and index < len(parts) - 1:
                continue
            while waiting and (len(waiting) > jobs or index == len(parts) - 1):
                part, pending = waiting.popleft()
                result = pending.get()
                matcher.warnings.extend(result.warnings)
                junk.lines += result.not_text[0]
                junk.junk_bytes += result.not_text[1]
                shift = first_line - 1 - part.lead_lines
                used = consumed
                for rule_index, (_, line, end_line, *rest), fields, excerpt, pattern_id, hosted in result.events:
                    line, end_line = line + shift, end_line + shift
                    if line <= consumed:  # a message wrapped from the part before already used this line
                        continue
                    used = max(used, end_line)
                    yield Event(by_rule[rule_index], Record(path, line, end_line, *rest), fields, excerpt, pattern_id, hosted)
                first_line += result.lines
                consumed = used
    _matcher = None


def _scan_part(path: str, part: _Part) -> _Found:
    matcher = _matcher
    assert matcher is not None
    index_of = {id(rule): index for index, rule in enumerate(matcher.rules)}
    line_counts: list[int] = []
    junk = NotText(started=part.start > 0)  # only the file's own start may be a copytruncate hole
    own_start, own_stop = part.start - part.read_from, part.stop - part.read_from
    read = 0  # bytes of the stream before the chunk

    def chunks(stream: BinaryIO) -> Iterator[Chunk]:
        nonlocal read
        for chunk in iter_chunks(stream):
            # the part's own lines only: the lines around it are the neighbours' (both ends are line starts)
            start, stop = max(own_start - read, 0), min(own_stop - read, chunk.end)
            if start < stop:
                junk.add(chunk.data, start, stop)
            read += chunk.end
            yield chunk  # the matcher is done with it when it asks for the next: count before the reader refills
            line_counts.append(chunk.lines if chunk.lines is not None else chunk.data.count(b"\n", 0, chunk.end))

    own_first = part.lead_lines + 1
    warned = len(matcher.warnings)
    events = []
    with open(path, "rb") as handle:
        handle.seek(part.read_from)
        stream = io.BufferedReader(_Range(handle, part.read_to - part.read_from))
        for event in matcher.scan(path, chunks(stream)):
            record = event.record
            if record.line < own_first:
                continue
            fields = tuple(getattr(record, name) for name in RECORD_FIELDS)
            events.append((index_of[id(event.rule)], fields, event.fields, event.excerpt, event.pattern_id, event.hosted))
    total = sum(line_counts)
    with open(path, "rb") as handle:
        handle.seek(part.stop)
        tail_lines = handle.read(part.read_to - part.stop).count(b"\n")
    own_lines = total - part.lead_lines - tail_lines
    last = part.lead_lines + own_lines
    if part.read_to > part.stop:  # lines past the part, read for context: the next part's (the last part
        events = [e for e in events if e[1][1] <= last]  # has none, and its last line may lack a newline)
    return _Found(events, own_lines, matcher.warnings[warned:], (junk.lines, junk.junk_bytes))


def _parts(path: str, jobs: int) -> list[_Part]:
    size = os.path.getsize(path)
    count = max(1, min(jobs, size // MIN_PART), -(-size // PART_SIZE))
    with open(path, "rb") as handle:
        cuts = sorted({0, size, *(_next_line_start(handle, size * i // count, size) for i in range(1, count))})
        parts = []
        for start, stop in itertools.pairwise(cuts):
            read_from, lead_lines = _lines_before(handle, start, LEAD)
            parts.append(_Part(start, stop, read_from, _lines_after(handle, stop, LEAD, size), lead_lines))
    return parts


def _next_line_start(handle: BinaryIO, offset: int, size: int) -> int:
    handle.seek(offset)
    while offset < size:
        block = handle.read(BACK_WINDOW)
        if not block:
            return size
        at = block.find(b"\n")
        if at >= 0:
            return offset + at + 1
        offset += len(block)
    return size


def _lines_before(handle: BinaryIO, start: int, count: int) -> tuple[int, int]:
    """Where the `count` lines before `start` begin (within BACK_WINDOW), and how many there are."""
    if start == 0:
        return 0, 0
    begin = max(0, start - BACK_WINDOW)
    handle.seek(begin)
    block = handle.read(start - begin)
    at, found = len(block) - 1, 0  # block ends with the newline of the line before start
    while found < count:
        cut = block.rfind(b"\n", 0, at)
        if cut < 0:
            if begin == 0:
                return 0, found + 1  # the line that starts the file
            return begin + at + 1, found  # a longer line: never part of a wrapped message
        at, found = cut, found + 1
    return begin + at + 1, found


def _lines_after(handle: BinaryIO, stop: int, count: int, size: int) -> int:
    """Just past the `count` lines after `stop` (within BACK_WINDOW each)."""
    end = stop
    for _ in range(count):
        if end >= size:
            return size
        end = _next_line_start(handle, end, size)
    return end


class _Range(io.RawIOBase):
    """The next `length` bytes of a file, as a stream of their own."""

    def __init__(self, handle: BinaryIO, length: int):
        super().__init__()
        self.handle, self.left = handle, length

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        if self.left <= 0:
            return 0
        view = memoryview(target)[: self.left]
        count = self.handle.readinto(view)  # type: ignore[attr-defined]
        self.left -= count or 0
        return count or 0
