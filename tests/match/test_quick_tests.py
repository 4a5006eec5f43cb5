"""The quick tests every candidate line takes answer as the slower ones they stand for: a
byte-set test as the regex class of those bytes, the cut-mark hint as the search for what
every cut mark holds, and cut_end's answer for a line that ends closed right after a letter
or digit as its full reading of the line's end."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triage.input.lineparse import CONTROL_BYTES, CONTROL_STARTS, holds_byte_of
from triage.match import cut
from triage.match.matcher import REWRITTEN

# what every cut mark holds (CUT_MARK's marks: "..", "…", "[truncated]", "(cut)")
MARK_WORDS = re.compile("\\.\\.|\u2026|trunc|cut", re.IGNORECASE)
# the bytes decoding rewrites (lineparse): escapes, ESC, CR, a JSON record's brace, an HTML
# entity's ampersand, the C0 controls but tab and LF, DEL, and the C1 controls' UTF-8 lead byte
REWRITTEN_CLASS = re.compile(rb"[\\\x1b\r\x00-\x08\x0b\x0c\x0e-\x1f\x7f{&\xc2]")

# the characters near a line's end that decide a reading: marks, brackets, closed and open
# ends, quotes, CJK, letters and digits of either case
ENDINGS = st.text(alphabet=st.sampled_from(list("ab9Z_ .…%)]}>/#*+=&|~^$@[(<,:;-tTcCuUrRnN中’\"?!")), max_size=12)
WORDED = st.lists(st.sampled_from(["truncated", "TRUNC", "cut", "Cut", "...", "…", "[", "]", " ", "7", "%", "x"]),
                  max_size=6).map("".join)


@pytest.mark.parametrize("byte", range(256))
def test_a_byte_set_holds_what_its_class_matches(byte):
    raw = b"INFO 12-20 14:09:40 x" + bytes([byte]) + b"y"
    assert holds_byte_of(raw, REWRITTEN) == (REWRITTEN_CLASS.search(raw) is not None)
    # every byte a control sequence starts with, so decode's quick test lets each one through
    followed = bytes([byte, 0x85])
    if CONTROL_BYTES.match(followed):
        assert holds_byte_of(followed, CONTROL_STARTS)


@settings(max_examples=400, deadline=None)
@given(st.one_of(ENDINGS, WORDED), st.integers(-4, 14), st.one_of(st.none(), st.integers(0, 14)))
def test_the_cut_mark_hint_is_the_search_for_what_a_mark_holds(text, start, end):
    assert cut.mark_hint(text, start, end) == (MARK_WORDS.search(text, max(start, 0), len(text) if end is None else end)
                                               is not None)


def reading_without_the_short_cut(text: str) -> int:
    """cut_end as it read a line before the short cut: the hint decides a closed ending."""
    if text[-1:] in cut.CLOSED_END and not cut.mark_hint(text, len(text) - cut.MARK_SPAN):
        return 0
    closed, cut.CLOSED_END = cut.CLOSED_END, frozenset()  # the rest of the reading, no closed ending
    try:
        return cut.cut_end(text)
    finally:
        cut.CLOSED_END = closed


@settings(max_examples=400, deadline=None)
@given(st.one_of(ENDINGS, WORDED, st.tuples(WORDED, ENDINGS).map("".join)))
def test_a_closed_ending_is_read_as_the_full_reading_reads_it(text):
    assert cut.cut_end(text) == reading_without_the_short_cut(text)


@pytest.mark.parametrize("line", [
    "Running: 3 reqs, GPU KV cache usage: 97.",  # a number cut at its point
    "Running: 3 reqs, GPU KV cache usage: 97.1%… [truncated]",
    "max_num_batched_tokens (2048) is smaller than max_model_len (16384) (cut)",
    "usage: 97.1%",
    "However, you requested 16582 tokens [truncated]",  # a bracketed mark ends in a closed character
    "is larger than the available KV cache memory (5.31 (cut)",
    "the estimated maximum model length is 43488 <...>",
])
def test_the_readings_agree_on_message_endings(line):
    assert cut.cut_end(line) == reading_without_the_short_cut(line)
