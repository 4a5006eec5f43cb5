"""From a raw physical row to the message vLLM wrote, and what its prefixes say.

Handles the prefixes of every vLLM era, process and rank tags, container and
journald prefixes, ANSI colour, CR, JSON log lines, and error bodies whose quotes
were escaped by a client or a JSON encoder.

Prefixes come in layers, outermost first, and each layer is only looked for
after the ones outside it:

1. what collected the log: ``docker compose logs`` (``vllm-1  | ``), ``kubectl
   logs --prefix`` (``[pod/vllm-0/vllm] ``), ISO timestamps (``--timestamps``,
   ``docker logs -t``), journald/syslog, a markdown quote (``> ``) from an issue;
   these stack in any order;
2. the process that wrote the line: vLLM's ``(EngineCore_DP0 pid=7) ``, Ray's
   ``(RayWorkerWrapper pid=5311, ip=10.0.3.17) ``, torch's ``[rank1]: ``;
3. the logger: vLLM's ``INFO 08-12 10:15:03 [core.py:58] `` (or the older form
   without brackets) or uvicorn's ``INFO:     ``. The message starts after it.

Keeping the order matters: a message such as ``Running | 5 reqs`` must not lose
its first word to the docker-compose pattern.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from triage.input.textmap import Mapped, replace_all, substitute

# (bytes that are not UTF-8 inside a colour code, decoded to U+FFFD, go with it: they are no text)
ANSI = re.compile(r"\x1b\ufffd*\[[0-9;?\ufffd]*[A-Za-z]?|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b")
# Control characters a process wrote into a line (binary junk): no text, dropped like NUL, so the
# words around them are whole again ("took\x01 13.87 GiB"). Tabs, CR and ESC are handled apart.
# NUL, C0 and C1 (two bytes in UTF-8), less tab, LF, CR and ESC, in the line's bytes.
CONTROL_BYTES = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]|\xc2[\x80-\x9f]")
CONTROL_STARTS = bytes([*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x1B), *range(0x1C, 0x20), 0x7F, 0xC2])  # its first bytes
PREFIX_SPAN = 200  # a line's prefixes (collector, process tag, logger) lie within this many characters

COLLECTOR_PREFIXES = [
    # journald / syslog: "Aug 12 10:15:03 gpu-node-1 vllm[1234]: ", or journalctl -o short-iso
    re.compile(
        r"(?P<time>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?"
        r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)"
        r" [\w.-]+ [\w.@/-]+\[\d+\]: "
    ),
    # ISO timestamps added by kubectl --timestamps, docker logs -t, log shippers
    re.compile(
        r"(?P<time>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s+"
    ),
    # kubectl logs --prefix: "[pod/vllm-0/vllm] "
    re.compile(r"\[pod/[^\]\s]+\] "),
    # docker compose: "vllm-1  | " (the service name padded to the longest one)
    re.compile(r"[\w.-]+\s+\| ?"),
    # a markdown quote in an issue or a chat: "> "
    re.compile(r">+ ?(?![\s=])"),  # not ">= 1" (a wrapped line of a message)
]
PROCESS_PREFIXES = [
    # "(APIServer pid=1) ", "(VllmWorker rank=1 pid=42) ", "(RayWorkerWrapper pid=5, ip=10.0.0.1) "
    re.compile(r"\((?P<process>[^()\n]{0,80}?\bpid=\d+[^()\n]{0,40})\) ?"),
    # torch.distributed: "[rank1]: "
    re.compile(r"\[(?P<rank>rank\d+)\]: ?"),
]
LOGGER_PREFIXES = [
    # vLLM: "INFO 08-12 10:15:03 [core.py:58] " and the older "INFO 08-12 10:15:03 core.py:58] "
    re.compile(
        r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) (?P<time>\d\d-\d\d \d\d:\d\d:\d\d)"
        r"(?:\.\d+)? (?:\[[^\]\s]+:\d+\]|[^\s\]]+:\d+\]) ?"
    ),
    # uvicorn's own format: "INFO:     10.0.0.12:50312 - ..."
    re.compile(r"(?P<level>INFO|WARNING|ERROR|DEBUG|CRITICAL):\s+"),
]
LAYERS = (COLLECTOR_PREFIXES, PROCESS_PREFIXES, LOGGER_PREFIXES)
# Most lines are vLLM's own: an optional process tag, then the logger's prefix. No collector
# prefix can start with "(" or a level word followed by a date, so this one match gives what
# the layer loop would, at a fraction of the cost; anything else goes through the loop.
VLLM_PREFIX = re.compile(f"(?:{PROCESS_PREFIXES[0].pattern})?{LOGGER_PREFIXES[0].pattern}")

RAY_REPEAT = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
RANK = re.compile(
    r"rank=(?P<rank>\d+)"
    r"|\b(?:Worker|VllmWorker|EngineCore)[_ ](?P<parallel>(?:(?:[A-Z]{2,3})\d+_?)+)(?![\w])"
    r"|\bEngineCore_(?P<engine>\d+)\b"
)
JSON_MESSAGE_KEYS = ("message", "msg", "log", "event")
# Fields that carry an exception or an upstream error body next to the message.
JSON_ERROR_KEYS = (
    "error", "err", "exception", "exc_info", "exc_text", "stack_trace", "stacktrace", "traceback",
    "body", "response", "detail", "reason",
)
JSON_LEVEL_KEYS = ("level", "levelname", "severity")
JSON_TIME_KEYS = ("timestamp", "time", "ts", "@timestamp", "asctime")
# Keys that tell a log record from an error body (which also has a "message").
JSON_LOG_KEYS = {
    "level", "levelname", "severity", "time", "timestamp", "asctime", "@timestamp", "ts",
    "logger", "name", "stream", "log", "event",
}
ESCAPES = (
    ("\\\\", "\\"),
    ('\\"', '"'),
    ("\\'", "'"),
    ("\\u0027", "'"),
    ("\\u0022", '"'),
    ("\\n", " "),
    ("\\r", " "),
    ("\\t", " "),
)


@dataclass(slots=True)
class LineParts:
    """A physical line read on its own: the message and what its prefixes said."""

    text: str
    level: str | None = None
    time: str | None = None
    process: str | None = None
    rank: str | None = None


@dataclass(slots=True)
class RowHead:
    """A physical row cleaned (clean_row) and where its message starts after its prefixes.
    A JSON log record's row holds its message (already decoded by the JSON parser) instead."""

    text: str
    body: int = 0  # where the message starts in text
    level: str | None = None
    time: str | None = None
    process: str | None = None
    rank: str | None = None
    json: bool = False  # text is a JSON log record's message and error fields
    indent: int = 0  # blanks before the message that reading the prefixes took off (a row's indentation)
    header_at: int = 0  # where vLLM's own prefixes (a process tag, the logger's header) start, after a collector's

    @property
    def message(self) -> str:
        return self.text[self.body :]


