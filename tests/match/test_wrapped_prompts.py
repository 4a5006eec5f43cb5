"""A request-log line that a terminal hard-wrapped: the prompt on its pieces is never a finding.

vLLM's request log quotes whole prompts, and a prompt may quote any of vLLM's messages. Once a
terminal (or a page) wraps that line at its width, only the first piece holds the marker
("Received request "), and the wrap may cut the marker itself. Every finding example, quoted
in a prompt, wrapped at every width from 40 to 160 columns (LF or CRLF, bare or indented
pieces), stays silent; a real record below the wrapped line, or a client's error below a whole
request line, is still read.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest

from triage.rules.ruleset import load_rules
from conftest import scan_events

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RULES = load_rules()
WIDTHS = range(40, 161)
WIDTH_STEP = 4  # each example meets every fourth width, the examples beside it the others
HEADS = [
    "INFO 08-12 10:15:03 [logger.py:41] Received request chatcmpl-{n}: prompt: ",
    "(APIServer pid=1) INFO 10-06 09:14:03 [logger.py:41] Received request cmpl-8c1d{n}: prompt: ",
]
TAIL = ", params: SamplingParams(n=1, temperature=0.7, max_tokens=512), prompt_token_ids: None, lora_request: None."
STYLES = ["bare", "crlf", "indented"]
# the prompt around the quoted message: the user's words, in English or in Chinese
ASKS = [("'<|user|>\\nOur job printed this, what does it mean?\\n\\n", "\\n<|assistant|>\\n'"),
        ("'用户：服务启动时报错，这是什么意思？", "请帮我看看。'")]


def _cases() -> list[tuple[str, int, str]]:
    return [(rule.code, index, example.text.strip()) for rule in RULES.rules if rule.kind == "finding"
            for index, example in enumerate(rule.examples) if "\n" not in example.text.strip()]


CASES = _cases()
IDS = [f"{code}-{index}" for code, index, _ in CASES]


def wrap(line: str, width: int, style: str) -> str:
    """Hard-wrapped at `width` columns, as a terminal does: mid-word, mid-number, mid-marker; a
    wide (CJK) character that does not fit the row's last column starts the next row."""
    pieces, row, used = [], "", 0
    for char in line:
        size = 2 if unicodedata.east_asian_width(char) in "WF" else 1
        if used + size > width:
            pieces, row, used = [*pieces, row], "", 0
        row, used = row + char, used + size
    pieces.append(row)
    if style == "indented":
        pieces[1:] = ["    " + piece for piece in pieces[1:]]
    return ("\r\n" if style == "crlf" else "\n").join(pieces)


def request_line(case: int, text: str) -> str:
    before, after = ASKS[case % len(ASKS)]
    return HEADS[case % len(HEADS)].format(n=case) + before + text.replace("'", "\\'") + after + TAIL


def findings(matcher, text: str) -> list:
    return [e for e in scan_events(matcher, "terminal.txt", text) if e.rule.kind == "finding"]


@pytest.mark.parametrize(("case", "code", "text"), [(i, c, t) for i, (c, _, t) in enumerate(CASES)], ids=IDS)
def test_a_wrapped_prompt_quoting_a_message_is_no_finding(matcher, case, code, text):
    line = request_line(case, text)
    for width in WIDTHS[case % WIDTH_STEP :: WIDTH_STEP]:
        style = STYLES[width % len(STYLES)]
        wrapped = wrap(line, width, style)
        assert findings(matcher, wrapped + "\n") == [], f"{code} at {width} columns ({style}):\n{wrapped}"


@pytest.mark.parametrize(("case", "code", "text"), [(i, c, t) for i, (c, _, t) in enumerate(CASES)], ids=IDS)
def test_a_record_below_a_wrapped_prompt_is_read(matcher, case, code, text):
    """The wrapped prompt ends where a line with a logger's prefix starts: that record is vLLM's."""
    line = request_line(case, text)
    width = WIDTHS[(7 * case) % len(WIDTHS)]
    record = text if text.startswith(("INFO", "WARNING", "ERROR", "(")) else "ERROR 08-12 10:15:04 [serving.py:77] " + text
    pasted = wrap(line, width, STYLES[case % len(STYLES)]) + "\n" + record + "\n"
    below = pasted.count("\n")
    assert [e.record.line for e in findings(matcher, pasted) if e.rule.code == code] == [below], pasted


@pytest.mark.parametrize("width", [40, 64, 80, 100, 120, 160])
def test_a_clients_error_below_a_whole_request_line_is_read(matcher, width):
    """A whole request line that fits the width, then the client's error, unprefixed: the error
    is no piece of the prompt (an exception's line, not a wrap's last piece)."""
    pasted = ("INFO 08-12 10:15:03 [logger.py:41] Received request cmpl-1: prompt: 'hi', params: None\n"
              "openai.BadRequestError: Error code: 400 - {'object': 'error', 'message': \"This model's maximum "
              "context length is 4096 tokens. However, you requested 4600 tokens (4100 in the messages, 500 in "
              "the completion). Please reduce the length of the messages or completion.\"}\n")
    wrapped = "\n".join(wrap(line, width, "bare") if line.startswith("INFO") else line for line in pasted.splitlines())
    (finding,) = findings(matcher, wrapped + "\n")
    assert finding.rule.code == "VT101" and finding.fields["prompt_tokens"] == 4100
    assert finding.record.line == wrapped.count("\n") + 1


def test_the_terminal_copied_fixture_has_no_finding_but_the_clients_error(matcher):
    """fixtures/robust/wrapped-request-log.log: its markers check the lines they precede; here
    every other row (each row of the wrapped prompts) is checked too."""
    text = (FIXTURES / "robust" / "wrapped-request-log.log").read_text()
    lines = text.splitlines()
    expected = [number + 1 for number, line in enumerate(lines, 1) if line.startswith("#! expect")]
    blanked = "\n".join("" if line.startswith("#!") else line for line in lines) + "\n"
    assert [(e.rule.code, e.record.line) for e in findings(matcher, blanked)] == [("VT101", line) for line in expected]
