"""From a raw physical line to the message vLLM wrote, and what the prefixes say.

Handles the prefixes of every vLLM era, process and rank tags, container and
journald prefixes, ANSI colour, CR, JSON log lines, and error bodies whose quotes
were escaped by a client or a JSON encoder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import regex

ANSI = regex.compile(r"\x1b\[[0-9;?]*[A-Za-z]?|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b")

# Each prefix is tried at the start of the line, repeatedly, in any order: real
# logs stack them (kubectl timestamp, then a process tag, then vLLM's prefix).
PREFIXES = [
    # vLLM: "INFO 08-12 10:15:03 [core.py:58] " and the older "INFO 08-12 10:15:03 core.py:58] "
    regex.compile(
        r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) (?P<time>\d\d-\d\d \d\d:\d\d:\d\d)"
        r"(?:\.\d+)? (?:\[[^\]\s]+:\d+\]|[^\s\]]+:\d+\]) ?"
    ),
    # process tag: "(APIServer pid=1) ", "(VllmWorker rank=1 pid=42) ", "(RayWorkerWrapper pid=5, ip=10.0.0.1) "
    regex.compile(r"\((?P<process>[^()\n]{0,80}?\bpid=\d+[^()\n]{0,40})\) ?"),
    # ISO timestamps added by kubectl --timestamps, docker logs -t, log shippers
    regex.compile(
        r"(?P<time>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s+"
    ),
    # journald / syslog: "Aug 12 10:15:03 gpu-node-1 vllm[1234]: "
    regex.compile(
        r"(?P<time>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d) [\w.-]+ [\w.@/-]+(?:\[\d+\])?: "
    ),
    # kubectl logs --prefix: "[pod/vllm-0/vllm] "
    regex.compile(r"\[pod/[^\]\s]+\] "),
    # docker compose: "vllm-1  | "
    regex.compile(r"[\w.-]+\s+\| ?"),
    # torch.distributed: "[rank1]: "
    regex.compile(r"\[(?P<rank>rank\d+)\]: ?"),
    # uvicorn's own format
    regex.compile(r"(?P<level>INFO|WARNING|ERROR|DEBUG):\s+"),
]

RAY_REPEAT = regex.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
RANK = regex.compile(r"rank=(\d+)|\b(?:Worker|EngineCore|VllmWorker)_?((?:[A-Z]{2,3}\d+_?)+)\b|\bTP(\d+)\b")
JSON_MESSAGE_KEYS = ("message", "msg", "log")
ESCAPES = (
    ("\\\\", "\\"),
    ('\\"', '"'),
    ("\\'", "'"),
    ("\\u0027", "'"),
    ("\\u0022", '"'),
    ("\\n", " "),
    ("\\t", " "),
)


@dataclass(slots=True)
class LineParts:
    text: str
    level: str | None = None
    time: str | None = None
    process: str | None = None
    rank: str | None = None


def decode(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace")
    if "\x00" in text:
        text = text.replace("\x00", "")
    if "\x1b" in text:
        text = ANSI.sub("", text)
    text = text.rstrip("\r\n")
    if "\r" in text:  # progress bars redraw with CR; keep every redraw readable
        text = text.replace("\r", " ")
    return text


def parse_line(raw: bytes) -> LineParts:
    """Split one physical line into its prefixes and the message."""
    parts = LineParts(decode(raw))
    _strip_prefixes(parts)
    if parts.text.startswith("{"):
        _unwrap_json_log(parts)
    if "\\" in parts.text:
        parts.text = unescape(parts.text)
    if "’" in parts.text:
        parts.text = parts.text.replace("’", "'")
    if "repeated" in parts.text:
        parts.text = RAY_REPEAT.sub("", parts.text)
    return parts


def _strip_prefixes(parts: LineParts) -> None:
    text = parts.text.lstrip(" ")
    progressed = True
    while progressed and text:
        progressed = False
        for prefix in PREFIXES:
            match = prefix.match(text)
            if not match or match.end() == 0:
                continue
            found = match.groupdict()
            parts.level = found.get("level") or parts.level
            parts.time = found.get("time") or parts.time
            if found.get("process"):
                parts.process = found["process"]
                parts.rank = rank_of(found["process"]) or parts.rank
            if found.get("rank"):
                parts.rank = found["rank"].replace("rank", "rank=")
            text = text[match.end() :]
            progressed = True
            break
    parts.text = text


def rank_of(process: str) -> str | None:
    match = RANK.search(process)
    if not match:
        return None
    if match.group(1) is not None:
        return f"rank={match.group(1)}"
    if match.group(2) is not None:
        return match.group(2).rstrip("_")
    return f"TP{match.group(3)}"


def _unwrap_json_log(parts: LineParts) -> None:
    """JSON log lines ({"level": ..., "message": ...}) carry the message in a field."""
    try:
        record = json.loads(parts.text)
    except ValueError:
        return
    if not isinstance(record, dict):
        return
    for key in JSON_MESSAGE_KEYS:
        if isinstance(record.get(key), str):
            parts.text = record[key]
            level = record.get("level") or record.get("levelname")
            parts.level = str(level).upper() if level else parts.level
            stamp = record.get("timestamp") or record.get("asctime") or record.get("time")
            parts.time = str(stamp) if stamp else parts.time
            _strip_prefixes(parts)
            return


def unescape(text: str) -> str:
    """Undo the escaping that JSON encoders and Python reprs put on a quoted error body."""
    for _ in range(3):  # bodies quoted inside bodies are escaped more than once
        before = text
        for escaped, plain in ESCAPES:
            text = text.replace(escaped, plain)
        if text == before:
            break
    return text


def join_variants(first: str, second: str) -> tuple[str, ...]:
    """Ways a message wrapped over two lines may have been cut: mid-word, or at a space."""
    joined = first + second
    spaced = first.rstrip() + " " + second.lstrip()
    return (joined,) if joined == spaced else (joined, spaced)