def holds_byte_of(raw: bytes | bytearray, byte_set: bytes) -> bool:
    """Whether raw holds any of these bytes: deleting them with translate is several times
    quicker than a regex class or str.isprintable over a line (every candidate asks)."""
    return len(raw.translate(None, byte_set)) != len(raw)


def clean_row(raw: bytes | bytearray) -> str:
    """A row's bytes as text: control bytes a process wrote and ANSI colour dropped, carriage
    returns (a redrawn progress bar) read as blanks."""
    text = raw.decode("utf-8", errors="replace")
    if holds_byte_of(raw, CONTROL_STARTS) and CONTROL_BYTES.search(raw):  # (a tab, CR or ESC gets here too)
        # dropped from the bytes, so a character they split is whole again ("\xe6\x00\x88\x91"),
        # before ANSI sequences are read: they may sit inside one
        text = CONTROL_BYTES.sub(b"", raw).decode("utf-8", errors="replace")
    if "\x1b" in text:
        text = ANSI.sub("", text)
    text = text.rstrip("\r\n")
    if "\r" in text:  # progress bars redraw with CR; keep every redraw readable
        text = text.replace("\r", " ")
    return text


decode = clean_row  # (the name the binary-junk tests know it by)


def read_head(raw: bytes | bytearray) -> RowHead:
    """A row's prefixes: collector, process tag, logger; and where its message starts."""
    text = clean_row(raw)
    head = RowHead(text)
    _strip_prefixes(head)
    if head.level is None and "\ufffd" in text[:PREFIX_SPAN]:
        # bytes that are not UTF-8 inside a logger's prefix ("IN\xe4FO"): still a record of its
        # own, not the rest of the message above it
        mended = RowHead(text[:PREFIX_SPAN].replace("\ufffd", "") + text[PREFIX_SPAN:])
        _strip_prefixes(mended)
        if mended.level is not None:  # its message as it was, from where the prefixes end
            prefixes = len(mended.text) - len(mended.message)
            mended.text, mended.body = text, _past_characters(text, prefixes)
            head = mended
    if text.startswith("{", head.body):
        _unwrap_json_log(head)
    return head


def decode_message(text: str) -> Mapped:
    """A message as its writer meant it: the escaping a JSON encoder, a Python repr or a web
    page put on it undone, a viewer's curly apostrophe straightened, Ray's de-duplication note
    dropped. Run on a record's rows once they are joined, so that an escape or an entity a
    wrap cut in two ("&#" / "39;") is read whole."""
    mapped = Mapped(text)
    if "\\" in text:
        mapped = unescape_mapped(mapped)
    if "&" in mapped.text and ";" in mapped.text:
        mapped = mapped.then(substitute(mapped.text, HTML_ENTITY, _html_character))
    if "’" in mapped.text:
        mapped = Mapped(mapped.text.replace("’", "'"), mapped.origin)
    if "repeated" in mapped.text:
        repeat = RAY_REPEAT.search(mapped.text)
        if repeat is not None:
            mapped = Mapped(mapped.text[: repeat.start()], None if mapped.origin is None else mapped.origin[: repeat.start()])
    return mapped


