"""From events to findings: the numbers worked out, the cause and the fixes rendered.

A pure function of the events. Fact rules (capacity lines, the engine config
line) tell the diagnosis about the server; their numbers are available to every
finding's derived arithmetic and templates under the same names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from triage.expr import Missing, render
from triage.kvcache import DEFAULT_BLOCK_SIZE
from triage.ruleset import Rule, Step
from triage.types import Event, Finding

DEFAULTS: dict[str, Any] = {"block_size": DEFAULT_BLOCK_SIZE}
HOSTED_NOTE = (
    "This error came from a hosted API that uses the same wording as vLLM, not from a vLLM "
    "server: server flags do not apply; shorten the prompt or lower max_tokens."
)


@dataclass(slots=True)
class Diagnosis:
    findings: list[Finding]
    facts: dict[str, Any] = field(default_factory=dict)


def diagnose(events: Iterable[Event], keep_text: bool = False) -> Diagnosis:
    """keep_text: findings carry their record's full text (--show-text); off, because
    vLLM's log lines can quote whole prompts."""
    facts: dict[str, Any] = {}
    problems: list[Event] = []
    for event in events:
        if event.rule.kind == "fact":
            facts.update(event.fields)
            facts.update(derive(event.rule, _Names({**DEFAULTS, **facts})))
        else:
            problems.append(event)
    problems = [e for e in problems if meets_requirement(e.rule, {**DEFAULTS, **facts, **e.fields})]
    findings = [to_finding(event, facts, keep_text) for event in problems]
    return Diagnosis(aggregate(findings), facts)


def to_finding(event: Event, facts: Mapping[str, Any], keep_text: bool = False) -> Finding:
    rule: Rule = event.rule
    names = _Names({**DEFAULTS, **facts, **event.fields, "source": event.record.source})
    derived = derive(rule, names)
    cause = render_steps(rule.cause, names, hosted=event.hosted)
    fixes = render_steps(rule.fixes, names, hosted=event.hosted)
    if event.hosted:
        fixes.insert(0, HOSTED_NOTE)
    record = event.record
    return Finding(
        code=rule.code,
        name=rule.name,
        title=rule.title,
        stage=rule.stage,
        severity=rule.severity,
        source=record.source,
        line=record.line,
        excerpt=event.excerpt,
        fields=dict(event.fields),
        derived=derived,
        cause=cause,
        fixes=fixes,
        process=record.process,
        rank=record.rank,
        time=record.time,
        hosted=event.hosted,
        references=list(rule.references),
        facts={k: facts[k] for k in sorted(names.used) if k in facts and k not in event.fields},
        text=record.text if keep_text else None,
    )


def meets_requirement(rule: Rule, values: Mapping[str, Any]) -> bool:
    """A rule's `require` condition over its fields, derived numbers and facts; one that
    lacks a value does not hold, so a partial line never becomes a finding."""
    if rule.require is None:
        return True
    names = _Names(values)
    names.update(derive(rule, names))
    try:
        return bool(rule.require.evaluate(names))
    except Missing:
        return False


def derive(rule: Rule, names: _Names) -> dict[str, Any]:
    """Evaluate the rule's derived numbers in order; one that lacks an input is left out."""
    derived: dict[str, Any] = {}
    for name, expression in rule.derived.items():
        try:
            value = expression.evaluate(names)
        except Missing:
            continue
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            value = int(value)
        derived[name] = value
        names[name] = value
    return derived


def render_steps(steps: list[Step], names: Mapping[str, Any], hosted: bool = False) -> list[str]:
    rendered = []
    for step in steps:
        if hosted and step.server:
            continue
        try:
            if step.when is not None and not step.when.evaluate(names):
                continue
            rendered.append(render(step.text, names))
        except Missing:
            continue
    return rendered


def aggregate(findings: list[Finding]) -> list[Finding]:
    """Identical findings (same rule, source and numbers) become one with a count."""
    merged: dict[tuple, Finding] = {}
    for finding in findings:
        key = (finding.code, finding.source, tuple(sorted(finding.fields.items())), finding.hosted)
        first = merged.get(key)
        if first is None:
            merged[key] = finding
            continue
        first.count += 1
        first.last_line = finding.line
        first.last_time = finding.time
    return list(merged.values())


class _Names(dict):
    """The names a template may use; remembers which were read, to cite the facts used."""

    def __init__(self, *args: Any):
        super().__init__(*args)
        self.used: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        return super().get(key, default)
