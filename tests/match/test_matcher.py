"""The anchor pass: derived anchors, decoys in request logs, engines, and the benchmark's own counts."""

import io
import re
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pathlib import Path
from triage.match.anchors import derive, required_runs
from triage.match.engines import ReEngine, entry_points, trie_regex
from triage.diagnose.diagnoser import diagnose
from triage.match.matcher import Matcher
from triage.input.reader import Chunk, iter_chunks

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import generate  # noqa: E402

ERROR = (
    "This model's maximum context length is 8192 tokens. However, your request has 9001 input "
    "tokens. Please reduce the length of the input messages."
)


def codes(events):
    return [e.rule.code for e in events if e.rule.kind != "fact"]


def test_a_prompt_quoting_an_error_in_a_request_log_line_is_not_an_event(matcher):
    prompt = f"Why does my server say: {ERROR} and then Traceback (most recent call last):\\n ValueError: {ERROR}"
    request = (
        "INFO 05-01 11:29:40 [logger.py:43] Received request chatcmpl-9f1c: prompt: '"
        + prompt.replace("'", "\\'") + "', params: SamplingParams(n=1, max_tokens=512), prompt_token_ids: [1, 2, 3]"
    )
    assert codes(matcher.scan_text("x.log", request)) == []
    real = "ERROR 05-01 11:29:41 [serving_chat.py:222] " + ERROR
    events = matcher.scan_text("x.log", request + "\n" + real + "\n" + request)
    assert [(e.rule.code, e.record.line, e.fields["prompt_tokens"]) for e in events] == [("VT102", 2, 9001)]


def test_required_runs_leave_out_optional_and_alternative_text():
    runs = required_runs(r"max seq len \((?P<n>\d+)\)(?: optional tail)?, (?:GiB|GB) KV cache is needed")
    assert runs == ["max seq len (", ")", ", G", " KV cache is needed"]  # "G" is common to GiB and GB
    assert required_runs(r"(?i)case does not matter") is None


def test_derived_anchors_are_safe_literal_pieces_of_the_pattern():
    source = r"This model's maximum context length is (?P<n>\d+) tokens\. However, your request has"
    anchors = derive(source).anchors
    assert 1 <= len(anchors) <= 3
    for anchor in anchors:
        assert 5 <= len(anchor) <= 32
        assert "'" not in anchor and not anchor.startswith(" ") and not anchor.endswith(" ")
        assert any(anchor in run for run in required_runs(source))
    assert not anchors[0][0].isdigit() and anchors[0][0] not in "INPTK "


def test_a_pattern_with_no_usable_literal_falls_back_to_its_keywords(ruleset):
    matcher = Matcher(ruleset)
    for rule in matcher.rules:
        for pattern in rule.patterns:
            held = [a for a, targets in matcher.targets.items() if any(t.pattern is pattern for t in targets)]
            assert held, f"{rule.code} {pattern.id} has no anchor"
            if not derive(pattern.compiled.pattern).anchors:
                assert {a.decode() for a in held} <= {k for k in rule.keywords} | {
                    piece for k in rule.keywords for piece in derive(re.escape(k)).anchors
                }


