"""The engines that find the prefilter's literal anchors (anchors.py) in the bytes at scan time.

Hyperscan when it is importable (a default dependency on x86-64 Linux, where
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

from triage.match.anchors import NOISE, byte_cost
from triage.rules import cache as rulecache

ENGINE_VARIABLE = "VLLM_TRIAGE_ENGINE"  # "re" or "hyperscan" forces that engine; "auto" (or unset) picks
ENGINES = ("auto", "re", "hyperscan")

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
            hits = self._hits  # (read by index: a slice would copy the window's later hits for every line)
            for at in range(bisect.bisect_left(self._starts, start), len(hits)):
                hit_start, anchor_id = hits[at]
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
            anchors, lengths, found, hits = self.anchors, self.lengths, set(), self._hits
            for at in range(bisect.bisect_left(self._starts, start), len(hits)):
                hit_start, anchor_id = hits[at]
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


def substring_closure(targets: dict[bytes, list]) -> dict[bytes, tuple[bytes, ...]]:
    """For an anchor that holds shorter anchors, all of them: the engine reports only the longest."""
    anchors = list(targets)
    if not anchors:
        return {}
    find = ReEngine(anchors).found_in  # the longest anchor at each place inside another
    known, lengths = set(anchors), sorted({len(a) for a in anchors})
    closure = {}
    for anchor in anchors:
        found = find(anchor, 0, len(anchor))
        found |= {f[:n] for f in found for n in lengths if n < len(f) and f[:n] in known}  # and their prefixes
        inside = tuple(sorted(found))
        if len(inside) > 1:
            closure[anchor] = inside
    return closure


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
