"""Binary junk inside a text log (a process wrote bytes to the same stdout): the text lines are
still scanned, with one warning saying how many lines and bytes were not text; only inputs that
are a known binary format by their first bytes are skipped whole, with one line."""

from __future__ import annotations

import io
import random
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from triage.cli import main
from triage.input.reader import iter_chunks, sniff_binary
from triage.input.lineparse import parse_line
from triage.pipeline import ScanOptions, Text, scan
from triage.rules.ruletest import read_markers
from conftest import scan_events

ROOT = Path(__file__).resolve().parents[2]
LOGS = sorted(p for p in (ROOT / "fixtures").rglob("*.log") if p.stat().st_size < 200_000)
JUNK_WARNING = re.compile(r"^(?P<name>.+): (?P<lines>[\d,]+) lines? (?:is|are) not text \((?P<bytes>[\d,]+) bytes? ")
PARTIAL_UTF8 = (b"\xe4\xb8", b"\xf0\x9f\x98", b"\xc3", b"\xff\xfe", b"\x80\x81\x82", b"\xed\xa0\x80")
junk = st.one_of(
    st.binary(min_size=1, max_size=300),  # what a process writes: random bytes, newlines among them
    st.integers(1, 64).map(lambda n: b"\x00" * n),
    st.sampled_from(PARTIAL_UTF8),
)


def not_text_oracle(data: bytes) -> tuple[int, int]:
    """Lines holding a NUL or bytes that are not UTF-8, and those bytes, one line at a time
    (a run of NULs that starts the input is a copytruncate hole, not junk)."""
    lines = data.split(b"\n")
    lines[0] = lines[0].lstrip(b"\x00")
    bad = [line for line in lines if b"\x00" in line or line.decode("utf-8", "ignore").encode() != line]
    return len(bad), sum(line.count(0) + len(line) - len(line.decode("utf-8", "ignore").encode()) for line in bad)


def damaged(data: bytes, pieces: list[bytes], offsets: list[int]) -> tuple[bytes, list[tuple[int, int]]]:
    """data with each piece inserted at its offset; the pieces' spans in the result."""
    out, spans, cursor = bytearray(), [], 0
    for offset, piece in sorted(zip(offsets, pieces, strict=True), key=lambda pair: pair[0]):
        out += data[cursor:offset]
        spans.append((len(out), len(out) + len(piece)))
        out += piece
        cursor = offset
    out += data[cursor:]
    return bytes(out), spans


def touched(data: bytes, spans: list[tuple[int, int]]) -> set[int]:
    """The numbers of the lines that hold a junk byte (their newline included)."""
    numbers, start = set(), 0
    for number, line in enumerate(data.split(b"\n"), start=1):
        end = start + len(line) + 1
        if any(a < end and b > start for a, b in spans):
            numbers.add(number)
        start = end
    return numbers


def blanked(data: bytes, lines: set[int]) -> bytes:
    """These lines as empty lines: the same number of lines."""
    return b"\n".join(b"" if n in lines else line for n, line in enumerate(data.split(b"\n"), start=1))


def record_end(rows: list[bytes], line: int) -> int:
    """The last line of the logger record that starts at this line (1-based): up to the next
    line with a logger's prefix or a blank one."""
    while line < len(rows) and rows[line].strip() and parse_line(rows[line]).level is None:
        line += 1
    return line


def without_markers(data: bytes) -> bytes:
    """The fixture as vLLM printed it: its `#!` marker lines empty, as `rules test` reads it (a
    marker line below a fact's line would read as the rest of its record)."""
    return blanked(data, {n for n, line in enumerate(data.split(b"\n"), start=1) if line.startswith(b"#!")})


def events_of(matcher, data: bytes) -> set[tuple]:
    """What each line said, before the diagnosis groups it (the first of many rejections stands
    for them all, so a finding's line moves when its first line is blanked)."""
    return {(e.rule.code, e.record.line, e.record.end_line, tuple(sorted(e.fields.items())))
            for e in matcher.scan("server.log", iter_chunks(io.BufferedReader(io.BytesIO(data))))}


