"""Literal anchors for the prefilter, derived from the rules' patterns at load (engines.py
finds them at scan time).

A pattern can only match a line that holds every literal run the pattern requires,
so a few of those runs (8-32 bytes, starting and ending on bytes that are rare in
server logs) are a prefilter that never loses a match. Anchors avoid quotes,
backslashes and non-ASCII: those may be escaped in the raw bytes (JSON bodies,
Python reprs) and are only undone on the decoded line. Each pattern gets up to
three anchors that do not overlap, so a message a terminal wrapped over two or
three lines still leaves one of them whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# The regex parser of the stdlib (Python 3.11+, which the project requires); typeshed has no stubs for it.
from re import _constants as sre_constants  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]

MIN_ANCHOR = 8
MAX_ANCHOR = 32
SHORTEST_USABLE = 5  # below this an anchor hits too often to be worth it: use the keywords
ANCHORS_PER_PATTERN = 3
UNSAFE = set("'\"\\`")  # may be escaped in the raw bytes

# How often a byte starts a stretch of server-log text (access, metrics and prompt
# lines), on a rough 0-100 scale; bytes not listed are rare (N and F: the "INFO" that
# starts nearly every line). The stdlib engine stops at every byte that can start an
# anchor, so rare first bytes keep it fast.
_COMMON = {
    " ": 100, "e": 60, "t": 55, "a": 50, "o": 50, "i": 50, "n": 50, "s": 50, "r": 45, "h": 35,
    "l": 35, "d": 30, "c": 30, "u": 30, "m": 30, "p": 30, "f": 15, "g": 30, "y": 20, "w": 12,
    "b": 25, "v": 35, "k": 6, "x": 3, "j": 2, "q": 10, "z": 1, ".": 50, ":": 40, "/": 40,
    "-": 35, ",": 30, "=": 10, "(": 10, ")": 10, "[": 8, "]": 8, "_": 8, "%": 5, "I": 30,
    "N": 60, "F": 60, "O": 40, "P": 35, "T": 35, "K": 35, "H": 30, "S": 30, "E": 30, "G": 30,
    "V": 8, "C": 15, "A": 15, "W": 4, "R": 15,
}
_COMMON.update({digit: 60 for digit in "0123456789"})

# Lines a busy server prints by the million (our own samples of vLLM's formats; request-log
# lines are left out: the skip marker passes over them whole). A piece
# of rule text found in one of them would make every such line a candidate: it is the
# last choice for an anchor (an extra rule anchored on "beddings" hit every
# /v1/embeddings access line).
NOISE = """\
(APIServer pid=2301) INFO:     10.1.2.3:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK
INFO:     127.0.0.1:40112 - "POST /v1/completions HTTP/1.1" 400 Bad Request
INFO:     127.0.0.1:40112 - "POST /v1/embeddings HTTP/1.1" 499 Client Closed Request
INFO:     127.0.0.1:40112 - "GET /v1/models HTTP/1.1" 404 Not Found
INFO:     127.0.0.1:40112 - "GET /health HTTP/1.1" 503 Service Unavailable
INFO:     127.0.0.1:40112 - "GET /metrics HTTP/1.1" 500 Internal Server Error
INFO:     127.0.0.1:40112 - "POST /v1/responses HTTP/1.1" 422 Unprocessable Entity
INFO:     127.0.0.1:40112 - "POST /tokenize HTTP/1.1" 200 OK
INFO:     127.0.0.1:40112 - "POST /v1/audio/transcriptions HTTP/1.1" 200 OK
INFO 05-01 11:29:40 [async_llm.py:261] Added request chatcmpl-9f1c.
INFO 05-01 11:29:40 [async_llm.py:420] Aborted request chatcmpl-9f1c.
INFO 05-01 11:29:40 [engine.py:310] Finished request cmpl-9f1c-0.
INFO 05-01 11:29:40 [engine.py:310] Generating response for request cmpl-9f1c
DEBUG 05-01 11:29:40 [client.py:12] HTTP Request: POST http://127.0.0.1:8000/v1/chat/completions "HTTP/1.1 200 OK"
"""
NOISE_COST = 300


def byte_cost(char: str) -> int:
    return _COMMON.get(char, 0)


@dataclass(slots=True)
class PatternAnchors:
    """The anchors derived for one pattern, and why there are none good enough (warning)."""

    anchors: list[str]
    warning: str | None = None


def required_runs(source: str) -> list[str] | None:
    """Runs of literal text that every match of the regex holds, in order; None if unknown."""
    try:
        tree = sre_parse.parse(source)
    except Exception:  # noqa: BLE001 - syntax only the `regex` module knows: no derivation
        return None
    if tree.state.flags & sre_constants.SRE_FLAG_IGNORECASE:
        return None
    runs: list[str] = []
    current: list[str] = []

    def flush() -> None:
        if current:
            runs.append("".join(current))
            current.clear()

    def walk(items: Iterable) -> bool:
        for op, value in items:
            if op is sre_constants.LITERAL:
                current.append(chr(value))
            elif op is sre_constants.SUBPATTERN:
                add_flags = value[1]
                if add_flags & sre_constants.SRE_FLAG_IGNORECASE:
                    return False
                walk(value[3])
            elif op is sre_constants.AT:
                continue  # zero-width: ^, $, \b
            elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
                continue  # zero-width; a lookahead's text need not be adjacent
            elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, getattr(sre_constants, "POSSESSIVE_REPEAT", None)):
                flush()
                if value[0] >= 1 and not walk(value[2]):
                    return False
                flush()
            elif op is getattr(sre_constants, "ATOMIC_GROUP", None):
                walk(value)
            else:  # classes, alternations, any-char, back-references: a gap in the text
                flush()
        return True

    if not walk(tree):
        return None
    flush()
    return runs


def openings(source: str) -> tuple[str, ...]:
    """The literal texts the regex may start with (one per alternative it opens with): every
    match holds one of them whole, and a match that the text's end cuts short holds one or a
    start of one. () when that is not known: the regex starts otherwise (a class, a repeat),
    ignores case, or is syntax only the regex module reads."""
    return _opening_form(source)[0]


_openings_known: dict[str, tuple[tuple[str, ...], bool]] = {}


def _opening_form(source: str) -> tuple[tuple[str, ...], bool]:
    """openings(source), and whether optional whitespace comes before them ("^\\s*File "):
    from the rule cache (remember_openings), else derived once per process (stdlib's parser,
    0.2 ms a pattern: a paste asks a dozen)."""
    known = _openings_known.get(source)
    if known is None:
        known = _openings_known[source] = _derive_opening_form(source)
    return known


def derived_openings(sources: Iterable[str]) -> dict[str, list]:
    """The openings of each regex source as plain data, for the rule cache."""
    return {source: [list(texts), spaced] for source in sources for texts, spaced in [_opening_form(source)]}


def remember_openings(plain: dict[str, list]) -> None:
    """Take derived_openings' data back (from the rule cache); refuses data of another shape."""
    restored = {}
    for source, (texts, spaced) in plain.items():
        if not (isinstance(texts, list) and all(isinstance(t, str) and t for t in texts) and isinstance(spaced, bool)):
            raise ValueError(f"openings of {source!r}: not a list of texts and a flag")
        restored[source] = (tuple(texts), spaced)
    _openings_known.update(restored)


