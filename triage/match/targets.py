"""What the matcher tries on a candidate line (a pattern and the forms it is tried in, the
selection a line's anchors make) and what it keeps between lines of one input."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from triage.match.loose import LoosePattern, loose_form_of
from triage.model import Event
from triage.rules.ruleset import Pattern, Rule

RECENT_STARTS = 32  # lines that began an event, kept for the second try's de-duplication (up to twice as many)
NOT_SHARED: tuple[int, frozenset[str]] = (0, frozenset())  # no line whose findings are another message beside a reading


@dataclass(slots=True)
class Cursor:
    """Line numbering and de-duplication across the chunks of one input."""

    consumed_until: int = 0  # last line already used by a joined (wrapped) match
    # (line, rule) of the events of the last candidate lines that had any: marking them is an
    # append (every metrics line does it); they are indexed by line only when asked (a wrapped
    # window or a second try, a few lines in a log). Not the events: they hold their line's text
    recent: deque[list[tuple[int, Rule]]] = field(default_factory=lambda: deque(maxlen=2 * RECENT_STARTS))
    warnings: list[str] = field(default_factory=list)
    _marks: int = 0  # events lists appended so far
    _indexed: int = -1  # _marks when _index was built
    _index: dict[int, set[tuple[str, bool]]] = field(default_factory=dict)

    def mark(self, events: list[Event]) -> None:
        if events:
            marked = []
            for event in events:  # (a loop, not a comprehension: that is a call of its own here)
                marked.append((event.record.line, event.rule))
            self.recent.append(marked)
            self._marks += 1

    def _started(self) -> dict[int, set[tuple[str, bool]]]:
        """Recent lines that began an event: (rule, finding) for each."""
        if self._indexed != self._marks:
            self._index = {}
            for marked in self.recent:
                for line, rule in marked:
                    self._index.setdefault(line, set()).add((rule.code, rule.kind == "finding"))
            self._indexed = self._marks
        return self._index

    def began(self, event: Event) -> bool:
        """This rule's event already began on the event's first line: the same message again."""
        return (event.rule.code, event.rule.kind == "finding") in self._started().get(event.record.line, ())

    def taken(self, first: int, last: int, code: str, shared: tuple[int, frozenset[str]] = NOT_SHARED) -> bool:
        """Lines first..last hold the start of another finding, or of this rule: the loose form
        must not read a message again, nor run over one (a fact inside it, a config key, may).
        shared: a line and the findings on it that are another message beside this one."""
        beside_line, beside = shared
        started = self._started()
        return any(
            finding and not (line == beside_line and seen in beside) or seen == code
            for line in range(first, last + 1) for seen, finding in started.get(line, ())
        )


@dataclass(slots=True)
class Target:
    """One pattern of one rule as the matcher tries it, with what it makes of it on first use."""

    rule: Rule
    rule_index: int
    pattern: Pattern
    pattern_index: int
    needs: frozenset[bytes]  # anchors a line holds all of when it matches alone; empty: keywords, any one
    builtin: bool  # a built-in pattern: tested to match alike with stdlib re
    reads_ahead: bool  # a fact with groups in a lookahead: those may run to where the text was cut
    search: Any = None  # text -> match or None, bounded in time; made on first use
    read_fields: Any = None  # its groupdict -> typed fields, made on its first match
    loose: LoosePattern | None | bool = False  # its paste-tolerant form, derived on first need (None: none)

    def loose_form(self) -> LoosePattern | None:
        """Its paste-tolerant form (None: its head is too short to tell it from prose)."""
        if self.loose is False:
            self.loose = loose_form_of(self.pattern.compiled.pattern)
        return self.loose if isinstance(self.loose, LoosePattern) else None


@dataclass(slots=True)
class Selection:
    """The patterns to try on a candidate line, from the anchors it holds."""

    every: list[Target]  # any of its anchors is there: it may match a message wrapped over lines
    alone: list[Target]  # all of its anchors are there: it may match the line on its own
    hosted: bool  # some are request rules: a hosted API may have sent their message
    loose: list[Target] = field(default_factory=list)  # the second try on damaged text (findings; a paste's sweep adds more)
    records: list[Target] = field(default_factory=list)  # facts, read over their whole record when it is wrapped
