"""The run summary of a startup log pasted re-wrapped or cut (issue 15): every fixture that
states facts, hard-wrapped at 80 to 160 columns as a terminal or a web page does (mid-word,
mid-number; the continuation lines bare, indented, or carrying the line's collector and
process prefix again, as docker, journald, kubectl --prefix and vLLM's process tags print
them), read whole or handed over in pieces as a pipe does, says what the unwrapped log says:
the same facts, from the same lines, and no value takes text of the record after it. A fact line cut short keeps the fields printed before the cut and reads
none it did not print.
"""

from __future__ import annotations

import io
import re
from collections import defaultdict
from contextlib import nullcontext
from functools import cache
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triage import pipeline
from triage.input.lineparse import LOGGER_PREFIXES, parse_line
from triage.input.reader import Chunk, iter_chunks
from triage.match.matcher import PASTE_SIZE, RECORD_ROLES
from triage.rules.ruleset import load_rules
from triage.rules.ruletest import MARKER_PREFIX

from conftest import FIXTURES, scan_events

RULES = load_rules()
MATCHER = pipeline.make_matcher(pipeline.ScanOptions(RULES))
FACT_FIELDS = {name for rule in RULES.rules if rule.kind == "fact" for p in rule.patterns for name in p.fields}
WIDTHS = range(80, 161, 4)
STYLES = 4  # bare, indented, the line's prefix again, kubectl's prefix on every line
KUBECTL = re.compile(r"\[pod/[^/\]]+/[^\]]+\] ")  # kubectl logs --prefix: "[pod/<name>/<container>] "
POD = "[pod/vllm-qwen-5c7d9f8b6-k2p4x/vllm] "
PIECE = 512  # bytes a pipe hands over at once, more by the width: the seams fall all over the records
CUTS = 9  # places each fact line is cut at
TOKEN = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|.", re.S)


def log_lines(path: Path) -> tuple[str, ...]:
    return tuple(line for line in path.read_bytes().decode("utf-8", "replace").split("\n")
                 if not line.startswith(MARKER_PREFIX.decode()))


class Pipe(io.RawIOBase):
    """The text as a pipe hands it over: `piece` bytes a read at most."""

    def __init__(self, data: bytes, piece: int):
        self.data, self.piece, self.at = data, piece, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        size = min(len(buffer), self.piece, len(self.data) - self.at)
        buffer[:size] = self.data[self.at : self.at + size]
        self.at += size
        return size


def piped(piece: int):
    """pipeline.open_path for a Text that comes through a pipe (scan - with a json report: not live)."""
    def open_path(path, follow, on_wait=None):
        return path.name, io.BufferedReader(Pipe(path.data, piece), buffer_size=piece)
    return mock.patch.object(pipeline, "open_path", open_path)


@cache
def scanned(lines: tuple[str, ...], piece: int | None = None) -> tuple[list, dict[int, list]]:
    """The run summaries, and the fact events by the line they start on. piece: the bytes a
    pipe hands over at once (None: held in memory, as a paste to the MCP server, which is
    read in the 8 KiB that sniffing peeked, then the rest)."""
    events: dict[int, list] = defaultdict(list)

    def take(event, run) -> None:
        if event.rule.kind == "fact" and event.rule.role in (None, "ready"):  # what a run keeps as facts
            events[event.record.line].append(event)

    with piped(piece) if piece else nullcontext():
        result = pipeline.scan([pipeline.Text("log", "\n".join(lines).encode())],
                               pipeline.ScanOptions(RULES, matcher=MATCHER, on_event=take))
    return [run.summary for run in result.runs.get("log", [])], dict(events)


# The texts the matcher's anchor pass looks for, by rule: a line cut before all of them is no candidate.
ANCHORS = defaultdict(list)
for _anchor, _targets in MATCHER.targets.items():
    for _target in _targets:
        ANCHORS[_target.rule.code].append(_anchor.decode("utf-8", "replace"))
