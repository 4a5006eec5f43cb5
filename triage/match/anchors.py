"""Literal anchors for the prefilter: derived from the rules, and the engines that find them.

A pattern can only match a line that holds every literal run the pattern requires,
so a few of those runs (8-32 bytes, starting and ending on bytes that are rare in
server logs) are a prefilter that never loses a match. Anchors avoid quotes,
backslashes and non-ASCII: those may be escaped in the raw bytes (JSON bodies,
Python reprs) and are only undone on the decoded line. Each pattern gets up to
three anchors that do not overlap, so a message a terminal wrapped over two or
three lines still leaves one of them whole.

Engines: hyperscan when it is importable (a default dependency on x86-64 Linux, where
its wheels exist), else one stdlib ``re`` alternation compiled as a prefix trie, so the
engine's first-byte test stays cheap however many rules there are.
"""

from __future__ import annotations

import bisect
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from triage.rules import cache as rulecache

# The regex parser of the stdlib (Python 3.11+, which the project requires); typeshed has no stubs for it.
from re import _constants as sre_constants  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]

MIN_ANCHOR = 8
MAX_ANCHOR = 32
SHORTEST_USABLE = 5  # below this an anchor hits too often to be worth it: use the keywords
ANCHORS_PER_PATTERN = 3
UNSAFE = set("'\"\\`")  # may be escaped in the raw bytes
ENGINE_VARIABLE = "VLLM_TRIAGE_ENGINE"  # "re" or "hyperscan" forces that engine; "auto" (or unset) picks
ENGINES = ("auto", "re", "hyperscan")

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
# What the stdlib engine meets byte by byte in a busy server's log, in about the proportions
# it meets them: access lines (chat requests and health checks, nearly all 200 OK, some in
# colour), request ids in hex, the noise above, a metrics line now and then; all of it
# once as it is and once with V1's process tag in front.
_ACCESS = 'INFO:     10.31.7.204:50412 - "{}" 200 OK\n'
_BUSY = "".join(line * times for line, times in (
    (_ACCESS.format("POST /v1/chat/completions HTTP/1.1"), 36),
    (_ACCESS.format("\x1b[1mPOST /v1/chat/completions HTTP/1.1\x1b[0m"), 9),
    (_ACCESS.format("POST /v1/completions HTTP/1.1"), 12),
    (_ACCESS.format("POST /v1/embeddings HTTP/1.1"), 12),
    (_ACCESS.format("GET /health HTTP/1.1"), 18),
    (_ACCESS.format("GET /v1/models HTTP/1.1"), 12),
    (_ACCESS.format("GET /metrics HTTP/1.1"), 12),
    ("INFO 05-01 11:29:40 [async_llm.py:420] Aborted request chatcmpl-9f1c0d7e5b3a4c28.\n", 6),
    (NOISE, 1),
    ("INFO 05-01 11:29:40 [loggers.py:123] Engine 000: Avg prompt throughput: 5865.9 tokens/s, Avg generation "
     "throughput: 731.8 tokens/s, Running: 46 reqs, Waiting: 29 reqs, GPU KV cache usage: 26.3%, Prefix cache hit "
     "rate: 75.7%\n", 1),
))
TYPICAL_TEXT = _BUSY  # as text: words a busy server repeats
_TYPICAL = (_BUSY + "".join(f"(APIServer pid=2301) {line}\n" for line in _BUSY.splitlines())).encode()


def byte_cost(char: str) -> int:
    return _COMMON.get(char, 0)


@dataclass(slots=True)
class PatternAnchors:
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


# --- engines --------------------------------------------------------------------------------


def trie_regex(words: Iterable[bytes]) -> bytes:
    """One alternation with shared prefixes factored out: the engine tests each byte once."""
    trie: dict = {}
    for word in words:
        node = trie
        for byte in word:
            node = node.setdefault(byte, {})
        node[None] = True

    def emit(node: dict) -> bytes:
        branches = [re.escape(bytes([byte])) + emit(child) for byte, child in sorted((k, v) for k, v in node.items() if k is not None)]
        if not branches:
            return b""
        ends_here = None in node
        if len(branches) == 1 and not ends_here:
            return branches[0]
        group = b"(?:" + b"|".join(branches) + b")"
        return group + b"?" if ends_here else group

    return emit(trie)


