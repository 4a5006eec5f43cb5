"""What a match reads: its groups as typed fields, and the excerpt a report quotes."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from triage.rules.ruleset import Rule

MAX_EXCERPT = 600
SENTENCE_STOP = re.compile(r"[.!?](?=\s|$)")
CLOSE_SENTENCE = 160  # a match this close to its sentence's end is shown to it (not a prompt: vLLM's words)


def excerpt(text: str, start: int, end: int) -> str:
    """What a report quotes of a message: the match, taken on to the end of its sentence when
    that is near (a pattern may stop inside a parenthesis: "(5.0 GiB"); cut at a word, with
    "...", when it goes on or is longer than MAX_EXCERPT."""
    stop = SENTENCE_STOP.search(text, end - 1 if end > start else end)
    if stop is not None and stop.end() - end <= CLOSE_SENTENCE:
        end = stop.end()
    elif stop is None and len(text) - end <= CLOSE_SENTENCE:
        end = len(text)  # the message's last words, unpunctuated
    piece = text[start:end]
    if len(piece) > MAX_EXCERPT:
        cut = piece.rfind(" ", 0, MAX_EXCERPT - 3)  # a word this far back, or one huge "word": cut it
        return piece[: cut if cut > MAX_EXCERPT // 2 else MAX_EXCERPT - 3].rstrip() + "..."
    if text[end:].strip() and not SENTENCE_STOP.match(text, end - 1):
        return piece.rstrip() + "..."
    return piece


def field_reader(rule: Rule, names: list[str]) -> Callable[[dict[str, str | None]], dict[str, Any]]:
    """A pattern's groupdict -> its typed fields; the types are looked up once per pattern,
    not on every match (a metrics line matches two patterns a few times a second)."""
    types = rule.field_types
    plan = [(name, _CONVERTERS.get(types.get(name, "str"))) for name in names]
    # a flag another pattern of the rule captures is simply off here: the message it matched
    # lacks that wording. Not for a fact: another line that does not say a thing says nothing
    # of it, except to the rule's own arithmetic (a counter: one per line that has it)
    counted = {name for expression in rule.derived.values() for name in expression.names}
    flags_off = {
        name: False for name, kind in types.items()
        if kind == "flag" and name not in names and (rule.kind != "fact" or name in counted)
    }

    def read(groups: dict[str, str | None]) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        for name, to_type in plan:
            value = groups[name]
            if value is not None:
                fields[name] = to_type(value) if to_type else value
            elif to_type is bool:
                fields[name] = False
        if flags_off:
            fields.update(flags_off)
        return fields

    return read


def _to_int(value: str) -> int | None:
    try:
        return int(value)  # the usual case: digits alone
    except ValueError:
        cleaned = value.replace(",", "").replace("_", "")
    try:
        return int(cleaned)
    except ValueError:
        try:
            return int(float(cleaned))
        except ValueError:
            return None


def _to_float(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        try:
            return float(value.replace(",", ""))
        except ValueError:
            return None


def _to_bool(value: str) -> bool | None:
    return {"true": True, "false": False}.get(value.lower())


_CONVERTERS: dict[str | None, Callable[[str], Any] | None] = {
    "flag": bool, "bool": _to_bool, "int": _to_int, "float": _to_float, "gib": _to_float,
}


def whole_groups(match: Any, text: str) -> dict[str, str | None]:
    """The match's groups, less those read ahead of it (a lookahead: "max_seq_len=...") that run
    to the end of the text: the line or the window may have been cut there ("max_seq_len=327" of
    32768, "dtype=torch.", "0." of 0.9). A True or False there is whole: no shorter text reads as one."""
    groups = match.groupdict()
    if match.end() < len(text):
        for name, value in groups.items():
            if value and match.end(name) == len(text) and value not in ("True", "False"):
                groups[name] = None
    return groups
