"""Run every rule against its own examples: what must match, with which numbers, and what must not."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from triage.diagnose import _Names, DEFAULTS, derive
from triage.matcher import Matcher
from triage.ruleset import Rule, RuleSet


@dataclass(slots=True)
class Failure:
    rule: str
    where: str  # "example 2", "counter-example 1", or "file:line"
    problem: str

    def __str__(self) -> str:
        return f"{self.rule} {self.where}: {self.problem}"


def check_examples(ruleset: RuleSet) -> list[Failure]:
    failures: list[Failure] = []
    for rule in ruleset.rules:
        matcher = Matcher(ruleset, [rule])
        for number, example in enumerate(rule.examples, 1):
            failures.extend(_check_match(matcher, rule, number, example))
        for number, text in enumerate(rule.counter_examples, 1):
            if matcher.scan_text("example", text):
                failures.append(Failure(rule.code, f"counter-example {number}", f"matched but must not: {text[:100]!r}"))
    return failures


def _check_match(matcher: Matcher, rule: Rule, number: int, example) -> list[Failure]:
    where = f"example {number}"
    events = matcher.scan_text("example", example.text)
    if not events:
        return [Failure(rule.code, where, f"did not match: {example.text[:100]!r}")]
    event = events[0]
    failures = [
        Failure(rule.code, where, f"field {name}: expected {want!r}, got {event.fields.get(name)!r}")
        for name, want in example.fields.items()
        if not _same(event.fields.get(name), want)
    ]
    derived = derive(rule, _Names({**DEFAULTS, **event.fields}))
    failures += [
        Failure(rule.code, where, f"derived {name}: expected {want!r}, got {derived.get(name)!r}")
        for name, want in example.derived.items()
        if not _same(derived.get(name), want)
    ]
    return failures


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) or isinstance(got, float):
        try:
            return abs(float(got) - float(want)) <= 1e-6 * max(1.0, abs(float(want)))
        except (TypeError, ValueError):
            return False
    if isinstance(want, (int, bool)) or want is None:
        return got == want
    return str(got) == str(want)