# Already hard-wrapped (at 120 and 80 columns): wrapped again, the short rest of each of their
# lines sits inside a record, which reads as the record's end (a line of a wrapped record is
# filled), and a value's original line holds only a piece of its record.
WRAPPED_ALREADY = {"request-you-passed-v017-terminal-wrapped.log", "paste-wrapped-80-columns-v0110.log"}
FACT_LOGS = {path.name: log_lines(path) for path in sorted([*FIXTURES.glob("*.log"), *(FIXTURES / "runs").glob("*.log")])
             if path.name not in WRAPPED_ALREADY and any(summary.facts for summary in scanned(log_lines(path))[0])}


def lead_of(line: str) -> str:
    """What stands before vLLM's logger prefix: the collector's and the process's prefixes."""
    found = LOGGER_PREFIXES[0].search(line)
    return line[: found.start()] if found and found.start() <= 120 else ""


def columns(line: str, width: int) -> list[str]:
    """The line cut every `width` columns as a terminal does: colour codes and NUL bytes take none."""
    pieces, piece, seen = [], "", 0
    for token in TOKEN.findall(line):
        if seen == width:
            pieces.append(piece)
            piece, seen = "", 0
        piece += token
        seen += token[0] not in "\x1b\x00"
    return [*pieces, piece]


def kubectl(line: str) -> str:
    """The line as kubectl logs --prefix prints it (one that has the prefix already keeps it)."""
    return line if not line or KUBECTL.match(line) else POD + line


def wrap(lines: tuple[str, ...], width: int, style: int) -> tuple[tuple[str, ...], list[int]]:
    """Every line hard-wrapped at `width` (style 0: bare continuation lines, 1: indented, 2: each
    line under the original's prefixes, 3: each line under kubectl's prefix); and for each line
    of the result, its original line."""
    out, origin = [], []
    for number, line in enumerate(lines, 1):
        if style == 3:
            line = kubectl(line)
        pod = KUBECTL.match(line)
        lead = ("", "    ", lead_of(line), pod.group() if pod else "")[style]
        if style >= 2:  # the collector or vLLM prefixes each printed line: the text after it is wrapped
            pieces = [lead + piece for piece in columns(line[len(lead) :], width)]
        else:
            pieces = [piece if index == 0 else lead + piece for index, piece in enumerate(columns(line, width))]
        out += pieces
        origin += [number] * len(pieces)
    return tuple(out), origin


def facts_of(lines: tuple[str, ...], origin: list[int] | None = None, piece: int | None = None) -> list[dict]:
    """Each run's facts, with the original line each was read from."""
    def where(line: int) -> int:
        return origin[line - 1] if origin else line
    return [{name: (value, where(summary.fact_lines[name]) if name in summary.fact_lines else None)
             for name, value in summary.facts.items()} for summary in scanned(lines, piece)[0]]


@pytest.mark.parametrize("name", sorted(FACT_LOGS))
def test_every_wrap_width_keeps_the_run_summary_facts_and_their_lines(name):
    lines = FACT_LOGS[name]
    expected = facts_of(lines)
    for index, width in enumerate(WIDTHS):
        # each style in turn, and each style with both readers: in memory, and a pipe's pieces
        style, piece = (index + 1) % STYLES, PIECE + 331 * index if index // STYLES % 2 else None
        wrapped, origin = wrap(lines, width, style)
        got = facts_of(wrapped, origin, piece)
        assert len(got) == len(expected), (name, width, style, piece)
        for run, (want, have) in enumerate(zip(expected, got, strict=True)):
            lost = {k: v for k, v in want.items() if have.get(k) != v}
            extra = {k: v for k, v in have.items() if k not in want}
            assert not lost and not extra, f"{name} at {width} columns, style {style}, pieces {piece}, run {run + 1}: " \
                                           f"lost or changed {lost}, read {extra}, got {[have.get(k) for k in lost]}"


@pytest.mark.parametrize("name", sorted(FACT_LOGS))
def test_no_wrapped_fact_value_takes_text_of_another_record(name):
    lines = FACT_LOGS[name]
    for index, width in enumerate(WIDTHS[::2]):
        wrapped, origin = wrap(lines, width, (index + 1) % STYLES)
        for run in facts_of(wrapped, origin):
            for fact, (value, line) in run.items():
                if isinstance(value, str) and fact in FACT_FIELDS and line is not None:
                    assert value in lines[line - 1], (name, width, fact, value, lines[line - 1])