def warnings_of(data: bytes) -> list[str]:
    return scan([Text("server.log", data)], ScanOptions()).errors


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(LOGS), data=st.data())
def test_junk_at_random_points_hides_no_finding_whose_lines_are_intact(matcher, path, data):
    """Every message the log says with its junk-touched lines left empty is read from the log
    with its junk too, on the same lines with the same numbers, when its own lines hold no junk:
    a junk line next to it neither takes it as the rest of a wrapped message nor joins it."""
    clean = without_markers(path.read_bytes())
    pieces = data.draw(st.lists(junk, min_size=1, max_size=6))
    offsets = data.draw(st.lists(st.integers(0, len(clean)), min_size=len(pieces), max_size=len(pieces)))
    text, spans = damaged(clean, pieces, offsets)
    assume(sniff_binary(io.BufferedReader(io.BytesIO(text))) is None)  # junk that starts a known format is it
    junk_lines = touched(text, spans)
    rows = text.split(b"\n")
    # (nor a fact read from the rest of a record whose first line holds junk: it is read from that line)
    # (nor a message whose next line, or a fact whose record's further lines, hold junk: blanked,
    # that line makes it a message cut short)
    reference = {event for event in events_of(matcher, blanked(text, junk_lines))
                 if not any(event[1] <= n <= max(event[2] + 1, record_end(rows, event[1]) if event[0] >= "VT9" else 0)
                            for n in junk_lines)
                 and not (event[1] - 1 in junk_lines and event[0] >= "VT9" and parse_line(rows[event[1] - 1]).level is None)}
    with_junk = events_of(matcher, text)
    # (a message the blanked line cut short is read on through the junk-touched line: the same
    # rule on the same first line, over more lines, with every number the cut reading had)
    missed = [event for event in reference if not any(
        found[:2] == event[:2] and found[2] >= event[2] and set(event[3]) <= set(found[3]) for found in with_junk)]
    assert not missed, missed
    warnings = [JUNK_WARNING.match(e) for e in warnings_of(text) if "not text" in e]
    lines, size = not_text_oracle(text)
    if lines:
        [warning] = warnings
        assert (int(warning["lines"].replace(",", "")), int(warning["bytes"].replace(",", ""))) == (lines, size)
    else:
        assert warnings == []


def test_a_log_that_starts_with_a_copytruncate_hole_has_no_warning():
    log = (ROOT / "fixtures" / "startup-kv-too-small-v1.log").read_bytes()
    assert warnings_of(b"\x00" * 50_000 + log) == []


def tar_header() -> bytes:
    header = bytearray(512)
    header[:8] = b"logs.txt"
    header[257:263] = b"ustar\x00"
    return bytes(header)


LOG_TEXT = "INFO 03-02 09:14:01 [api_server.py:1] vLLM API server version 0.4.3\n"
# Each known binary format by its first bytes, and the words that name it.
MAGICS = {
    "core": (b"\x7fELF\x02\x01\x01\x00", "ELF"),
    "shot.png": (b"\x89PNG\r\n\x1a\n", "PNG"),
    "photo.jpg": (b"\xff\xd8\xff\xe0", "JPEG"),
    "old.gif": (b"GIF87a", "GIF"),
    "anim.gif": (b"GIF89a", "GIF"),
    "logs.zip": (b"PK\x03\x04", "zip"),
    "logs.tar": (tar_header(), "tar"),
    "logs.7z": (b"7z\xbc\xaf\x27\x1c", "7z"),
    "server.log.xz": (b"\xfd7zXZ\x00", "xz"),
    "server.log.zst": (b"\x28\xb5\x2f\xfd", "zstd"),
    "server.log.bz2": (b"BZh91AY&SY", "bzip2"),
    "report.pdf": (b"%PDF-1.7", "PDF"),
    "model.safetensors": (b"\x30\x00\x00\x00\x00\x00\x00\x00{\"__metadata__\":{}}", "safetensors"),
    "utf16-bom.log": (LOG_TEXT.encode("utf-16"), "UTF-16"),
    "utf16-be-bom.log": (b"\xfe\xff" + LOG_TEXT.encode("utf-16-be"), "UTF-16"),
    "utf16-no-bom.log": (LOG_TEXT.encode("utf-16-le") * 3, "UTF-16"),
}