def entry_points(anchors: Iterable[bytes]) -> dict[bytes, int]:
    """Where the stdlib engine enters each anchor: at a byte of one small set that every
    anchor holds one of and that a busy log holds few of. `re` stops at every byte of the
    set, whichever anchor the byte is for, so the set is chosen as a whole: the byte that
    covers most anchors for how common it is first, then any made redundant dropped.
    ("Nvidia driver version" has no rare byte; it is entered at an 'a', which the set holds
    for 17 other anchors anyway.) Each anchor is entered at its rarest byte in the set."""
    anchors = list(dict.fromkeys(anchors))
    holders: dict[int, set[int]] = {}
    for index, anchor in enumerate(anchors):
        for byte in set(anchor):
            holders.setdefault(byte, set()).add(index)

    typical = Counter(_TYPICAL)

    def cost(byte: int) -> tuple[int, int]:
        return typical[byte], byte_cost(chr(byte))

    def per_anchor(byte: int) -> tuple:  # how common the byte is, per anchor not yet covered it holds
        return (cost(byte)[0] + 1) / len(holders[byte] & left), cost(byte), byte

    chosen: set[int] = set()
    left = set(range(len(anchors)))
    while left:
        best = min((byte for byte in holders if holders[byte] & left), key=per_anchor)
        chosen.add(best)
        left -= holders[best]
    for byte in sorted(chosen, key=cost, reverse=True):
        if all(len(chosen & set(anchors[i])) > 1 for i in holders[byte]):
            chosen.discard(byte)
    return {
        anchor: min((at for at in range(len(anchor)) if anchor[at] in chosen), key=lambda at: (cost(anchor[at]), at))
        for anchor in anchors
    }


def entry_regex(anchors: Iterable[bytes]) -> bytes:
    """Like trie_regex, but each anchor is entered at a rare byte (entry_points) and the rest
    of it is checked behind: `re` stops at every byte that can begin a match, and an anchor's
    first byte is often one a log is full of ("GPU 0: " in every GET line; 'N' in every INFO).
    Entered at 'U', "GPU 0: " is "U 0: (?<=GPU 0: )". About 1.5x the speed on access logs."""
    trie: dict = {}
    for anchor, entry in entry_points(anchors).items():
        node = trie
        for byte in anchor[entry:]:
            node = node.setdefault(byte, {})
        node.setdefault(None, []).append(anchor)

    def emit(node: dict) -> bytes:
        branches = [re.escape(bytes([byte])) + emit(child) for byte, child in sorted((k, v) for k, v in node.items() if k is not None)]
        if None in node:  # anchors whose rest ends here: one of them must lie behind
            behind = [b"(?<=" + re.escape(anchor) + b")" for anchor in node[None]]
            branches.append(behind[0] if len(behind) == 1 else b"(?:" + b"|".join(behind) + b")")
        return branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"

    return emit(trie)


@dataclass
class ReEngine:
    """The stdlib engine: `re` on bytes, no extra dependency. The pass over a chunk enters
    each anchor at a rare byte (entry_regex); a candidate line's anchors are listed
    with the prefix trie (trie_regex), which finds the longest at each place."""

    anchors: list[bytes]
    name: str = "re"
    trie: bytes | None = field(default=None, repr=False)  # trie_regex(anchors), when known already
    entry: bytes | None = field(default=None, repr=False)  # entry_regex(anchors), when known already
    # both compiled on first use: a closure computation only lists anchors
    pattern: re.Pattern | None = field(default=None, init=False)  # the prefix trie
    entered: re.Pattern | None = field(default=None, init=False)
    ends: dict[bytes, list[bytes]] = field(default_factory=dict, init=False)  # entered text -> anchors ending so

    def new_chunk(self) -> None:
        """The reader refilled its buffer: nothing is cached here."""

    def search(self, buffer: bytes | bytearray, start: int, end: int) -> tuple[int, int, bytes] | None:
        """The first anchor in buffer[start:end] by where it is entered: in the first line
        that holds one (an anchor never spans lines: the matcher searches from a line start)."""
        if self.entered is None:
            self.entered = re.compile(self.entry if self.entry is not None else entry_regex(self.anchors))
        hit = self.entered.search(buffer, start, end)
        if hit is None:
            return None
        hit_end, entered = hit.end(), bytes(hit.group())
        behind = self.ends.get(entered)
        if behind is None:  # any anchor that ends so and lies behind is one the line holds
            behind = sorted((a for a in self.anchors if a.endswith(entered)), key=len, reverse=True)
            self.ends[entered] = behind
        for anchor in behind:
            if buffer[hit_end - len(anchor) : hit_end] == anchor:
                return hit_end - len(anchor), hit_end, anchor
        raise AssertionError("an entry hit without its anchor")  # the lookbehind saw one of them

    def found_in(self, buffer: bytes | bytearray, start: int, end: int) -> set[bytes]:
        """Every anchor in buffer[start:end], overlapping ones included."""
        if self.pattern is None:
            self.pattern = re.compile(self.trie if self.trie is not None else trie_regex(self.anchors))
        found = set()
        hit = self.pattern.search(buffer, start, end)
        while hit is not None:
            found.add(bytes(hit.group()))
            hit = self.pattern.search(buffer, hit.start() + 1, end)
        return found


