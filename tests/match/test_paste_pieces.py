"""A paste handed over in pieces (a pipe's reads; an in-memory text read as the 8 KiB that
sniffing peeked, then the rest) is read as the one text it is: a message or a record wrapped
across the seam between two pieces was swept by neither and read whole by no candidate line
(a kubectl paste wrapped at 84 columns lost its last metrics line's KV usage). A larger input,
or a live one, passes through as it comes, at no cost."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triage.input.reader import Chunk, InputError, iter_chunks
from triage.match.paste_sweep import PASTE_SIZE, whole_paste
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
    assert readings(matcher.scan("paste", iter_chunks(stream))) == whole, (path.name, sizes)


def test_a_larger_or_live_input_passes_as_it_comes():
    """A server's log pays nothing: its chunks are the reader's own, not copies."""
    big = [Chunk(b"x" * 1000 + b"\n", 1), Chunk(b"y\n" * (PASTE_SIZE // 2), 2), Chunk(b"z\n", PASTE_SIZE // 2 + 2)]
    small = [Chunk(b"a\n", 1), Chunk(b"b\n", 2)]
    server = [Chunk(b"y\n" * (PASTE_SIZE // 2 + 1), 1), big[2]]  # a first chunk larger than a paste
    assert all(a is b for a, b in zip(whole_paste(server, live=False), server, strict=True))
    assert all(a is b for a, b in zip(whole_paste(small, live=True), small, strict=True))
    assert all(a is b for a, b in zip(whole_paste(small[1:], live=False), small[1:], strict=True))  # not from line 1
    # a paste that grows past PASTE_SIZE: its first pieces as one, then the reader's chunks
    joined, *rest = whole_paste(big, live=False)
    assert (bytes(joined.data), joined.first_line) == (bytes(big[0].data), 1) and rest[0] is big[1] and rest[1] is big[2]
    [one] = whole_paste(small, live=False)
    assert (bytes(one.data), one.first_line) == (b"a\nb\n", 1)


def test_what_was_read_before_the_input_failed_is_matched():
    """A bound (the MCP server's 256 MiB, --max-bytes) or bad gzip data ends the input with an
    error after some pieces: those are matched still, then the error goes on."""
    def failing():
        yield Chunk(b"a\n", 1)
        yield Chunk(b"b\n", 2)
        raise InputError("more than 4 bytes")

    joined = whole_paste(failing(), live=False)
    assert bytes(next(joined).data) == b"a\nb\n"
    with pytest.raises(InputError):
        next(joined)
