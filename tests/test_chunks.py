"""Chunk boundaries: whatever the chunk size, a message is found once, on the right line."""

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triage.reader import iter_chunks

MESSAGE = (
    b"ValueError: To serve at least one request with the models's max seq len (65536), (8.00 GiB KV "
    b"cache is needed, which is larger than the available KV cache memory (5.31 GiB). Based on the "
    b"available memory, the estimated maximum model length is 43488. Try increasing "
    b"`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
)
NOISE = b'INFO:     10.0.0.7:5120 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'


def scan(matcher, data, chunk_size):
    return [e for e in matcher.scan("x.log", iter_chunks(io.BytesIO(data), chunk_size=chunk_size)) if e.rule.code == "VT201"]


def test_chunks_count_lines_themselves_unless_the_consumer_did():
    data = b"".join(b"line %d\n" % i for i in range(1, 300))
    chunks = []
    for chunk in iter_chunks(io.BytesIO(data), chunk_size=64):
        chunks.append(chunk)
        if len(chunks) % 2:
            chunk.lines = chunk.data.count(b"\n")  # what the matcher does: the reader trusts it
    for chunk in chunks:
        assert chunk.data.split(b"\n", 1)[0] == b"line %d" % chunk.first_line


@settings(max_examples=40, deadline=None)
@given(noise_lines=st.integers(0, 30), cut=st.integers(len(b"ValueError: T"), len(MESSAGE) - 1), chunk_size=st.integers(40, 700))
def test_a_message_wrapped_across_a_chunk_boundary_is_found_once(matcher, noise_lines, cut, chunk_size):
    data = NOISE * noise_lines + MESSAGE[:cut] + b"\n" + MESSAGE[cut:] + b"\n" + NOISE * 3
    events = scan(matcher, data, chunk_size)
    assert [(e.record.line, e.fields["max_model_len"]) for e in events] == [(noise_lines + 1, 65536)]


@pytest.mark.parametrize("chunk_size", [64, 1024, 4 * 1024 * 1024])
def test_a_message_on_a_line_longer_than_the_buffer(matcher, chunk_size):
    long_line = b"INFO 01-02 03:04:05 [x.py:1] " + b"padding " * 40_000 + b"\n"
    data = NOISE + long_line + b"ERROR 01-02 03:04:06 [core.py:700] " + MESSAGE + b" " + b"z" * 9000 + b"\n" + long_line
    events = scan(matcher, data, chunk_size)
    assert [e.record.line for e in events] == [3]


@pytest.mark.parametrize("chunk_size", [50, 333, 4096])
def test_a_message_without_a_final_newline(matcher, chunk_size):
    data = NOISE * 20 + MESSAGE
    assert [e.record.line for e in scan(matcher, data, chunk_size)] == [21]


def test_line_numbers_count_newlines_only(matcher):
    progress = b"Loading weights:  10%|#         | 1/10\rLoading weights: 100%|##########| 10/10\r\n"
    data = progress * 5 + b"\r\n".join([NOISE.strip()] * 3) + b"\r\n" + MESSAGE + b"\r\n"
    for chunk_size in (48, 4096):
        assert [e.record.line for e in scan(matcher, data, chunk_size)] == [9]