def _derive_opening_form(source: str) -> tuple[tuple[str, ...], bool]:
    try:
        tree = sre_parse.parse(source)
    except Exception:  # noqa: BLE001 - syntax only the `regex` module knows: no opening
        return (), False
    if tree.state.flags & sre_constants.SRE_FLAG_IGNORECASE:
        return (), False
    items = [(op, value) for op, value in tree if op is not sre_constants.AT]  # ^, \b: zero-width
    spaced = bool(items) and _optional_space(*items[0])
    return tuple(_openings(items[1:] if spaced else items) or ()), spaced


def _optional_space(op: Any, value: Any) -> bool:
    c = sre_constants
    return op in (c.MAX_REPEAT, c.MIN_REPEAT) and value[0] == 0 and all(
        o is c.CATEGORY and v is c.CATEGORY_SPACE or o is c.LITERAL and chr(v).isspace()
        or o is c.IN and all(io is c.CATEGORY and iv is c.CATEGORY_SPACE or io is c.LITERAL and chr(iv).isspace()
                             for io, iv in v)
        for o, v in value[2])


def _openings(items: list) -> list[str] | None:
    c = sre_constants
    literal: list[str] = []
    for op, value in items:
        if op is c.LITERAL:
            literal.append(chr(value))
        elif op is c.AT:  # zero-width
            continue
        elif literal:
            break
        elif op is c.SUBPATTERN:  # what follows the group is not added: its own openings are enough
            return None if value[1] & c.SRE_FLAG_IGNORECASE else _openings(list(value[3]))
        elif op is c.BRANCH:
            found = [_openings(list(branch)) for branch in value[1]]
            return None if any(not branch for branch in found) else [text for branch in found for text in branch]  # type: ignore[union-attr]
        else:
            return None
    return ["".join(literal)] if literal else None


def may_match_cut(source: str, text: str) -> bool:
    """A match of the regex may run to the text's end and want more (a partial match): the
    text holds an opening of it, or ends in a start of one (or in the whitespace before
    them). False is certain, so the regex module (partial matching) need not be imported to
    ask a line that cannot be."""
    known, spaced = _opening_form(source)
    if not known or spaced and text[-1:].isspace():
        return True
    return any(opening in text or any(text.endswith(opening[:size]) for size in range(1, len(opening)))
               for opening in known)


def opens_in(source: str, text: str) -> bool:
    """The text holds an opening of the regex: a match (whole, or cut short after one of its
    groups) may start in it. False is certain."""
    known = openings(source)
    return not known or any(opening in text for opening in known)