def test_the_trie_finds_what_a_plain_alternation_finds():
    words = [b"max seq len (", b"max_model_len", b"max_model_len (", b"KV cache", b"Received request "]
    text = b"x max_model_len (8) and max seq len (9) KV cache; Received request 1\nmax_model_le"
    trie = ReEngine(words)
    plain = re.compile(b"|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)))
    assert [m.group() for m in re.finditer(trie_regex(words), text)] == plain.findall(text)
    found = trie.found_in(text, 0, len(text))
    # the engine reports the longest anchor at a place; the matcher adds the ones inside it
    assert found == {b"max seq len (", b"max_model_len (", b"KV cache", b"Received request "}


ENTRY_WORDS = [b"GPU 0: ", b"GPU 10: ", b"max_model_len", b"model_len (", b"Received request ", b"U KV cache usage:",
               b"V cache usage:", b"qs, GP"]


@settings(max_examples=60, deadline=None)
@given(pieces=st.lists(st.sampled_from([*ENTRY_WORDS, b"\n", b"GET /v1/models ", b"U 0: ", b"ax_model", b"GPU 1", b" "]),
                       max_size=30))
def test_the_entry_pass_stops_on_every_line_that_holds_an_anchor(pieces):
    """Entered at its rarest byte, an anchor is still reported whole, in the first line that holds one."""
    text = b"".join(pieces)
    engine, position, lines = ReEngine(ENTRY_WORDS), 0, []
    while (hit := engine.search(text, position, len(text))) is not None:
        start, end, anchor = hit
        assert text[start:end] == anchor and anchor in ENTRY_WORDS
        lines.append(text.count(b"\n", 0, start))
        position = text.find(b"\n", end) + 1 or len(text)
    holding = [n for n, line in enumerate(text.split(b"\n")) if any(word in line for word in ENTRY_WORDS)]
    assert lines == holding


@pytest.mark.parametrize("tagged", [False, True], ids=["plain", "process-tagged"])
def test_the_entry_pass_stops_at_few_bytes_of_a_busy_access_log(ruleset, tagged):
    """Every built-in anchor is entered at a byte of one small set, chosen as a whole, that
    access lines hold few of, with V1's "(APIServer pid=N) " tag in front or not. Entering
    each anchor at its own rarest byte stopped at 1.6% of the bytes of plain lines and 6.5%
    of tagged ones (at every '(', ')' and '='); entering at first bytes (a space, 'I', a
    digit) would stop several times in every line."""
    anchors = Matcher(ruleset, engine="re").anchors
    entries = entry_points(anchors)
    assert set(entries) == set(anchors) and all(0 <= at < len(anchor) for anchor, at in entries.items())
    writer = generate.LogWriter("access-log", seed=3, out=io.BytesIO(), pool_blocks=1)
    writer.tagged = tagged
    lines = (
        writer.access_line() if n % 40 else writer.aborted_line() if n % 80 else writer.metrics_line() for n in range(4000)
    )
    sample = "".join(lines).encode()
    stops = sum(sample.count(byte) for byte in {anchor[at] for anchor, at in entries.items()})
    # The lifecycle rules' exception and traceback-frame lines (rules/lifecycle.yaml) add 'E'
    # ("Error: ") and 'l' ('File "'): 2.8% of the bytes of plain lines, 2.2% of tagged ones; measured as 0.86 -> 0.87 s of the stdlib
    # engine's scan of 64 MiB of access log, as against 0.73 s without any lifecycle rule.
    assert stops / len(sample) < 0.03


@pytest.mark.parametrize("tagged", [None, True, False], ids=["seeded", "tags-on", "tags-off"])
@pytest.mark.parametrize("shape", generate.SHAPES)
def test_the_benchmark_log_yields_exactly_what_was_injected(ruleset, shape, tagged):
    """The benchmark's exactness check, small: every injected event found, no decoy, no noise."""
    out = io.BytesIO()
    writer = generate.LogWriter(shape, seed=11, out=out, pool_blocks=3, tagged=tagged)
    writer.run(3 * generate.EVENT_EVERY)
    for engine in ("re", "auto"):
        events = Matcher(ruleset, engine=engine).scan("bench.log", iter_chunks(io.BytesIO(out.getvalue()), chunk_size=1 << 16))
        found = Counter()
        for finding in diagnose(list(events)).findings:
            found[finding.code] += finding.count
        assert found == writer.counts and sum(found.values()) >= 2


def test_the_hyperscan_engine_agrees_with_the_stdlib_one(ruleset):
    pytest.importorskip("hyperscan")
    data = b"".join(path.read_bytes() for path in sorted((ROOT / "fixtures").glob("*.log")))
    results = []
    for engine in ("re", "hyperscan"):
        events = Matcher(ruleset, engine=engine).scan("all.log", iter_chunks(io.BytesIO(data), chunk_size=4096))
        results.append([(e.rule.code, e.record.line, e.pattern_id) for e in events])
    assert results[0] == results[1] and results[0]


@pytest.mark.parametrize("make", generate.ALL_EVENTS, ids=lambda make: make.__name__)
def test_a_message_wrapped_anywhere_in_its_middle_is_still_found(matcher, make):
    """A terminal cuts a message at any column: one of its anchors must survive whole.
    (Not inside a number: "3" + "2768" on the next line reads as a whole message with 3.)"""
    import random

    code, message = make(random.Random(3))
    text = "ValueError: " + message
    missed = []
    for cut in range(len(text) // 4, 3 * len(text) // 4):
        if text[cut - 1].isdigit() and text[cut].isdigit():
            continue
        log = f"{text[:cut]}\n{text[cut:]}\n"
        if code not in codes(matcher.scan_text("wrapped.log", log)):
            missed.append(cut)
    assert missed == []


def test_built_in_patterns_compiled_on_first_use_have_the_regex_fields(ruleset):
    import regex

    for rule in ruleset.rules:
        for pattern in rule.patterns:
            assert pattern.fields == list(regex.compile(pattern.compiled.pattern).groupindex), (rule.code, pattern.id)


def test_ctrl_c_while_a_chunk_is_matched_still_hands_on_what_was_matched_before_it(ruleset, monkeypatch):
    """Events go on in bursts; an interrupt in the middle of one must not lose the lines matched so far."""
    line = ("ERROR 03-02 09:14:{n:02d} [serving_chat.py:212] This model's maximum context length is 8192 tokens. "
            "However, you requested 9{n:03d} tokens (8{n:03d} in the messages, 1000 in the completion). "
            "Please reduce the length of the messages or completion.\n")
    text = "INFO 03-02 09:14:00 [api_server.py:1] starting\n" * 3 + "".join(line.format(n=n) for n in range(6))
    text += "INFO 03-02 09:15:00 [api_server.py:1] still serving\n" * 3
    matcher = Matcher(ruleset)
    match_line, calls = matcher._match_line, []

    def interrupted_at_the_fourth(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return match_line(*args, **kwargs)

    monkeypatch.setattr(matcher, "_match_line", interrupted_at_the_fourth)
    found = []
    with pytest.raises(KeyboardInterrupt):
        for event in matcher.scan("server.log", [Chunk(text.encode(), 1)]):
            found.append((event.rule.code, event.record.line, event.fields["requested"]))
    assert found == [("VT101", 4, 9000), ("VT101", 5, 9001), ("VT101", 6, 9002)]


def test_the_in_process_benchmark_splits_a_scan_into_its_parts(tmp_path, capsys):
    """benchmarks/inprocess.py (docs/performance.md's "where the time goes") still runs against the matcher."""
    import inprocess

    log = tmp_path / "access.log"
    writer = generate.LogWriter("access-log", seed=11, out=log.open("wb"), pool_blocks=2)
    writer.run(1 << 20)
    writer.out.close()
    assert inprocess.main([str(log), "--repeat", "1"]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"scan [\d.]+ s \(\d+ MiB/s\): read [\d.]+ s, pass [\d.]+ s, match [\d.]+ s, diagnose [\d.]+ s", printed)
    candidates, events = re.search(r"([\d,]+) candidate lines, ([\d,]+) events", printed).groups()
    assert int(candidates.replace(",", "")) > 50 and int(events.replace(",", "")) >= int(candidates.replace(",", ""))
