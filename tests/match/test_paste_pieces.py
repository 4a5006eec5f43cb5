"""A paste handed over in pieces (a pipe's reads; an in-memory text read as the 8 KiB that
sniffing peeked, then the rest) is read as the one text it is: the reader ends its chunks
where a record starts, so a message or a record wrapped across the seam between two pieces
is read whole (a kubectl paste wrapped at 84 columns lost its last metrics line's KV usage)."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triage.input.reader import Chunk, InputError, iter_chunks
from triage.match.matcher import PASTE_SIZE
from triage.rules.ruletest import MARKER_PREFIX

from conftest import FIXTURES

PASTES = sorted(path for path in FIXTURES.rglob("*.log") if path.stat().st_size <= PASTE_SIZE)


class Pieces(io.RawIOBase):
    """The bytes in reads of the given sizes, over and over."""

    def __init__(self, data: bytes, sizes: list[int]):
        self.data, self.sizes, self.at, self.reads = data, sizes, 0, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        size = min(len(buffer), self.sizes[self.reads % len(self.sizes)], len(self.data) - self.at)
        self.reads += 1
        buffer[:size] = self.data[self.at : self.at + size]
        self.at += size
        return size


def readings(events) -> list[tuple]:
    return [(e.rule.code, e.record.line, e.record.end_line, repr(e.fields)) for e in events]


def text_of(path) -> bytes:
    """The fixture as vLLM printed it: its annotation lines empty."""
    return b"\n".join(b"" if line.startswith(MARKER_PREFIX) else line for line in path.read_bytes().split(b"\n"))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(PASTES), st.lists(st.integers(1, 9000), min_size=1, max_size=4))
def test_a_paste_in_pieces_reads_as_the_whole_text(matcher, path, sizes):
    data = text_of(path)
    whole = readings(matcher.scan("paste", [Chunk(data, 1)]))
    stream = io.BufferedReader(Pieces(data, sizes), buffer_size=max(sizes))
    assert readings(matcher.scan("paste", iter_chunks(stream, markers=matcher.markers))) == whole, (path.name, sizes)


class Failing(io.RawIOBase):
    """The bytes, then an error (a bound, bad gzip data) once they are read."""

    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.at >= len(self.data):
            raise InputError("more than the bound")
        size = min(len(buffer), 4096, len(self.data) - self.at)
        buffer[:size] = self.data[self.at : self.at + size]
        self.at += size
        return size


def test_what_was_read_before_the_input_failed_is_matched(matcher):
    """A bound (the MCP server's 256 MiB, --max-bytes) or bad gzip data ends the input with an
    error after some pieces: the records read before it are matched, then the error goes on."""
    data = text_of(FIXTURES / "startup-kv-too-small-v1.log")
    events = []
    with pytest.raises(InputError):
        for event in matcher.scan("cut", iter_chunks(io.BufferedReader(Failing(data)), markers=matcher.markers)):
            events.append(event)
    assert readings(events) == readings(matcher.scan("paste", [Chunk(data, 1)]))[: len(events)]
    assert any(e.rule.code == "VT201" for e in events)
