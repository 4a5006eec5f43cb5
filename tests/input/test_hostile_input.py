"""Whatever is piped in, nothing raises, and a real message inside the noise is still found."""

import gzip
import io
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triage.cli import main
from triage.input.reader import iter_chunks, open_input, sniff_binary
from triage.input.lineparse import parse_line

ROOT = Path(__file__).resolve().parents[2]
ROBUST = ROOT / "fixtures" / "robust"
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PREFIX = b"ERROR 03-02 09:14:11 [serving_chat.py:212] "
BODY = (
    b"This model's maximum context length is 8192 tokens. However, you requested 9100 tokens "
    b"(8100 in the messages, 1000 in the completion). Please reduce the length of the messages or completion."
)
NUMBERS = {"max_model_len": 8192, "requested": 9100, "prompt_tokens": 8100, "completion_tokens": 1000}


def scan_bytes(matcher, data: bytes, chunk_size: int = 4 * 1024 * 1024):
    return list(matcher.scan("noisy.log", iter_chunks(io.BytesIO(data), chunk_size=chunk_size)))


def vt101(events):
    return [e for e in events if e.rule.code == "VT101"]


def assert_found_once(events, line: int):
    found = vt101(events)
    assert len(found) == 1, [(e.rule.code, e.record.line) for e in events]
    assert found[0].record.line == line
    assert {k: found[0].fields[k] for k in NUMBERS} == NUMBERS


# --- noise ---------------------------------------------------------------------------

CUT_ANSI = [b"\x1b", b"\x1b[", b"\x1b[3", b"\x1b[31", b"\x1b[1;3", b"\x1b[0m", b"\x1b]0;title\x07", b"\x1b[2K"]
TEXTISH = [
    b"INFO 03-02 09:14:10 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s",
    b"Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.20s/it]\r",
    b'INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    b"\xff\xfe\xfa broken utf-8 \xc3\x28 \xe2\x82",
    b"\x00" * 17,
    b"caf\xe9 latin-1 text",
    b"\t  indented  \t",
    b"",
]
noise_piece = st.one_of(
    st.binary(max_size=60),
    st.sampled_from(CUT_ANSI),
    st.sampled_from(TEXTISH),
    st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass")),
)
# A noise line: pieces without a newline; a lone CR inside is a progress-bar redraw.
noise_line = st.lists(noise_piece, max_size=6).map(lambda parts: b"".join(parts).replace(b"\n", b" "))
ending = st.sampled_from([b"\n", b"\r\n"])


@st.composite
def noisy_log(draw):
    """(log bytes, 1-based line of the known message)."""
    before = draw(st.lists(st.tuples(noise_line, ending), max_size=12))
    after = draw(st.lists(st.tuples(noise_line, ending), max_size=12))
    # What shares the message's physical line: colour, or a progress bar redrawn with CR.
    lead = draw(st.sampled_from([b"", b"\x1b[1;31m", b"  3%|3         | 3/100\r", b"\x00\x00"]))
    prefix = PREFIX.replace(b"ERROR", b"ERROR\x1b[0m") if lead.startswith(b"\x1b") else PREFIX
    head = b"".join(line + end for line, end in before)
    tail = b"".join(line + end for line, end in after)
    final = draw(ending) if after else draw(st.sampled_from([b"", b"\n", b"\r\n"]))  # maybe no final newline
    message_line = lead + prefix + BODY + (final if not after else draw(ending))
    return head + message_line + tail, head.count(b"\n") + 1


# --- reader ------------------------------------------------------------------------


@PROPERTY
@given(data=st.binary(max_size=4000) | noisy_log().map(lambda pair: pair[0]), chunk_size=st.integers(1, 300))
def test_reader_gives_back_every_byte_in_whole_lines(data, chunk_size):
    chunks = [c.copy() for c in iter_chunks(io.BytesIO(data), chunk_size=chunk_size)]
    assert b"".join(c.data for c in chunks) == data
    assert all(c.data.endswith(b"\n") for c in chunks[:-1])
    line = 1
    for chunk in chunks:
        assert chunk.first_line == line
        line += chunk.data.count(b"\n")


# --- record splitter ----------------------------------------------------------------


@PROPERTY
@given(raw=st.binary(max_size=3000) | noise_line | noisy_log().map(lambda pair: pair[0]))
def test_the_record_splitter_takes_any_bytes(raw):
    parts = parse_line(raw)
    assert isinstance(parts.text, str)
    assert "\x00" not in parts.text