def parse_line(raw: bytes | bytearray) -> LineParts:
    """One physical line read on its own (a record of one row): its message and prefixes."""
    head = read_head(raw)
    return LineParts(decode_message(head.message).text, head.level, head.time, head.process, head.rank)


def _past_characters(text: str, count: int) -> int:
    """Where the first `count` characters of text that are not U+FFFD end."""
    kept = 0
    for index, char in enumerate(text):
        if kept == count:
            return index
        kept += char != "\ufffd"
    return len(text)


def _strip_prefixes(head: RowHead) -> None:
    text = head.text
    at = len(text) - len(text[head.body :].lstrip(" \t"))
    head.indent = at - head.body
    match = VLLM_PREFIX.match(text, at)
    if match:
        _note(head, match.groupdict())
        head.body, head.indent, head.header_at = match.end(), 0, at
        return
    layer = 0
    while layer < len(LAYERS) and at < len(text):
        match = _first_match(LAYERS[layer], text, at)
        if match is None:
            layer += 1
            continue
        _note(head, match.groupdict())
        if layer == 0:
            head.header_at = len(text) - len(text[match.end() :].lstrip(" \t"))
        at = match.end()
        head.indent = 0
        if layer == 0:
            at = len(text) - len(text[at:].lstrip(" \t"))
            head.indent = at - match.end()
        if layer == len(LAYERS) - 1:
            break  # the logger's prefix is the last one: the message starts here
    head.body = at


def _first_match(prefixes: list[re.Pattern], text: str, at: int) -> re.Match | None:
    for prefix in prefixes:
        match = prefix.match(text, at)
        if match and match.end() > at:
            return match
    return None


def _note(head: RowHead, found: dict[str, str | None]) -> None:
    head.level = found.get("level") or head.level
    head.time = found.get("time") or head.time
    process, rank = found.get("process"), found.get("rank")
    if process:
        head.process = process
        head.rank = rank_of(process) or head.rank
    if rank:
        head.rank = rank.replace("rank", "rank=")


def rank_of(process: str) -> str | None:
    """The rank a process tag names: rank=1, TP1, PP1_TP3, DP0 (EngineCore_0 is DP rank 0)."""
    match = RANK.search(process)
    if not match:
        return None
    if match.group("rank") is not None:
        return f"rank={match.group('rank')}"
    if match.group("parallel") is not None:
        return match.group("parallel").rstrip("_")
    return f"DP{match.group('engine')}"


def _unwrap_json_log(head: RowHead) -> None:
    """JSON log lines ({"level": ..., "message": ...}) carry the message in a field.

    Structured loggers put the exception or the upstream body in a field of its own
    ("exc_info", "error", "body"...): those are kept after the message. Other fields
    (a logged "prompt", "messages") are user text and are left out.
    """
    try:
        record = json.loads(head.message)
    except ValueError:
        return
    if not isinstance(record, dict) or not JSON_LOG_KEYS & record.keys():
        return  # an error body, not a log record: keep it whole (its "code" and "param" tell who sent it)
    key = next((k for k in JSON_MESSAGE_KEYS if isinstance(record.get(k), str)), None)
    if key is None:
        return
    inner = RowHead(_one_line(record[key]), level=head.level, time=head.time, process=head.process, rank=head.rank)
    level = _first_value(record, JSON_LEVEL_KEYS)
    inner.level = str(level).upper() if level else inner.level
    stamp = _first_value(record, JSON_TIME_KEYS)
    inner.time = str(stamp) if stamp else inner.time
    _strip_prefixes(inner)
    errors = [_one_line(record[k]) for k in JSON_ERROR_KEYS if k in record and k != key and record[k]]
    message = " ".join([inner.message, *errors])
    head.text, head.body, head.json = message, 0, True
    head.level, head.time, head.process, head.rank = inner.level, inner.time, inner.process, inner.rank


def _one_line(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text.rstrip("\r\n").replace("\r\n", " ").replace("\n", " ")


def _first_value(record: dict, keys: tuple[str, ...]) -> object:
    return next((record[key] for key in keys if record.get(key)), None)


def unescape_mapped(mapped: Mapped) -> Mapped:
    """Undo the escaping that JSON encoders and Python reprs put on a quoted error body."""
    for _ in range(3):  # bodies quoted inside bodies are escaped more than once
        before = mapped.text
        for escaped, plain in ESCAPES:
            if escaped in mapped.text:
                mapped = mapped.then(replace_all(mapped.text, escaped, plain))
        if mapped.text == before:
            break
    return mapped


def unescape(text: str) -> str:
    return unescape_mapped(Mapped(text)).text


# What html.unescape reads as a character reference (its own pattern): named, decimal, hex.
HTML_ENTITY = re.compile(r"&(?:#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)")


def _html_character(entity: re.Match) -> str:
    """A message copied from a web page's source or an HTML report: &#39; &quot; &amp; &nbsp;."""
    import html  # only for such lines: its entity table is not worth loading at every start

    return html.unescape(entity.group()).replace("\xa0", " ")