def _candidates(run: str) -> list[tuple[int, int, int]]:
    """(cost, start, end) of the usable substrings of one run."""
    found = []
    bad_at = len(run)  # the first unusable character at or after start (scanning backwards)
    next_bad = [0] * len(run)
    for index in range(len(run) - 1, -1, -1):
        if run[index] in UNSAFE or not (" " <= run[index] <= "~"):
            bad_at = index
        next_bad[index] = bad_at
    for start, char in enumerate(run):
        if char == " " or char in UNSAFE:
            continue
        end = min(len(run), start + MAX_ANCHOR, next_bad[start])
        while end > start and run[end - 1] == " ":
            end -= 1
        if end - start < SHORTEST_USABLE:
            continue
        piece = run[start:end]  # the longest usable piece from this start
        short = max(0, MIN_ANCHOR - len(piece)) * 20
        noise = NOISE_COST if piece in NOISE else 0
        found.append((4 * byte_cost(piece[0]) + byte_cost(piece[-1]) + short + noise - len(piece) // 4, start, end))
    return found


def derive(source: str) -> PatternAnchors:
    """Up to three non-overlapping anchors for one pattern, the rarest first.

    Two at least when the pattern has them, weak or not: a message wrapped over two
    lines is found only when one anchor is left whole.
    """
    runs = required_runs(source)
    if runs is None:
        return PatternAnchors([], "uses syntax the anchor derivation does not read")
    chosen: list[tuple[int, int, int, int]] = []  # (cost, run index, start, end)
    candidates = sorted(
        (cost, index, start, end) for index, run in enumerate(runs) for cost, start, end in _candidates(run)
    )
    for candidate in candidates:
        cost, index, start, end = candidate
        later = [s for _, i, s, _ in chosen if i == index and start < s < end]
        if later:  # it runs into a chosen anchor: what comes before that may still do
            end = len(runs[index][start : min(later)].rstrip(" "))
            end += start
            candidate = (cost, index, start, end)
        if end - start < SHORTEST_USABLE or any(index == i and start < e and s < end for _, i, s, e in chosen):
            continue
        piece = runs[index][start:end]
        if chosen and (piece in NOISE or byte_cost(piece[0]) >= 30 or len(chosen) >= 2 and not strong_anchor(piece)):
            continue  # a weak third anchor, or one in noise or on a common first byte, would slow the anchor pass
        chosen.append(candidate)
        if len(chosen) == ANCHORS_PER_PATTERN:
            break
    if not chosen:
        return PatternAnchors([], "requires no literal text of 5 bytes or more")
    anchors = [runs[i][s:e] for _, i, s, e in chosen]
    if len(anchors[0]) < MIN_ANCHOR:
        return PatternAnchors(anchors, f"its longest usable literal text is {anchors[0]!r}")
    return PatternAnchors(anchors)


def keyword_anchor(keyword: str) -> str:
    """The best piece of a hand-written keyword: any piece of it is there when it is."""
    pieces = anchors_for(keyword_source(keyword)).anchors
    return pieces[0] if pieces and strong_anchor(pieces[0]) else keyword


def keyword_source(keyword: str) -> str:
    """The regex of a keyword, as anchors_for takes it."""
    return re.escape(keyword)


# derive() per regex source, kept for the process and filled from the rule cache: deriving
# every pattern's anchors was a third of a scan's start-up.
_derived: dict[str, PatternAnchors] = {}
MAX_REMEMBERED = 50_000


def anchors_for(source: str) -> PatternAnchors:
    """derive(source), computed once per source (callers only read the result)."""
    found = _derived.get(source)
    if found is None:
        found = derive(source)
        if len(_derived) >= MAX_REMEMBERED:
            _derived.clear()
        _derived[source] = found
    return found


def derived_anchors(sources: Iterable[str]) -> dict[str, list]:
    """The anchors of each regex source as plain data, for the rule cache."""
    return {source: [found.anchors, found.warning] for source in sources for found in [anchors_for(source)]}


def needs_keywords(found: PatternAnchors) -> bool:
    """The pattern has no good anchors: its rule's keywords stand in (Matcher._targets)."""
    return bool(found.warning) or not found.anchors


def remember_anchors(plain: dict[str, list]) -> None:
    """Take derived_anchors' data back (from the rule cache); refuses data of another shape."""
    restored = {}
    for source, (anchors, warning) in plain.items():
        if not (isinstance(anchors, list) and all(isinstance(a, str) and a for a in anchors)):
            raise ValueError(f"anchors of {source!r}: not a list of texts")
        if warning is not None and not isinstance(warning, str):
            raise ValueError(f"anchors of {source!r}: the warning is not a text")
        restored[source] = PatternAnchors(anchors, warning)
    if len(_derived) + len(restored) >= MAX_REMEMBERED:
        _derived.clear()
    _derived.update(restored)


def strong_anchor(anchor: str) -> bool:
    """Long enough, starting on a byte that is rare in server logs, and in no line they repeat."""
    return len(anchor) >= MIN_ANCHOR and byte_cost(anchor[0]) < 30 and anchor not in NOISE
