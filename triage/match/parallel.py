"""--jobs N: one file scanned by N processes, each over its own run of whole lines.

The file is cut into N parts where a record starts (triage.input.assemble), so each
record is whole in one part, as in one scan. Line numbers are counted per part and made
global once all parts are counted; the events then go to the diagnosis in line order, as
from one scan.

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

from triage.input.assemble import MAX_WALK, Rows
from triage.input.reader import GZIP_MAGIC, Chunk, NotText, iter_chunks, tallied
from triage.match.matcher import Matcher
from triage.model import Event, Record

MIN_PART = 8 * 1024 * 1024  # smaller parts are not worth a process
PART_SIZE = 32 * 1024 * 1024  # larger files are cut into more parts than processes: flat memory
BLOCK = 2 * MAX_WALK  # read around a cut to find the record that starts there

_matcher: Matcher | None = None  # set before forking: the workers inherit it
RECORD_FIELDS = [f.name for f in dataclass_fields(Record)]  # sent as a plain tuple: it pickles much faster than the dataclass


@dataclass(slots=True)
class _Part:
    start: int  # first byte of the part (a record's first row)
    stop: int  # first byte after it (a record's first row, or the file size)


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
    parts = _parts(path, jobs, matcher.markers)
    junk = junk if junk is not None else NotText()
    if len(parts) < 2:
        with open(path, "rb") as handle:
            yield from matcher.scan(path, tallied(iter_chunks(handle), junk))
        return
    _matcher = matcher  # the processes forked below inherit it
    by_rule = dict(enumerate(matcher.rules))
    first_line = 1
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        waiting: deque = deque()
        for index in range(len(parts)):
            waiting.append((parts[index], pool.apply_async(_scan_part, (path, parts[index]))))
            if len(waiting) <= jobs and index < len(parts) - 1:
                continue
            while waiting and (len(waiting) > jobs or index == len(parts) - 1):
                _, pending = waiting.popleft()
                result = pending.get()
                matcher.warnings.extend(result.warnings)
                junk.lines += result.not_text[0]
                junk.junk_bytes += result.not_text[1]
                shift = first_line - 1
                for rule_index, (_, line, end_line, *rest), fields, excerpt, pattern_id, hosted in result.events:
                    yield Event(by_rule[rule_index], Record(path, line + shift, end_line + shift, *rest), fields, excerpt,
                                pattern_id, hosted)
                first_line += result.lines
    _matcher = None


def _scan_part(path: str, part: _Part) -> _Found:
    matcher = _matcher
    assert matcher is not None
    index_of = {id(rule): index for index, rule in enumerate(matcher.rules)}
    junk = NotText(started=part.start > 0)  # only the file's own start may be a copytruncate hole
    lines = 0

    def chunks(stream: BinaryIO) -> Iterator[Chunk]:
        nonlocal lines
        for chunk in tallied(iter_chunks(stream, markers=matcher.markers), junk):
            chunk.offset += part.start
            yield chunk  # the matcher is done with it when it asks for the next: count before the reader refills
            lines += chunk.lines if chunk.lines is not None else chunk.data.count(b"\n", 0, chunk.end)

    warned = len(matcher.warnings)
    events = []
    with open(path, "rb") as handle:
        handle.seek(part.start)
        stream = io.BufferedReader(_Range(handle, part.stop - part.start))
        for event in matcher.scan(path, chunks(stream)):
            fields = tuple(getattr(event.record, name) for name in RECORD_FIELDS)
            events.append((index_of[id(event.rule)], fields, event.fields, event.excerpt, event.pattern_id, event.hosted))
    return _Found(events, lines, matcher.warnings[warned:], (junk.lines, junk.junk_bytes))


def _parts(path: str, jobs: int, markers: tuple[bytes, ...] = ()) -> list[_Part]:
    size = os.path.getsize(path)
    count = max(1, min(jobs, size // MIN_PART), -(-size // PART_SIZE))
    with open(path, "rb") as handle:
        cuts = sorted({0, size, *(_record_start(handle, size * i // count, size, markers) for i in range(1, count))})
    return [_Part(start, stop) for start, stop in itertools.pairwise(cuts)]


def _record_start(handle: BinaryIO, offset: int, size: int, markers: tuple[bytes, ...]) -> int:
    """The first row at or after offset that starts a record (the rows above it considered);
    past BLOCK bytes of one record, the first row there."""
    handle.seek(max(0, offset - BLOCK))
    block = handle.read(2 * BLOCK)
    base = max(0, offset - BLOCK)
    rows = Rows(block, len(block), markers)
    at = block.find(b"\n", offset - base)
    first = None if at < 0 else at + 1
    while first is not None and first < len(block):
        end = block.find(b"\n", first)
        if end < 0:
            break
        if rows.starts_record(first, end):
            return base + first
        first = end + 1
    return min(size, base + (block.find(b"\n", offset - base) + 1 if b"\n" in block[offset - base :] else len(block)))


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