@pytest.mark.parametrize(
    "lead",
    [b"", b"\x1b[1;31m", b"\x00\x00\x00", b"  3%|3         | 3/100\r", b"\xff\xfe", b"(APIServer pid=77) "],
)
def test_the_record_splitter_keeps_the_message_whatever_comes_before(lead):
    assert BODY.decode() in parse_line(lead + PREFIX + BODY + b"\r\n").text


# --- matcher -------------------------------------------------------------------------


@PROPERTY
@given(data=st.binary(max_size=4000), chunk_size=st.integers(16, 400))
def test_the_matcher_takes_random_bytes(matcher, data, chunk_size):
    lines = data.count(b"\n") + 1
    for event in scan_bytes(matcher, data, chunk_size):
        assert 1 <= event.record.line <= lines


@PROPERTY
@given(log=noisy_log(), chunk_size=st.integers(64, 2000))
def test_a_known_message_in_noise_is_found_with_its_numbers(matcher, log, chunk_size):
    data, line = log
    assert_found_once(scan_bytes(matcher, data, chunk_size), line)


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"])
def test_a_message_split_at_every_point_over_two_lines_is_found(matcher, newline):
    before = b"INFO 03-02 09:14:10 [logger.py:1] starting\n"
    for cut in range(1, len(BODY)):
        data = before + PREFIX + BODY[:cut] + newline + BODY[cut:] + newline + b"INFO next\n"
        events = scan_bytes(matcher, data)
        assert_found_once(events, line=2)


@pytest.mark.parametrize("blanks", [b" ", b"\t", b"\t\t", b"   \t "])
def test_a_line_ending_in_blanks_does_not_take_the_message_of_the_next(matcher, blanks):
    before = b"INFO 03-02 09:14:10 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s" + blanks + b"\n"
    assert_found_once(scan_bytes(matcher, before + PREFIX + BODY + b"\n"), line=2)


@PROPERTY
@given(cut=st.integers(1, len(BODY) - 1), filler=st.integers(0, 40), chunk_size=st.integers(32, 600))
def test_a_split_message_is_found_across_chunk_boundaries(matcher, cut, filler, chunk_size):
    head = b"".join(b"INFO 03-02 09:14:10 [logger.py:1] filler line %d\n" % i for i in range(filler))
    data = head + PREFIX + BODY[:cut] + b"\n" + BODY[cut:] + b"\n" + b"INFO tail\n" * 3
    assert_found_once(scan_bytes(matcher, data, chunk_size), line=filler + 1)


MIB = 1024 * 1024


@pytest.mark.parametrize(
    "make, line",
    [
        (lambda: b"x" * (6 * MIB) + b"\n" + PREFIX + BODY + b"\n", 2),  # after a 6 MiB line
        (lambda: PREFIX + BODY + b"\n" + b"y" * (6 * MIB) + b"\n", 1),  # before one
        (lambda: b'{"prompt": "' + b"z" * (3 * MIB) + b'"} ' + PREFIX + BODY + b"\n", 1),  # at the end of one
        (lambda: b"\n" * 100_000 + PREFIX + BODY, 100_001),  # after 100k empty lines, no final newline
        (lambda: PREFIX + BODY, 1),  # the whole input, no newline at all
    ],
    ids=["after-6MiB-line", "before-6MiB-line", "end-of-3MiB-line", "after-empty-lines", "no-newline"],
)
def test_long_and_empty_lines_do_not_hide_the_message(matcher, make, line):
    assert_found_once(scan_bytes(matcher, make(), chunk_size=MIB), line)


@PROPERTY
@given(long=st.integers(0, 3000), chunk_size=st.integers(16, 300))
def test_a_line_longer_than_the_cap_is_cut_and_later_lines_keep_their_numbers(matcher, long, chunk_size):
    # the cap bounds memory for a stream with no newline (/dev/zero); here it is small
    data = b"x" * long + b"\n" + PREFIX + BODY + b"\nINFO after\n"
    chunks = [c.copy() for c in iter_chunks(io.BytesIO(data), chunk_size=chunk_size, max_line=256)]
    assert max(len(c.data) for c in chunks) <= max(512, 2 * chunk_size) + len(PREFIX + BODY)
    assert_found_once(list(matcher.scan("cut.log", chunks)), line=2)


def test_the_robust_fixture_is_noisy_and_still_diagnosed(matcher):
    data = (ROBUST / "noisy-overflow-v064.log").read_bytes()
    assert b"\x00" in data and b"\x1b[" in data and b"\r\n" in data and not data.endswith(b"\n")
    events = scan_bytes(matcher, data)
    assert_found_once(events, line=data[: data.index(BODY)].count(b"\n") + 1)


# --- binary and broken inputs through the CLI ----------------------------------------


