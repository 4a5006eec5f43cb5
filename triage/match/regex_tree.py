"""A rule's regex written back from its parsed tree, with changes a subclass makes: the one
place that knows the parser's tree (stdlib re's, which typeshed has no stubs for)."""

from __future__ import annotations

import re
from typing import Any

from re import _constants as sre_constants  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]

c = sre_constants
REPEATS = tuple(op for op in (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", None)) if op is not None)
CATEGORIES = {
    c.CATEGORY_DIGIT: r"\d", c.CATEGORY_NOT_DIGIT: r"\D", c.CATEGORY_WORD: r"\w", c.CATEGORY_NOT_WORD: r"\W",
    c.CATEGORY_SPACE: r"\s", c.CATEGORY_NOT_SPACE: r"\S",
}
AT_CODES = {
    c.AT_BEGINNING: "^", c.AT_BEGINNING_STRING: r"\A", c.AT_END: "$", c.AT_END_STRING: r"\Z",
    c.AT_BOUNDARY: r"\b", c.AT_NON_BOUNDARY: r"\B",
}
FLAG_LETTERS = ((re.IGNORECASE, "i"), (re.MULTILINE, "m"), (re.DOTALL, "s"), (re.VERBOSE, "x"))


def parsed(source: str) -> Any:
    """The tree of a pattern stdlib re reads (raises re.error for one only the regex module reads)."""
    return sre_parse.parse(source)


def class_char(char: str) -> str:
    return "\\" + char if char in "\\]^-[" else (re.escape(char) if not char.isprintable() else char)


def bounds(low: int, high: Any) -> str:
    if high is c.MAXREPEAT:
        return "*" if low == 0 else "+" if low == 1 else f"{{{low},}}"
    if low == 0 and high == 1:
        return "?"
    return f"{{{low}}}" if low == high else f"{{{low},{high}}}"


def whitespace_only(members: Any) -> bool:
    """A class of whitespace only: "\\s", "[ \\t]"."""
    return all(op is c.CATEGORY and value is c.CATEGORY_SPACE or op is c.LITERAL and chr(value).isspace()
               for op, value in members)


class Emitter:
    """Writes a parsed tree back as regex text, as it was; subclasses change some items."""

    def __init__(self, tree: Any):
        self.names = {index: name for name, index in tree.state.groupdict.items()}
        self.flags = tree.state.flags
        self.behind = 0  # depth inside a lookbehind, which must keep its fixed width

    def pattern(self, tree: Any) -> str:
        letters = "".join(letter for flag, letter in FLAG_LETTERS if self.flags & flag)
        return (f"(?{letters})" if letters else "") + self.emit(list(tree))

    def emit(self, items: Any) -> str:
        return "".join(self.item(op, value) for op, value in items)

    def literal(self, char: str) -> str:
        return re.escape(char) if char != " " else " "

    def repeat(self, op: Any, low: int, high: Any, items: Any) -> str:
        inner = self.emit(items)
        single = len(items) == 1 and (items[0][0] in (c.LITERAL, c.ANY, c.IN, c.NOT_LITERAL) and len(inner) <= 2
                                      or items[0][0] is c.IN or items[0][0] is c.SUBPATTERN)
        body = inner if single and not inner.endswith("?") else f"(?:{inner})"
        lazy = "?" if op is c.MIN_REPEAT else "+" if op is getattr(c, "POSSESSIVE_REPEAT", None) else ""
        return f"{body}{bounds(low, high)}{lazy}"

    def char_class(self, members: Any) -> str:
        out, negate = [], False
        for op, value in members:
            if op is c.NEGATE:
                negate = True
            elif op is c.LITERAL:
                out.append(class_char(chr(value)))
            elif op is c.RANGE:
                out.append(f"{class_char(chr(value[0]))}-{class_char(chr(value[1]))}")
            elif op is c.CATEGORY:
                out.append(CATEGORIES[value])
        if not negate and len(out) == 1 and out[0] in CATEGORIES.values():
            return out[0]
        return f"[{'^' if negate else ''}{''.join(out)}]"

    def at(self, value: Any) -> str:
        return AT_CODES[value]

    def item(self, op: Any, value: Any) -> str:
        if op is c.LITERAL:
            return self.literal(chr(value))
        if op is c.NOT_LITERAL:
            return f"[^{class_char(chr(value))}]"
        if op is c.ANY:
            return "."
        if op is c.IN:
            return self.char_class(value)
        if op is c.AT:
            return self.at(value)
        if op is c.BRANCH:
            return "(?:" + "|".join(self.emit(branch) for branch in value[1]) + ")"
        if op is c.SUBPATTERN:
            group, add, remove, items = value
            inner = self.emit(items)
            if group:
                name = self.names.get(group)
                return f"(?P<{name}>{inner})" if name else f"({inner})"
            on = "".join(letter for flag, letter in FLAG_LETTERS if add & flag)
            off = "".join(letter for flag, letter in FLAG_LETTERS if remove & flag)
            return f"(?{on}{'-' + off if off else ''}:{inner})" if on or off else f"(?:{inner})"
        if op in REPEATS:
            low, high, items = value
            return self.repeat(op, low, high, list(items))
        if op in (c.ASSERT, c.ASSERT_NOT):
            direction, items = value
            kind = {(1, c.ASSERT): "?=", (1, c.ASSERT_NOT): "?!", (-1, c.ASSERT): "?<=", (-1, c.ASSERT_NOT): "?<!"}
            self.behind += direction < 0
            try:
                return f"({kind[(direction, op)]}{self.emit(items)})"
            finally:
                self.behind -= direction < 0
        if op is getattr(c, "ATOMIC_GROUP", None):
            return f"(?>{self.emit(value)})"
        if op is c.GROUPREF:
            name = self.names.get(value)
            return f"(?P={name})" if name else f"(?:\\{value})"
        if op is c.GROUPREF_EXISTS:
            group, yes, no = value
            return f"(?({self.names.get(group, group)}){self.emit(yes)}{'|' + self.emit(no) if no else ''})"
        raise ValueError(f"no emitter for {op}")


class SeamTolerant(Emitter):
    """A pattern that also reads its message from rows joined where a wrap replaced a blank
    (the join keeps none there): every blank it wants may be missing, and a word boundary
    may fall inside what the join ran together. Lookbehinds keep their fixed width."""

    def literal(self, char: str) -> str:
        return " ?" if char == " " and not self.behind else super().literal(char)

    def char_class(self, members: Any) -> str:
        text = super().char_class(members)
        return f"{text}?" if whitespace_only(members) and not self.behind else text

    def repeat(self, op: Any, low: int, high: Any, items: Any) -> str:
        if len(items) == 1 and not self.behind and (
                items[0][0] is c.LITERAL and chr(items[0][1]).isspace() or items[0][0] is c.IN and whitespace_only(items[0][1])):
            text = super().char_class(items[0][1]) if items[0][0] is c.IN else super().literal(chr(items[0][1]))
            lazy = "?" if op is c.MIN_REPEAT else ""
            return f"{text}{bounds(0, high)}{lazy}"
        return super().repeat(op, low, high, items)

    def at(self, value: Any) -> str:
        return "" if value in (c.AT_BOUNDARY, c.AT_NON_BOUNDARY) else super().at(value)


def seam_tolerant(source: str) -> str | None:
    """The pattern's seam-tolerant form (SeamTolerant), or None when stdlib re cannot parse it."""
    try:
        tree = parsed(source)
    except (re.error, RecursionError):
        return None
    return SeamTolerant(tree).pattern(tree)
