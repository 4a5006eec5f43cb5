"""Text around a message may add findings, never remove one or change its numbers.

Every finding rule's example, as people put it in an issue or a chat: inside a sentence of the
writer's (English, Chinese, Japanese, Korean, Portuguese), quoted with any quotes or none, the
writer's words after the closing quote and reusing the message's own words and numbers; with
another rule's example, or a piece of one, on the next line; raised again through a client
library's exception chain. The rule is found with every number the bare example gives, and a
refused request is counted once.
"""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triage import pipeline
from triage.rules.ruleset import load_rules

RULES = load_rules()
MATCHER = pipeline.make_matcher(pipeline.ScanOptions(RULES))

# (before, after) the message, with {n} a number of the writer's
SENTENCES = [
    ("I keep getting ", " every time it starts. A smaller --max-model-len fixes it, but why?"),
    ("After the upgrade the server says ", " and then it stops; the KV cache should be big enough for {n} tokens."),
    ("We see this with 2 GPUs and max_num_seqs {n}: ", " Any idea what the numbers mean?"),
    ("启动的时候一直报错：", " 每次都这样。把 --max-model-len 调小到 {n} 就好了，为什么？"),
    ("服务日志里是 ", "，KV cache 明明够用，请问怎么回事？"),
    ("起動するたびに ", " と表示されます。--max-model-len を {n} にすると直ります。"),
    ("서버를 시작하면 항상 ", " 라고 나옵니다. KV cache 가 {n} 토큰이면 충분하지 않나요?"),
    ("O servidor mostra ", " toda vez que inicia. Com --max-model-len {n} funciona, por quê?"),
    ("", " -- why does this happen with max_model_len {n}?"),
    ("Error from the gateway: ", ""),
]
QUOTES = [("", ""), ('"', '"'), ("'", "'"), ("`", "`"), ("\u201c", "\u201d"), ("\u300c", "\u300d"), ("\u00ab", "\u00bb"),
          ("\u300e", "\u300f"), ("```\n", "\n```")]
CHAIN = (
    "Traceback (most recent call last):\n"
    '  File "/app/agent.py", line 41, in call_model\n'
    "    response = client.chat.completions.create(model=MODEL, messages=messages)\n"
    "{first}: Error code: 400 - {{'object': 'error', 'message': \"{message}\", 'type': 'BadRequestError', 'code': 400}}\n"
    "\n"
    "{link}\n"
    "\n"
    "Traceback (most recent call last):\n"
    '  File "/app/agent.py", line 77, in run\n'
    "    answer = call_model(history)\n"
    "{second}: {message}\n"
)
LINKS = ["The above exception was the direct cause of the following exception:",
         "During handling of the above exception, another exception occurred:"]
WRAPPERS = [("openai.BadRequestError", "litellm.exceptions.ContextWindowExceededError"),
            ("openai.BadRequestError", "langchain_core.exceptions.OutputParserException")]


def _examples() -> list[tuple[str, int, str, dict]]:
    cases = []
    for rule in RULES.rules:
        if rule.kind != "finding":
            continue
        for index, example in enumerate(rule.examples):
            text = example.text.strip()
            if "\n" not in text:
                cases.append((rule.code, index, text, example.fields))
    return cases


EXAMPLES = _examples()
IDS = [f"{code}-{index}" for code, index, _, _ in EXAMPLES]
OTHERS = [text for _, _, text, _ in EXAMPLES]


