"""Chunk boundaries: whatever the chunk size, a message is found once, on the right line."""

import io
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triage.input.assemble import Rows
from triage.input.reader import InputQuiet, iter_chunks

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
    seen = []
    for index, chunk in enumerate(iter_chunks(io.BytesIO(data), chunk_size=64)):
        lines = bytes(chunk.data[: chunk.end])  # the reader refills its buffer for the next chunk
        assert lines.split(b"\n", 1)[0] == b"line %d" % chunk.first_line
        if index % 2:
            chunk.lines = lines.count(b"\n")  # what the matcher does: the reader trusts it
        seen.append(lines)
    assert b"".join(seen) == data


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


ROOT_FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
LIVE_ERROR = (
    "ERROR 05-01 11:29:41 [serving_chat.py:222] This model's maximum context length is 8192 tokens. "
    "However, your request has 9001 input tokens. Please reduce the length of the input messages.\n"
)


class Live(io.RawIOBase):
    """A pipe from a running server: each piece arrives, then the pipe goes quiet (InputQuiet)
    where `pauses` says; `asked` holds the pieces handed over so far."""

    def __init__(self, pieces: list[bytes], pauses: set[int], asked: list[int]):
        self.pieces, self.pauses, self.asked = pieces, pauses, asked
        self.quiet = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        done = len(self.asked)
        if done and done - 1 in self.pauses and not self.quiet and done < len(self.pieces):
            self.quiet = True
            raise InputQuiet()
        self.quiet = False
        if done == len(self.pieces):
            return 0
        piece = self.pieces[done]
        self.asked.append(done + 1)
        buffer[: len(piece)] = piece
        return len(piece)


def live_events(matcher, lines: list[str], pauses: set[int], asked: list[int]):
    stream = io.BufferedReader(Live([line.encode() for line in lines], pauses, asked))
    return matcher.scan("pipe", iter_chunks(stream, markers=matcher.markers))


def test_live_reports_a_line_that_matches_alone_before_the_next_line_arrives(matcher):
    """A pipe gone quiet after a whole record: the record is read before the next line arrives."""
    asked: list[int] = []
    lines = ["INFO 05-01 11:29:40 [api_server.py:1] starting\n", LIVE_ERROR, "INFO 05-01 11:29:42 [x.py:1] next\n"]
    events = live_events(matcher, lines, {0, 1, 2}, asked)
    first = next(e for e in events if e.rule.kind != "fact")
    assert (first.rule.code, first.record.line, asked) == ("VT102", 2, [1, 2])
    assert [e.rule.code for e in events if e.rule.kind != "fact"] == []  # not reported twice


def test_live_still_joins_a_message_wrapped_over_the_next_line(matcher):
    """The rows of one record arrive together (a wrapped message is one write): read joined."""
    text = LIVE_ERROR.split("] ", 1)[1]
    lines = [text[:60] + "\n", text[60:], "INFO 05-01 11:29:42 [x.py:1] next\n"]
    events = [e for e in live_events(matcher, lines, {1, 2}, []) if e.rule.kind != "fact"]
    assert [(e.rule.code, e.record.line, e.record.end_line) for e in events] == [("VT102", 1, 2)]


def test_without_a_pause_the_newest_record_waits_for_the_next_line(matcher):
    asked: list[int] = []
    lines = ["INFO 05-01 11:29:40 [api_server.py:1] starting\n", LIVE_ERROR, "INFO 05-01 11:29:42 [x.py:1] next\n"]
    events = live_events(matcher, lines, set(), asked)
    next(e for e in events if e.rule.kind != "fact")
    assert asked == [1, 2, 3]


def test_a_pipe_that_pauses_between_records_finds_what_a_file_finds(matcher):
    """Live only reports earlier; what it reports is what a scan of the whole file finds, when
    the writer pauses between records (a server writes a record, a wrapped message, at once)."""
    data = b"".join(path.read_bytes() for path in sorted(ROOT_FIXTURES.glob("*.log")))
    lines = data.decode("utf-8", "replace").splitlines(keepends=True)
    encoded = "".join(lines).encode()
    rows, offsets = Rows(encoded, len(encoded), matcher.markers), [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line.encode()))
    starts = {index - 1 for index in range(1, len(lines)) if rows.starts_record(offsets[index])}

    def events(pauses):
        found = live_events(matcher, lines, pauses, [])
        return sorted((e.rule.code, e.record.line, e.record.end_line, e.pattern_id, e.hosted) for e in found)
    assert events(starts) == events(set()) and events(set())


# Lines a request-logging server interleaves: a prompt line longer than any wrapped message
# (quoting the error, a decoy), a hosted API's error, a message wrapped over two lines.
PROMPT_LINE = (
    b"INFO 01-02 03:04:05 [logger.py:39] Received request chatcmpl-1: prompt: '"
    + b"please summarise the report " * 700 + MESSAGE + b"', params: SamplingParams(max_tokens=64)\n"
)
WRAPPED = MESSAGE[:150] + b"\n" + MESSAGE[150:] + b"\n"
HOSTED = (
    b"openai.BadRequestError: Error code: 400 - {'error': {'message': \"This model's maximum context "
    b"length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length "
    b"of the messages.\", 'type': 'invalid_request_error', 'param': 'messages', 'code': "
    b"'context_length_exceeded'}}\n"
)
PIECES = [NOISE, PROMPT_LINE, b"ERROR 01-02 03:04:06 [core.py:700] " + MESSAGE + b"\n", WRAPPED, HOSTED]


def every_event(matcher, data, chunk_size):
    chunks = iter_chunks(io.BytesIO(data), chunk_size=chunk_size)
    return [(e.rule.code, e.record.line, e.record.end_line, e.hosted, e.fields) for e in matcher.scan("x.log", chunks)]


@settings(max_examples=40, deadline=None)
@given(order=st.lists(st.integers(0, len(PIECES) - 1), min_size=1, max_size=14), chunk_size=st.integers(40, 40_000))
def test_any_chunk_size_finds_what_one_chunk_finds_next_to_long_prompt_lines(matcher, order, chunk_size):
    """Near a seam only a clip of a long neighbour is kept: it must never change an event."""
    data = b"".join(PIECES[i] for i in order)
    assert every_event(matcher, data, chunk_size) == every_event(matcher, data, len(data) + 1)