@pytest.mark.parametrize("name", list(MAGICS))
@settings(max_examples=15, deadline=None)
@given(tail=st.binary(max_size=2000))
def test_each_known_binary_format_is_told_by_its_first_bytes(name, tail):
    head, words = MAGICS[name]
    if "UTF-16" in words:
        tail = head[2:] * 4  # UTF-16 is told from its text: more of it follows
    why = sniff_binary(io.BufferedReader(io.BytesIO(head + tail)))
    assert why is not None and words in why, why


@pytest.mark.parametrize("name", list(MAGICS))
def test_a_known_binary_format_is_skipped_whole_with_one_line(tmp_path, name):
    head, words = MAGICS[name]
    binary = tmp_path / name
    # UTF-16 is told from its text: more of it follows; any other format from its first bytes
    tail = head * 20 if "UTF-16" in words else random.Random(name).randbytes(3000) + LOG_TEXT.encode()
    binary.write_bytes(head + tail)
    alone = CliRunner().invoke(main, ["scan", "--format", "json", str(binary)])
    assert alone.exit_code == 2  # nothing was read
    assert alone.stderr.splitlines() == [alone.stderr.strip()] and words in alone.stderr and "skipped" in alone.stderr
    log = ROOT / "fixtures" / "startup-kv-too-small-v1.log"
    both = CliRunner().invoke(main, ["scan", "--format", "json", str(binary), str(log)])
    assert both.exit_code == 1  # the log's error decides, as if the binary were not there
    assert len(both.stderr.splitlines()) == 1 and both.stderr.startswith(f"vllm-triage: warning: {binary}: ")


def test_random_bytes_without_a_format_are_scanned_with_one_warning(tmp_path):
    """No magic: scanned as text (nothing found in it), one warning with the counts, exit 0."""
    noise = random.Random(3).randbytes(20_000)
    path = tmp_path / "random.bin"
    path.write_bytes(noise)
    run = CliRunner().invoke(main, ["scan", "--format", "json", str(path)])
    assert run.exit_code == 0, run.output
    [line] = run.stderr.splitlines()
    found = JUNK_WARNING.match(line.removeprefix("vllm-triage: warning: "))
    lines, size = not_text_oracle(noise)
    assert found and (int(found["lines"].replace(",", "")), int(found["bytes"].replace(",", ""))) == (lines, size)


def test_jobs_count_the_same_junk_as_one_process(tmp_path):
    """--jobs cuts the file into parts read with lines of context on both sides: each junk
    line is counted once, by the part that owns it."""
    rng = random.Random(5)
    log = (ROOT / "fixtures" / "startup-kv-too-small-v1.log").read_bytes()
    blocks = []
    while sum(map(len, blocks)) < 18 * 1024 * 1024:
        blocks.append(log)
        blocks.append(rng.randbytes(rng.randrange(1, 400)) + b"\n")
    path = tmp_path / "big.log"
    path.write_bytes(b"".join(blocks))
    one = [e for e in scan([str(path)], ScanOptions()).errors if "not text" in e]
    two = [e for e in scan([str(path)], ScanOptions(jobs=2)).errors if "not text" in e]
    assert len(one) == 1 and one == two
    assert JUNK_WARNING.match(one[0])["lines"].replace(",", "") == str(not_text_oracle(path.read_bytes())[0])


def _examples_log() -> bytes:
    """Every rule example, one after another: each line holds its own message (or a fact)."""
    from triage.rules.ruleset import load_rules

    return "\n".join(example.text.strip() for rule in load_rules().rules for example in rule.examples).encode()