def numbers(fields: dict) -> dict:
    return {k: v for k, v in fields.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def readings(text: str) -> list[tuple[str, dict]]:
    """The findings' readings of the text (rule, numbers), as the matcher hands them on."""
    found = []
    result = pipeline.scan([pipeline.Text("paste", text.encode())],
                           pipeline.ScanOptions(RULES, matcher=MATCHER,
                                                on_event=lambda e, _: found.append((e.rule.code, numbers(e.fields)))))
    del result
    return found


def findings(text: str) -> list:
    return list(pipeline.scan([pipeline.Text("paste", text.encode())], pipeline.ScanOptions(RULES, matcher=MATCHER)).findings)


def holds(found: list[tuple[str, dict]], code: str, want: dict) -> bool:
    return any(got_code == code and all(got.get(k) == pytest.approx(v) for k, v in want.items()) for got_code, got in found)


def bare(code: str, text: str) -> dict:
    """The numbers the bare example gives its rule (what any surroundings must keep)."""
    found = [got for got_code, got in readings(text) if got_code == code]
    assert found, f"{code} not read from its own example {text!r}"
    return max(found, key=len)


@pytest.mark.slow
@pytest.mark.parametrize(("code", "index", "text", "fields"), EXAMPLES, ids=IDS)
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_a_sentence_and_quotes_around_a_message_keep_it_and_its_numbers(code, index, text, fields, data):
    want = bare(code, text)
    before, after = data.draw(st.sampled_from(SENTENCES))
    opening, closing = data.draw(st.sampled_from(QUOTES))
    number = data.draw(st.integers(1, 99999))
    pasted = f"{before.format(n=number)}{opening}{text}{closing}{after.format(n=number)}"
    assert holds(readings(pasted), code, want), f"{code} lost or changed in:\n{pasted}"


@pytest.mark.slow
@pytest.mark.parametrize(("code", "index", "text", "fields"), EXAMPLES, ids=IDS)
@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_another_message_or_a_piece_of_one_on_the_next_line_keeps_it(code, index, text, fields, data):
    want = bare(code, text)
    other = data.draw(st.sampled_from(OTHERS))
    cut = data.draw(st.integers(len(other) // 3, len(other)))
    below = other[:cut]
    for pasted in (f"{text}\n{below}\n", f"{below}\n{text}\n"):
        assert holds(readings(pasted), code, want), f"{code} lost or changed in:\n{pasted}"


REQUESTS = [(code, index, text, fields) for code, index, text, fields in EXAMPLES
            if RULES.by_code(code).stage == "request" and '"' not in text and "\\" not in text]


@pytest.mark.parametrize(("code", "index", "text", "fields"), REQUESTS, ids=[f"{c}-{i}" for c, i, _, _ in REQUESTS])
@pytest.mark.parametrize("link", LINKS)
def test_a_refusal_raised_again_through_a_clients_exception_chain_is_one_request(code, index, text, fields, link):
    want = bare(code, text)
    first, second = WRAPPERS[index % len(WRAPPERS)]
    chain = CHAIN.format(first=first, second=second, message=text.replace('"', "'"), link=link)
    assert holds(readings(chain), code, want), chain
    counted = [f for f in findings(chain) if f.code == code]
    assert [f.count for f in counted] == [1], (chain, [(f.line, f.count, f.also_at) for f in counted])


@pytest.mark.parametrize("link", LINKS)
def test_two_tracebacks_of_their_own_are_two_requests(link):
    """The other side: the same refusal in two tracebacks not linked by a chain is two requests."""
    message = ("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the "
               "messages, 1000 in the completion). Please reduce the length of the messages or completion.")
    one = CHAIN.format(first="openai.BadRequestError", second="openai.BadRequestError", message=message, link=link)
    two = one.replace(link, "INFO 01-02 03:04:05 [agent.py:9] retrying the request")
    assert [f.count for f in findings(two) if f.code == "VT101"] == [2]


def _cut_after_last_value() -> list[tuple[str, int, str, dict]]:
    """Every finding example cut right after the last number it prints past its head, with the
    numbers it still holds: what a writer quotes of a message they shorten."""
    cases = []
    for code, index, text, fields in EXAMPLES:
        for pattern in RULES.by_code(code).patterns:
            match = pattern.compiled.search(text)
            if match is None:
                continue
            ends = {name: match.end(name) for name in numbers(fields) if name in pattern.fields and match.group(name) is not None}
            if len(ends) >= 2:
                last = max(ends.values())
                cut = text[:last] + (")" if text[last : last + 1] == ")" else "")
                cases.append((code, index, cut, {k: fields[k] for k, end in ends.items() if end <= last}))
            break
    return cases


CUT = _cut_after_last_value()


@pytest.mark.slow
@pytest.mark.parametrize(("code", "index", "cut", "kept"), CUT, ids=[f"{c}-{i}" for c, i, _, _ in CUT])
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_a_message_cut_and_quoted_in_a_sentence_that_goes_on_is_read(code, index, cut, kept, data):
    """I keep getting "The model's max seq len (N) is larger than ... (M)" every time it starts.
    The quote closes what the writer took of vLLM's message; their words after it are theirs.
    (A cut may leave open which wording of a message it was, "However, you requested 5230" a
    total or a prompt's count: its numbers are read, under either rule's names.)"""
    before, after = data.draw(st.sampled_from(SENTENCES[:8]))
    opening, closing = data.draw(st.sampled_from(QUOTES[1:8]))
    number = data.draw(st.integers(1, 99999))
    pasted = f"{before.format(n=number)}{opening}{cut}{closing}{after.format(n=number)}"
    values = sorted(kept.values())
    assert any(all(any(v == pytest.approx(got) for got in read.values()) for v in values)
               for _, read in readings(pasted)), f"{code} lost or changed in:\n{pasted}"


def html_escaped(text: str) -> str:
    import html

    return html.escape(text).replace("&#x27;", "&#39;")


ESCAPED = [(code, index, text, fields) for code, index, text, fields in EXAMPLES if html_escaped(text) != text]


@pytest.mark.slow
@pytest.mark.parametrize(("code", "index", "text", "fields"), ESCAPED, ids=[f"{c}-{i}" for c, i, _, _ in ESCAPED])
def test_an_html_escaped_message_wrapped_through_an_entity_keeps_it(code, index, text, fields):
    """A web page's source, hard-wrapped by a terminal at every width that cuts an entity in two
    ("&#" / "39;"): the rows are joined before the entity is read."""
    want = bare(code, text)
    escaped = html_escaped(text)
    entities = [m.start() for m in re.finditer("&", escaped)]
    for width, at, inside in itertools.product((40, 57, 83), entities[:3], (1, 2, 3)):
        lead = "The page showed: "  # (the writer's words before it, as long as it takes to put the cut there)
        lead += "." * ((width - (len(lead) + at + inside) % width) % width)
        line = lead + escaped
        pasted = "\n".join(line[i : i + width] for i in range(0, len(line), width))
        assert holds(readings(pasted), code, want), f"{code} lost at {width} columns:\n{pasted}"