class HyperscanEngine:
    """Hyperscan (x86-64 Linux): all anchors in one pass, about 3x the stdlib engine on short lines.

    It scans windows, not whole chunks: after a hit the matcher jumps to the end of that
    line (past a whole prompt, for a request-log line), so the next window starts small
    and doubles while it finds nothing. After a skip marker (a request-log line) it starts
    smaller still: the next line is most often another one, whose marker is near its
    start, and a larger window would go through its prompt's bytes (and the errors they
    quote) for nothing.
    """

    name = "hyperscan"
    FIRST_WINDOW = 16 * 1024
    AFTER_SKIP_WINDOW = 512
    LARGEST_WINDOW = 1024 * 1024

    def __init__(self, anchors: list[bytes], skip_markers: Iterable[bytes] = ()):
        import hyperscan

        self.anchors = anchors
        self.skip_markers = frozenset(skip_markers)
        self.lengths = [len(a) for a in anchors]
        self.longest = max(self.lengths)
        self.database = _hyperscan_database(hyperscan, anchors)
        self.scratch = hyperscan.Scratch(self.database)
        self._buffer: bytes | bytearray | None = None
        self._window = (0, 0)
        self._size = self.FIRST_WINDOW
        self._hits: list[tuple[int, int]] = []  # (start, anchor id) in the window, by start
        self._starts: list[int] = []

    def _scan(self, data: bytes | memoryview, offset: int) -> list[tuple[int, int]]:
        hits: list[tuple[int, int]] = []
        lengths = self.lengths

        def on_match(anchor_id: int, _from: int, to: int, _flags: int, _context: object) -> None:
            hits.append((offset + to - lengths[anchor_id], anchor_id))

        self.database.scan(data, match_event_handler=on_match, scratch=self.scratch)
        hits.sort()
        return hits

    def _index(self, buffer: bytes | bytearray, start: int, end: int) -> None:
        window_end = min(end, start + self._size)
        # overlap by the longest anchor so one cut by the window's end is still seen whole
        hits = self._scan(memoryview(buffer)[start : min(end, window_end + self.longest)], start)  # no copy
        self._buffer, self._window = buffer, (start, window_end)
        self._hits = [h for h in hits if h[0] < window_end]
        self._starts = [h[0] for h in self._hits]

    def new_chunk(self) -> None:
        """The reader refilled its buffer (the same object): the window's hits are stale."""
        self._buffer = None

    def search(self, buffer: bytes | bytearray, start: int, end: int) -> tuple[int, int, bytes] | None:
        while start < end:
            low, high = self._window
            if self._buffer is not buffer or not low <= start < high:
                self._index(buffer, start, end)
                low, high = self._window
            at = bisect.bisect_left(self._starts, start)
            for hit_start, anchor_id in self._hits[at:]:
                anchor = self.anchors[anchor_id]
                if hit_start + len(anchor) <= end:
                    self._size = self.AFTER_SKIP_WINDOW if anchor in self.skip_markers else self.FIRST_WINDOW
                    return hit_start, hit_start + len(anchor), anchor
            start = high
            self._size = min(2 * self._size, self.LARGEST_WINDOW)
        return None

    def found_in(self, buffer: bytes | bytearray, start: int, end: int) -> set[bytes]:
        low, high = self._window
        if buffer is self._buffer and low <= start and end <= high:  # the window's hits hold them
            at = bisect.bisect_left(self._starts, start)
            anchors, lengths, found = self.anchors, self.lengths, set()
            for hit_start, anchor_id in self._hits[at:]:
                if hit_start >= end:
                    break
                if hit_start + lengths[anchor_id] <= end:
                    found.add(anchors[anchor_id])
            return found
        return {self.anchors[anchor_id] for _, anchor_id in self._scan(memoryview(buffer)[start:end], start)}