# What a process writes inside a line: control characters (not a line's end, a CR's redraw or
# a tab; C1 ones in UTF-8) and bytes that are not UTF-8 (a lone continuation byte never is).
CONTROL = bytes(b for b in [*range(0x20), 0x7F] if b not in b"\n\r\t")
controls = st.lists(st.one_of(st.sampled_from(CONTROL).map(lambda b: bytes([b])),
                              st.integers(0x80, 0x9F).map(lambda c: chr(c).encode())), min_size=1, max_size=4).map(b"".join)
inline_junk = st.one_of(
    controls,
    st.sampled_from(PARTIAL_UTF8),
    st.binary(min_size=1, max_size=6).map(lambda raw: bytes(0x80 | b & 0x3F for b in raw)),
)
# the fixtures as their rule tests read them: the marker lines (annotations) blank
INLINE_LOGS = {**{str(p.relative_to(ROOT)): read_markers(p.read_bytes(), p.name)[0] for p in LOGS},
               "rule examples": _examples_log()}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(INLINE_LOGS)), data=st.data())
def test_a_line_damaged_inside_takes_no_intact_line_with_it(matcher, name, data):
    """Junk inside a few lines (their newlines intact, so every line keeps its number): each
    message read from intact lines alone is still read, on the same lines with the same numbers;
    a damaged line's own message is read or not, but never reaches into such a message's lines
    (a damaged line read as a message wrapped onto the next took the next line's message)."""
    clean = INLINE_LOGS[name]
    lines = clean.split(b"\n")
    inside = [n for n, line in enumerate(lines) if len(line) > 1]
    chosen = data.draw(st.lists(st.sampled_from(inside), min_size=1, max_size=4, unique=True))
    for n in chosen:
        at = data.draw(st.integers(1, len(lines[n]) - 1))
        lines[n] = lines[n][:at] + data.draw(inline_junk) + lines[n][at:]
    damaged_lines = {n + 1 for n in chosen}
    text = b"\n".join(lines)
    assume(sniff_binary(io.BufferedReader(io.BytesIO(text))) is None)
    before = events_of(matcher, clean)
    intact = {e for e in before if not any(e[1] <= n <= e[2] for n in damaged_lines)}
    read = events_of(matcher, text)
    assert intact <= read, f"lost or changed: {sorted(intact - read)}"
    held = {n for e in intact for n in range(e[1], e[2] + 1)}
    for code, first, last, _ in read - before:  # (a message over a damaged line read as before is its own)
        stolen = held & set(range(first, last + 1))
        assert not stolen, f"{code} at {first}-{last} took the lines {sorted(stolen)} of intact messages"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(INLINE_LOGS)), data=st.data())
def test_control_bytes_that_break_no_anchor_change_nothing(matcher, name, data):
    """Control bytes inside a line are no text: dropped when it is decoded, as NUL is, so its
    own message is read as before, with its numbers ("took\\x01 13.87 GiB"), and so is every
    other. (Where the bytes split the literal a line is found by, it is not looked at: silent.)"""
    clean = INLINE_LOGS[name]
    lines = clean.split(b"\n")
    number = data.draw(st.sampled_from([n for n, line in enumerate(lines) if len(line) > 1]))
    at = data.draw(st.integers(1, len(lines[number]) - 1))
    junk_bytes = data.draw(controls)
    line = lines[number][:at] + junk_bytes + lines[number][at:]
    assume({a for a in matcher.anchors if a in line} == {a for a in matcher.anchors if a in lines[number]})
    lines[number] = line
    assert events_of(matcher, b"\n".join(lines)) == events_of(matcher, clean)


def test_a_startup_line_with_a_control_byte_inside_keeps_its_figure(matcher):
    log = read_markers((ROOT / "fixtures" / "startup-kv-too-small-v1.log").read_bytes(), "startup")[0]
    damaged_log = log.replace(b"Model loading took ", b"Model loading took\x01 ")
    assert damaged_log != log
    weights = [e.fields for e in scan_events(matcher, "startup.log", damaged_log.decode("utf-8")) if e.rule.code == "VT909"]
    assert weights and weights[0]["weights_gib"] == pytest.approx(14.99), weights
