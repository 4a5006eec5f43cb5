"""What the matcher tries on a record: a pattern and the forms it is tried in, and the selection
the anchors a record holds make."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from triage.match.loose import LoosePattern, loose_form_of
from triage.rules.ruleset import Pattern, Rule

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
    seam_search: Any = None  # (text, pos) -> match or None, of its seam-tolerant form (rows joined); made on first use
    read_fields: Any = None  # its groupdict -> typed fields, made on its first match
    loose: LoosePattern | None | bool = False  # its paste-tolerant form, derived on first need (None: none)

    @property
    def anchored(self) -> bool:
        """The pattern is tied to a row's start or end (^, $): rows joined may not read it."""
        source = self.pattern.compiled.pattern
        return "^" in source or "$" in source

    def loose_form(self) -> LoosePattern | None:
        """Its paste-tolerant form (None: its head is too short to tell it from prose)."""
        if self.loose is False:
            self.loose = loose_form_of(self.pattern.compiled.pattern)
        return self.loose if isinstance(self.loose, LoosePattern) else None


@dataclass(slots=True)
class Selection:
    """The patterns to try on a record, from the anchors it holds, in rule-file order."""

    every: list[Target]  # any of its anchors is there: it may match a message wrapped over rows
    alone: list[Target]  # all of its anchors are there: it may match a row on its own
    hosted: bool  # some are request rules: a hosted API may have sent their message
    findings: list[Target]  # the finding rules among them: tried in the loose form where the exact patterns fail