# Fewer anchors than this (a rule tested alone) are quicker to compile than to look up,
# and would fill the cache with one entry per rule.
MIN_CACHED_ANCHORS = 64


def cached_regex(build: Callable[[list[bytes]], bytes], anchors: list[bytes]) -> bytes:
    """build(anchors) (trie_regex, entry_regex), from the rule cache when these anchors were
    seen before (building it grows with the anchors: a start-up cost)."""
    if len(anchors) < MIN_CACHED_ANCHORS:
        return build(anchors)
    kind = build.__name__.removesuffix("_regex")  # trie, entry
    name = f"{kind}-{rulecache.entry_key(kind, *anchors)}.re"
    source = rulecache.read(name)
    if source is None:
        source = build(anchors)
        rulecache.write(name, source)
    return source


def _hyperscan_database(hyperscan: Any, anchors: list[bytes]) -> Any:
    """The compiled database, from the rule cache when these anchors were compiled before
    (hyperscan checks a stored database itself: one from another version or CPU is refused)."""
    if len(anchors) < MIN_CACHED_ANCHORS:
        return _compiled_database(hyperscan, anchors)
    # a database is built for this host's CPU: another host sharing a home directory has its own
    host = f"{hyperscan.__version__} {os.uname().nodename} {os.uname().machine}".encode()
    name = f"hyperscan-{rulecache.entry_key('hyperscan', host, *anchors)}.db"
    stored = rulecache.read(name)
    if stored is not None:
        try:
            return hyperscan.loadb(stored, hyperscan.HS_MODE_BLOCK)
        except hyperscan.error:
            pass
    database = _compiled_database(hyperscan, anchors)
    if rulecache.cache_dir() is not None:
        rulecache.write(name, hyperscan.dumpb(database))
    return database


def _compiled_database(hyperscan: Any, anchors: list[bytes]) -> Any:
    database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    database.compile(expressions=[re.escape(a) for a in anchors], ids=list(range(len(anchors))), elements=len(anchors))
    return database


def cached_closure(
    anchors: Iterable[bytes], compute: Callable[[], dict[bytes, tuple[bytes, ...]]]
) -> dict[bytes, tuple[bytes, ...]]:
    """compute() (the shorter anchors inside each anchor), from the rule cache when these anchors were seen before."""
    anchors = sorted(anchors)
    if len(anchors) < MIN_CACHED_ANCHORS:
        return compute()
    name = f"closure-{rulecache.entry_key('closure', *anchors)}.json"
    stored = rulecache.read_json(name)
    if isinstance(stored, dict):
        try:
            return {_from_text(key): tuple(map(_from_text, inside)) for key, inside in stored.items()}
        except (TypeError, UnicodeEncodeError):
            pass
    closure = compute()
    rulecache.write_json(name, {_as_text(key): [_as_text(a) for a in inside] for key, inside in closure.items()})
    return closure


def _as_text(anchor: bytes) -> str:
    return anchor.decode("latin-1")  # any bytes, one character each: JSON keeps them exactly


def _from_text(text: str) -> bytes:
    return text.encode("latin-1")


class EngineError(ValueError):
    """The engine asked for cannot run here (a one-line message for the user)."""


def make_engine(
    anchors: list[bytes], prefer: str = "auto", skip_markers: Iterable[bytes] = ()
) -> ReEngine | HyperscanEngine:
    """Hyperscan when importable, else the stdlib engine; VLLM_TRIAGE_ENGINE forces either.
    skip_markers: those of the anchors that mark a line to pass over (request logs)."""
    if prefer == "auto":
        prefer = os.environ.get(ENGINE_VARIABLE) or "auto"
    if prefer not in ENGINES:
        raise EngineError(f"{ENGINE_VARIABLE}={prefer}: not an engine (one of {', '.join(ENGINES)})")
    if prefer in ("auto", "hyperscan"):
        try:
            return HyperscanEngine(anchors, skip_markers)
        except ImportError:
            if prefer == "hyperscan":
                raise EngineError(
                    f"{ENGINE_VARIABLE}=hyperscan, but hyperscan cannot be imported "
                    "(a default dependency on x86-64 Linux only; elsewhere use the stdlib engine: re)"
                ) from None
    return ReEngine(anchors, trie=cached_regex(trie_regex, anchors), entry=cached_regex(entry_regex, anchors))
