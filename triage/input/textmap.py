"""Text rewritten with a map back to the text it came from.

Decoding a record (escapes, HTML entities, a viewer's quotes) and bringing it to the loose
form both drop or replace characters; every question about where a match is ("which line?",
"what did the text say there?") is answered through the map, never by searching again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Mapped:
    """text, and for each of its characters the offset it came from in the source text.
    origin None: text is the source itself (nothing was rewritten: nearly every record)."""

    text: str
    origin: list[int] | None = None

    def at(self, offset: int) -> int:
        """The source offset of text[offset] (offset == len(text): the source's end)."""
        if self.origin is None:
            return offset
        if offset < len(self.origin):
            return self.origin[offset]
        return self.origin[-1] + 1 if self.origin else 0

    def then(self, step: Mapped) -> Mapped:
        """step rewrote this text: step's text, mapped to this one's source."""
        if step.origin is None:
            return Mapped(step.text, self.origin)
        if self.origin is None:
            return step
        origin = self.origin
        return Mapped(step.text, [origin[index] for index in step.origin])


def rewrite(text: str, spans: Iterable[tuple[int, int, str]]) -> Mapped:
    """text with each span (start, end, replacement), in order and not overlapping, replaced;
    a replacement's characters map to where its span started."""
    out: list[str] = []
    origin: list[int] = []
    last = 0
    for start, end, replacement in spans:
        out.append(text[last:start])
        origin.extend(range(last, start))
        out.append(replacement)
        origin.extend([start] * len(replacement))
        last = end
    if not origin and last == 0:
        return Mapped(text)
    out.append(text[last:])
    origin.extend(range(last, len(text)))
    return Mapped("".join(out), origin)


def replace_all(text: str, old: str, new: str) -> Mapped:
    """str.replace with its map."""
    spans, at = [], text.find(old)
    while at >= 0:
        spans.append((at, at + len(old), new))
        at = text.find(old, at + len(old))
    return rewrite(text, spans) if spans else Mapped(text)


def substitute(text: str, pattern: Any, replacement: Callable[[Any], str]) -> Mapped:
    """pattern.sub(replacement, text) with its map."""
    return rewrite(text, ((m.start(), m.end(), replacement(m)) for m in pattern.finditer(text)))
