"""What a report quotes of vLLM's message: whole sentences, or cut at a word with '...'."""

from hypothesis import given, settings
from hypothesis import strategies as st

from triage.match.fields import MAX_EXCERPT, excerpt

WORDS = st.lists(st.sampled_from(["KV", "cache", "(5.0", "GiB", "memory).", "tokens", "is", "43488.", "`gpu_memory_utilization`"]),
                 min_size=1, max_size=400)


@settings(max_examples=200, deadline=None)
@given(WORDS, st.data())
def test_an_excerpt_is_whole_words_and_says_when_it_was_cut(words, data):
    text = " ".join(words)
    start = 0
    end = data.draw(st.integers(min_value=1, max_value=len(text)))
    quoted = excerpt(text, start, end)
    assert len(quoted) <= MAX_EXCERPT
    if quoted.endswith("..."):
        body = quoted[:-3]
        assert text.startswith(body) and (len(body) == len(text) or text[len(body)] == " " or len(body) >= end)
    else:
        assert text.startswith(quoted)
        rest = text[len(quoted):]
        assert not rest.strip() or quoted.endswith((".", "!", "?"))  # whole sentences, or all of it
    assert quoted.startswith(text[start:min(end, MAX_EXCERPT - 3)].rsplit(" ", 1)[0])  # what matched is kept


def test_a_match_that_stops_inside_a_parenthesis_is_quoted_to_its_sentence_end():
    text = "Auto-fit max_model_len: reduced from 131072 to 40960 to fit in available GPU memory (5.0 GiB available for KV cache)"
    assert excerpt(text, 0, text.index("(5.0 GiB") + 8) == text
    vllm = "the estimated maximum model length is 43488. Try increasing `gpu_memory_utilization` or decreasing it."
    assert excerpt(vllm, 0, vllm.index(" or ")) == vllm


def test_a_long_message_is_cut_at_a_word():
    text = "word " * 400
    quoted = excerpt(text, 0, len(text))
    assert quoted.endswith("word...") and len(quoted) <= MAX_EXCERPT