def scan_cli(*args):
    return CliRunner().invoke(main, ["scan", "--format", "json", *map(str, args)])


def write_log(path: Path) -> Path:
    path.write_bytes(b"INFO 03-02 09:14:01 [api_server.py:1] vLLM API server version 0.4.3\n" + PREFIX + BODY + b"\n")
    return path


def fake_core(path: Path) -> Path:
    rng = random.Random(7)
    path.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(rng.randrange(256) for _ in range(20000)))
    return path


# Random bytes of no known format are read as text, with one warning: test_binary_junk.py.
BINARIES = {
    "core.4242": lambda p: fake_core(p),
    "screenshot.png": lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(3000)),
    "photo.jpg": lambda p: p.write_bytes(b"\xff\xd8\xff\xe0" + os.urandom(3000)),
    "logs.zip": lambda p: p.write_bytes(b"PK\x03\x04" + os.urandom(3000)),
    "windows.log": lambda p: p.write_bytes((PREFIX + BODY + b"\r\n").decode().encode("utf-16")),
    "bad-header.gz": lambda p: p.write_bytes(b"\x1f\x8b\x08\x00garbage that is not deflate"),
}


@pytest.mark.parametrize("name", list(BINARIES))
def test_a_binary_input_is_skipped_with_one_warning_and_the_scan_goes_on(tmp_path, name):
    binary = tmp_path / name
    BINARIES[name](binary)
    log = write_log(tmp_path / "server.log")
    result = scan_cli(binary, log)
    assert result.exit_code == 1  # the error in server.log decides, as if the binary were not there
    warnings = result.stderr.splitlines()
    assert len(warnings) == 1 and warnings[0].startswith(f"vllm-triage: warning: {binary}: ")
    assert '"code": "VT101"' in result.stdout


def test_only_binary_inputs_is_exit_2(tmp_path):
    core = fake_core(tmp_path / "core")
    result = scan_cli(core)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"vllm-triage: error: {core}: looks like an ELF")


def test_a_missing_file_is_still_exit_2_and_the_others_are_scanned(tmp_path):
    result = scan_cli(tmp_path / "absent.log", write_log(tmp_path / "server.log"))
    assert result.exit_code == 2
    assert '"code": "VT101"' in result.stdout


def test_a_truncated_gzip_is_scanned_as_far_as_it_goes_with_one_warning(tmp_path):
    log = PREFIX + BODY + b"\n" + b"".join(b"INFO 03-02 09:15:%02d [x.py:1] filler %d\n" % (i % 60, i) for i in range(20000))
    packed = gzip.compress(log)
    path = tmp_path / "server.log.gz"
    path.write_bytes(packed[: len(packed) // 2])
    result = scan_cli(path)
    assert result.exit_code == 1
    assert '"code": "VT101"' in result.stdout
    warnings = result.stderr.splitlines()
    assert len(warnings) == 1 and "truncated or corrupt gzip" in warnings[0] and "scanned what could be read" in warnings[0]


def test_a_gz_name_on_plain_text_is_read_as_text(tmp_path):
    path = write_log(tmp_path / "server.log.gz")
    result = scan_cli(path)
    assert result.exit_code == 1 and result.stderr == ""


def test_no_shipped_fixture_looks_binary():
    # some start with NULs (copytruncate) or carry ANSI and invalid UTF-8: still logs
    fixtures = [p for p in (ROOT / "fixtures").rglob("*") if p.is_file() and p.suffix in (".log", ".gz")]
    assert len(fixtures) > 3
    for path in fixtures:
        _, stream = open_input(str(path))
        with stream:
            assert sniff_binary(stream) is None, path


# --- inputs are never written to, and no files appear --------------------------------


def snapshot(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_mode)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_a_scan_writes_nothing_and_changes_no_input(tmp_path):
    fixtures = tmp_path / "fixtures"
    shutil.copytree(ROOT / "fixtures", fixtures)
    for path in fixtures.rglob("*"):
        path.chmod(0o555 if path.is_dir() else 0o444)
    before = snapshot(tmp_path)
    logs = sorted(str(p) for p in fixtures.rglob("*") if p.suffix in (".log", ".gz"))
    for format_name in ("json", "text"):
        run = subprocess.run(
            [sys.executable, "-m", "triage", "scan", "--format", format_name, "--fail-on", "never", *logs],
            cwd=tmp_path, capture_output=True, timeout=300,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        assert run.returncode == 0, run.stderr.decode()[-2000:]
    assert snapshot(tmp_path) == before  # same files, same bytes, same mtimes and modes: works as root too
    for path in fixtures.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
