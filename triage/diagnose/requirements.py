"""A rule's `require`: its one evaluator, for an event (the event's own numbers over its
run's facts, read name by name) and for a check or a rule's example (over the names given).
A condition that lacks a value does not hold, so a partial line never becomes a finding."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from triage.diagnose.facts import DEFAULTS, derive, derive_these
from triage.rules.expr import Expression, Missing
from triage.rules.ruleset import Rule


def met(condition: Expression | None, names: Mapping[str, Any]) -> bool:
    """The condition over names: none holds, one that lacks a value does not."""
    if condition is None:
        return True
    try:
        return bool(condition.evaluate(names))
    except Missing:
        return False


def derived_when_met(rule: Rule, names: dict[str, Any]) -> dict[str, Any] | None:
    """The rule's derived numbers over names when its `require` holds over names and them,
    else None. names gets the derived numbers too (the rule's words read them), and a Names
    remembers what the condition read (the facts a finding cites)."""
    derived = derive(rule, names)
    return derived if met(rule.require, names) else None


@dataclass(slots=True)
class Requirement:
    """A rule's `require` with the names it reads, worked out once per rule: each event's
    check then looks up those few names instead of merging every fact into a new dict."""

    condition: Expression | None
    names: tuple[str, ...]  # every name it reads, through the derived numbers it uses
    derived: tuple[tuple[str, Expression], ...]  # those derived numbers, in the rule's order
    facts: tuple[str, ...] | None  # the facts it reads; None: unknown (every event may wait for one)

    @classmethod
    def of(cls, rule: Rule, fact_names: set[str] | None = None) -> Requirement:
        """fact_names: every name a fact may set; without them no event is ever settled."""
        if rule.require is None:
            return cls(None, (), (), ())
        reads, todo = set(), list(rule.require.names)
        while todo:
            name = todo.pop()
            if name in rule.derived and name not in reads:
                todo.extend(rule.derived[name].names)
            reads.add(name)
        derived = tuple((name, expression) for name, expression in rule.derived.items() if name in reads)
        facts = None if fact_names is None else tuple(sorted((reads - set(rule.derived)) & fact_names))
        return cls(rule.require, tuple(sorted(reads)), derived, facts)

    def settled(self, fields: Mapping[str, Any]) -> bool:
        """No fact it reads can change the answer: the event's own numbers override them all."""
        if self.facts is None:
            return False
        for name in self.facts:
            if name not in fields:
                return False
        return True

    def holds(self, fields: Mapping[str, Any], facts: Mapping[str, Any]) -> bool:
        """met() over DEFAULTS, then the facts, then the event's fields."""
        names = {
            name: fields[name] if name in fields else facts.get(name, DEFAULTS.get(name)) for name in self.names
        }
        if self.derived:
            derive_these(self.derived, names)
        return met(self.condition, names)
