"""Mask what looks like a secret before anything is printed (``--redact``).

Reports get pasted into public tickets; logs carry API keys in headers, tokens in
URLs and people's e-mail addresses. ``redact`` is a pure function of a text; the
CLI applies ``redact_value`` once, to the whole scan result, just before it is
handed to a formatter, so every format gets the same masking.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import Any

import regex

from triage.diagnose.store import FindingStore

MASK = "[REDACTED]"

# Order matters: the specific shapes run before the generic "key=value" one, so a
# known token is masked whole and the generic rule does not leave a tail behind.
SECRETS = [
    # URL credentials: scheme://user:password@host
    (regex.compile(r"(?<=\b[a-z][a-z0-9+.-]*://)[^\s/:@]+:[^\s/@]+(?=@)", regex.I), MASK),
    # Authorization headers: "Bearer <token>", "Basic <base64>"
    (regex.compile(r"\b(Bearer|Basic|Token)(\s+)[A-Za-z0-9._~+/=-]{8,}", regex.I), rf"\1\2{MASK}"),
    # OpenAI / Anthropic style keys (sk-..., sk-proj-..., sk-ant-...)
    (regex.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), MASK),
    # Hugging Face tokens
    (regex.compile(r"\bhf_[A-Za-z0-9]{16,}"), MASK),
    # GitHub tokens
    (regex.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"), MASK),
    # Slack tokens
    (regex.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"), MASK),
    # Google API keys
    (regex.compile(r"\bAIza[0-9A-Za-z_-]{35}"), MASK),
    # AWS access key ids
    (regex.compile(r"\b(?:AKIA|ASIA|AROA|AIDA)[0-9A-Z]{16}\b"), MASK),
    # JSON web tokens
    (regex.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]+"), MASK),
    # key=value, key: value, "key": "value" where the key names one secret (singular:
    # "max_tokens=8192" and "prompt_tokens: 900" are counts, not credentials)
    (
        regex.compile(
            r"""(?i)\b((?:[a-z0-9_-]*(?:api[_-]?key|secret|token|passw(?:or)?d|credential)|authorization)
            ["']?\s*[:=]\s*["']?)(?!\[REDACTED\]|(?:Bearer|Basic|Token)\s)[^\s"',;&}]{4,}""",
            regex.X,
        ),
        rf"\1{MASK}",
    ),
    # e-mail addresses
    (regex.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"), MASK),
    # IPv6 addresses, full or compressed, with a zone, in brackets (the port stays); before
    # IPv4 so an embedded ::ffff:10.0.0.1 goes whole. What looks like one is masked only if it
    # parses (a timestamp 10:15:03 does not) and holds a digit (no word like "add::").
    (
        regex.compile(
            r"(?<![\w:.])(?P<open>\[)?(?P<address>(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|(?:\d{1,3}\.){3}\d{1,3})?"
            r"(?:%[\w.-]+)?)(?(open)\]|(?![\w:])(?!\.\d))"
        ),
        lambda match: MASK if is_ipv6(match["address"]) else match[0],
    ),
    # IPv4 addresses (access lines, Ray's ip= tags); not a four-part version like 0.10.1.1
    (
        regex.compile(r"(?<![\w.])(?<!(?i:version)\s*:?\s*)(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)(?![\w.])"),
        MASK,
    ),
]


def is_ipv6(text: str) -> bool:
    if not any(c.isdigit() for c in text):
        return False
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def redact(text: str) -> str:
    """The text with everything that looks like a secret replaced by [REDACTED]."""
    for pattern, replacement in SECRETS:
        text = pattern.sub(replacement, text)
    return text


def redact_result(result: Any) -> Any:
    """A scan result with every string in it redacted, except the rule definitions.

    Rules are the tool's own data, not log text. Every other field, including any a
    later format adds, goes through redact_value.
    """
    changes = {
        f.name: redact_value(getattr(result, f.name))
        for f in dataclasses.fields(result)
        if f.init and f.name != "rules"
    }
    return dataclasses.replace(result, **changes)


def redact_value(value: Any) -> Any:
    """A copy of a value (dataclasses, dicts, lists, strings) with every string redacted.

    Numbers and booleans pass through: they are what the diagnosis is made of.
    Dictionary keys are field names from the rules, not log text, and are kept.
    Values that are not plain data (rule objects) pass through unchanged.
    """
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [redact_value(item) for item in value]
    if isinstance(value, FindingStore):  # a scan's findings, kept compressed: masked into a new store
        return value.mapped(redact_value)
    if isinstance(value, tuple):
        return tuple(redact_value(item) for item in value)
    if isinstance(value, dict):
        return {key: redact_value(item) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: redact_value(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    return value
