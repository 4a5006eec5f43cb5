"""The engines that find the anchors: the prefix trie, and the entry pass at rare bytes."""

import io
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triage.match.engines import ReEngine, entry_points, trie_regex
from triage.match.matcher import Matcher

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import generate  # noqa: E402


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
