"""The anchor pass: decoys in request logs, keyword anchors, engines agreeing, and the benchmark's own counts."""

import io
import re
import sys
from collections import Counter

import pytest

from pathlib import Path
from triage.match.anchors import derive
from triage.diagnose.diagnoser import diagnose
from triage.match.matcher import Matcher
from triage.input.reader import Chunk, iter_chunks

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import generate  # noqa: E402
from conftest import scan_events  # noqa: E402

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
    assert codes(scan_events(matcher, "x.log", request)) == []
    real = "ERROR 05-01 11:29:41 [serving_chat.py:222] " + ERROR
    events = scan_events(matcher, "x.log", request + "\n" + real + "\n" + request)
    assert [(e.rule.code, e.record.line, e.fields["prompt_tokens"]) for e in events] == [("VT102", 2, 9001)]


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
        if code not in codes(scan_events(matcher, "wrapped.log", log)):
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
    read, calls = matcher._read, []

    def interrupted_at_the_fourth(source, record, *args, **kwargs):
        calls.append(record.text)
        if sum("maximum context" in text for text in calls) == 4:
            raise KeyboardInterrupt
        return read(source, record, *args, **kwargs)

    monkeypatch.setattr(matcher, "_read", interrupted_at_the_fourth)
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
    records, events = (int(n.replace(",", "")) for n in re.search(r"([\d,]+) records read, ([\d,]+) events", printed).groups())
    assert records > 50 and events > 50