def cut_points(text: str) -> list[int]:
    step = max(1, len(text) // CUTS)
    return list(range(step, len(text), step))


def value_spans(event) -> dict[str, tuple[int, int]]:
    """Where the exact pattern read each field of the event in its line's message."""
    pattern = next(p for p in event.rule.patterns if p.id == event.pattern_id)
    match = pattern.compiled.search(event.record.text)
    return {} if match is None else {k: match.span(k) for k in pattern.fields if match.group(k) is not None}


def ends_match(event, name: str) -> bool:
    """The field is the last thing its pattern reads on the cut line: a number cut there
    ("Using max model len 409") cannot be told from a whole one."""
    pattern = next(p for p in event.rule.patterns if p.id == event.pattern_id)
    match = pattern.compiled.search(event.record.text)
    return match is not None and match.end(name) == match.end() == len(event.record.text)


@pytest.mark.parametrize("name", sorted(FACT_LOGS))
def test_a_fact_line_cut_short_keeps_the_fields_before_the_cut_and_invents_none(name):
    lines = FACT_LOGS[name]
    _, events = scanned(lines)
    for number, line_events in events.items():
        raw = lines[number - 1]
        text = parse_line(raw.encode()).text
        if not raw.endswith(text) or any(e.record.end_line != number for e in line_events):
            continue  # a message the decoding rewrote, or one over several lines
        for cut in cut_points(text):
            cut_lines = (*lines[: number - 1], raw[: len(raw) - len(text) + cut], *lines[number:])
            read = {e.rule.code: e for e in scanned(cut_lines)[1].get(number, [])}
            for event in line_events:
                spans = value_spans(event)
                anchored = any(anchor in text[:cut] for anchor in ANCHORS[event.rule.code])  # still a candidate
                before = {k for k, (_, end) in spans.items() if end < cut} if anchored else set()
                got = read.get(event.rule.code)
                fields = got.fields if got else {}
                elsewhere = {(k, repr(v)) for other in read.values() for k, v in other.fields.items()}
                missing = {k for k in before if fields.get(k) != event.fields[k]  # (or another rule of the line read it)
                           and (k, repr(event.fields[k])) not in elsewhere}
                assert not missing, (name, number, cut, event.rule.code, missing, text[:cut])
                for field, value in fields.items():
                    if field in event.fields and value == event.fields[field] or isinstance(value, bool):
                        continue
                    assert got is not None and ends_match(got, field) and str(event.fields.get(field)).startswith(str(value)), \
                        (name, number, cut, event.rule.code, field, value, text[:cut])


FACT_EXAMPLES = [(rule.code, example.text.strip()) for rule in RULES.rules if rule.kind == "fact" and rule.role in (None, "ready")
                 for example in rule.examples if "\n" not in example.text.strip()]


@pytest.mark.parametrize(("code", "text"), FACT_EXAMPLES, ids=[f"{code}-{n}" for n, (code, _) in enumerate(FACT_EXAMPLES)])
def test_a_fact_line_wrapped_inside_a_word_and_at_a_space_keeps_its_fields(code, text):
    """One seam cut a word (a terminal), another came at a space the wrap dropped (a tracker, a
    hand wrap), lines of 20 to 160 columns: the record's lines joined with a space at one seam
    and none at the other."""
    whole = {e.rule.code: e.fields for e in scan_events(MATCHER, "example", text + "\n")}
    anchors = [anchor for anchor, targets in MATCHER.targets.items() if any(t.rule.code == code for t in targets)]
    start = len(parse_line(text.encode()).text) and len(text) - len(parse_line(text.encode()).text)
    words = [m.start() + 2 for m in re.finditer(r"[A-Za-z]{4,}", text) if m.start() >= start]
    spaces = [m.start() for m in re.finditer(" ", text) if m.start() > start]
    for word in words[:6]:
        for space in spaces:
            first, second = sorted((word, space))
            if second - first < 2:
                continue
            pieces = [text[:first], text[first:second], text[second:]]
            pieces = [piece.strip(" ") if n else piece.rstrip(" ") for n, piece in enumerate(pieces)]  # the space dropped
            if not all(len(piece) >= 20 and len(piece) <= 160 for piece in pieces):
                continue  # (a wrap leaves lines of some words, up to a terminal's width)
            if not any(anchor in piece.encode() for anchor in anchors for piece in pieces):
                continue  # (the anchor pass needs one of the rule's anchors whole on a line)
            read = {e.rule.code: e.fields for e in scan_events(MATCHER, "wrapped", "\n".join(pieces) + "\n")}
            assert read.get(code) == whole[code], pieces


LOGGED_EXAMPLES = [(code, text) for code, text in FACT_EXAMPLES if parse_line(text.encode()).level is not None]
SHORTEST, LONGEST = 20, 160  # the lines a hand wrap leaves


def printed_words(code: str) -> set[str]:
    """The words the rule's patterns print (a wrap may cut one: "te" / "nsor_parallel_size")."""
    sources = [p.compiled.pattern for p in RULES.by_code(code).patterns]
    return {word for source in sources for word in re.findall(r"[A-Za-z_]+", re.sub(r"\\.", " ", source)) if len(word) > 3}


def seam_places(code: str, text: str) -> list[int]:
    """Where a wrap may cut the example's message: at a space (dropped), or inside a word its
    rule's patterns print (a value cut inside is a guess the joins cannot always make)."""
    start = len(text) - len(parse_line(text.encode()).text)
    words = printed_words(code)
    inside = {found.start() + at for word in words for found in re.finditer(re.escape(word), text)
              for at in range(2, len(word) - 1) if found.start() >= start}
    return sorted(inside | {m.start() for m in re.finditer(" ", text) if m.start() > start})


@st.composite
def hand_wraps(draw, code: str, text: str) -> list[str]:
    """The message's lines as a hand wrap and a terminal leave them mixed: 20 to 160 columns,
    some seams at dropped spaces, some inside words, the continuation lines bare, indented or
    under the line's process tag."""
    places, cuts, at = seam_places(code, text), [], 0
    while len(text) - at > LONGEST or len(cuts) < 2 or draw(st.booleans()):
        feasible = [c for c in places if at + SHORTEST <= c <= at + LONGEST and len(text) - c > SHORTEST]
        if not feasible:
            break
        cuts.append(at := draw(st.sampled_from(feasible)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    pieces = [piece.strip(" ") if n else piece.rstrip(" ") for n, piece in enumerate(pieces)]
    lead = ("", "    ", lead_of(text))[draw(st.integers(0, 2))]
    return [pieces[0], *(lead + piece for piece in pieces[1:])]


@pytest.mark.parametrize(("code", "text"), LOGGED_EXAMPLES, ids=[f"{c}-{n}" for n, (c, _) in enumerate(LOGGED_EXAMPLES)])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_a_logger_record_hand_wrapped_over_any_lines_keeps_every_field(code, text, data):
    """Any number of short lines, seams at dropped spaces mixed with cuts inside words: the
    record is read from its logger prefix over all its lines, whichever line holds the anchor."""
    lines = data.draw(hand_wraps(code, text))
    whole = {e.rule.code: e.fields for e in scan_events(MATCHER, "example", text + "\n")}
    read = {e.rule.code: e.fields for e in scan_events(MATCHER, "wrapped", "\n".join(lines) + "\n")}
    assert read.get(code) == whole[code], lines


FOLLOWERS = {
    "another record": "WARNING 01-02 03:04:05 [other.py:9] {tail}",
    "a prompt": "INFO 01-02 03:04:05 [logger.py:41] Received request cmpl-7: prompt: 'see {tail}', params: None",
    "a prompt wrapped": "INFO 01-02 03:04:05 [logger.py:41] Received request cmpl-7: prompt: 'what does this\n{tail}\nmean', "
                        "params: None",
}


@pytest.mark.parametrize("follower", FOLLOWERS)
def test_a_hand_wrapped_record_cut_before_its_last_value_reads_it_from_no_other_line(follower):
    """The record's short lines are read on up to a line that starts another record or quotes a
    prompt, not past it: the value printed there, right below the cut, is not the record's."""
    checked = 0
    for code, text in LOGGED_EXAMPLES:
        whole = next(e for e in scan_events(MATCHER, "example", text + "\n") if e.rule.code == code)
        match = next(p.compiled.search(whole.record.text) for p in whole.rule.patterns if p.id == whole.pattern_id)
        values = {name: match.start(name) for name in whole.fields if name in match.groupdict()
                  and match.group(name) is not None and not isinstance(whole.fields[name], bool)}
        if not values:
            continue
        name, start = max(values.items(), key=lambda item: item[1])
        start += len(text) - len(whole.record.text)
        places = [c for c in seam_places(code, text) if SHORTEST < c < start - SHORTEST and text[c] == " "]
        if len(places) < 2:
            continue
        cut = [text[: places[0]], text[places[0] + 1 : places[-1]], text[places[-1] + 1 : start].rstrip(" ")]
        if not all(cut):
            continue
        pasted = "\n".join([*cut, FOLLOWERS[follower].format(tail=text[start:])]) + "\n"
        for event in scan_events(MATCHER, "paste.log", pasted):
            if event.rule.code == code and event.record.line <= len(cut):
                checked += 1
                assert event.record.end_line <= len(cut), pasted
                assert event.fields.get(name) != whole.fields[name], pasted
    assert checked >= 10


# A server's access log before the startup: the input is over the size swept whole as a paste,
# so the matcher reads it in the pieces it is handed.
ACCESS = b'(APIServer pid=12) INFO:     10.0.0.7:40112 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
BEFORE = ACCESS * (PASTE_SIZE // len(ACCESS) + 1)


def record_facts_of(events) -> list[tuple]:
    return sorted((e.rule.code, e.record.line, e.record.end_line, repr(sorted(e.fields.items()))) for e in events
                  if e.rule.kind == "fact" and e.rule.role in RECORD_ROLES)


@cache
def wrapped_log(name: str, width: int, style: int) -> tuple[bytes, list[int], list[tuple]]:
    """The log hard-wrapped after BEFORE, where its lines start, and its facts read in one piece."""
    text = BEFORE + ("\n".join(wrap(FACT_LOGS[name], width, style)[0]) + "\n").encode()
    starts = [at + 1 for at in range(len(BEFORE), len(text) - 1) if text[at] == 10]
    return text, starts, record_facts_of(MATCHER.scan(name, [Chunk(text, 1)]))


@pytest.mark.parametrize("name", sorted(FACT_LOGS))
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_a_wrapped_record_across_the_seam_of_two_pieces_keeps_its_facts(name, data):
    """A large input comes in pieces; a seam between two falls anywhere in a record wrapped over
    many lines (its first line, the anchor's, the last, below or above them): the facts are
    those read in one piece, from the same lines."""
    width, style = data.draw(st.sampled_from(WIDTHS)), data.draw(st.integers(0, STYLES - 1))
    text, starts, whole = wrapped_log(name, width, style)
    seams = sorted(data.draw(st.lists(st.sampled_from(starts), min_size=1, max_size=2, unique=True)))
    sizes = [b - a for a, b in zip([0, *seams], [*seams, len(text)], strict=True)]
    stream = io.BufferedReader(Pieces(text, sizes), buffer_size=max(sizes))
    read = record_facts_of(MATCHER.scan(name, iter_chunks(stream, markers=MATCHER.markers)))
    assert read == whole, [text.count(b"\n", 0, seam) + 1 for seam in seams]


class Pieces(io.RawIOBase):
    """The bytes as a pipe hands them over in reads of these sizes."""

    def __init__(self, data: bytes, sizes: list[int]):
        self.data, self.sizes, self.at, self.reads = data, sizes, 0, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        size = min(len(buffer), self.sizes[min(self.reads, len(self.sizes) - 1)], len(self.data) - self.at)
        self.reads += 1
        buffer[:size] = self.data[self.at : self.at + size]
        self.at += size
        return size
