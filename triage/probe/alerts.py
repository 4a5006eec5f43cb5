"""Alerting rules for a fleet, made from the rules this tool already has.

- Prometheus: the runtime signals vLLM's metrics show (preemptions, a full KV cache while
  requests wait, refused requests where the HTTP metrics exist), each tied to the rule
  that diagnoses the same thing in a log (its code, title and fixes as annotations).
- Loki: one LogQL alert per log rule whose patterns have literal anchors (the texts the
  anchor pass looks for first): every anchor of a pattern is a line filter, the patterns
  of a rule are joined with `or`. Left out: informational rules, rules whose patterns lack
  good anchors, rules whose finding depends on the line's numbers (`require`), and any
  pattern whose filters all appear in one of the rule's counter-examples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from triage.diagnose.diagnoser import render_steps
from triage.match.anchors import anchors_for, needs_keywords, required_runs
from triage.probe import queries
from triage.rules.ruleset import Rule, RuleSet

LOKI_WINDOW = "5m"
DEFAULT_LOKI_SELECTOR = '{job="vllm"}'


@dataclass(frozen=True, slots=True)
class MetricSignal:
    code: str  # the rule that diagnoses the same thing from a log
    build: Any  # selector -> PromQL
    for_: str
    summary: str  # Prometheus's template syntax: {{ $labels.x }}, {{ $value }}
    advice: str = ""  # what to do that the log rule's fixes do not say


METRIC_SIGNALS = (
    MetricSignal("VT301", queries.alert_preemptions, "5m",
                 "{{ $labels.instance }} ({{ $labels.model_name }}): {{ $value }} preemptions in 10 minutes"),
    MetricSignal("VT303", queries.alert_saturated, "5m",
                 "{{ $labels.instance }} ({{ $labels.model_name }}): the KV cache is full and requests wait"),
    MetricSignal("VT101", queries.alert_refused, "5m",
                 "{{ $labels.instance }}: {{ $value }} client errors (4xx) on the completion endpoints in 10 minutes",
                 "4xx holds every client error; vLLM 0.18-0.25 count these 400s as 5xx. Size the window from the "
                 "workload: vllm-triage probe URL --log server.log."),
)


def alert_name(rule: Rule) -> str:
    """kv-cache-preemption -> VllmKvCachePreemption (alert names are metric-name-like)."""
    return "Vllm" + "".join(part.capitalize() for part in rule.name.split("-"))


def fix_text(rule: Rule) -> str:
    """The rule's fixes that need no figures of a particular log."""
    return " ".join(render_steps(rule.fixes, {})) or f"vllm-triage rules show {rule.code}"


def alert_annotations(rule: Rule, summary: str, advice: str = "") -> dict[str, str]:
    return {"code": rule.code, "title": rule.title, "summary": summary, "fix": " ".join(filter(None, [fix_text(rule), advice])),
            "runbook": f"vllm-triage rules show {rule.code}"}


def prometheus_rules(ruleset: RuleSet, selector: str = "") -> list[dict[str, Any]]:
    rules = []
    for signal in METRIC_SIGNALS:
        rule = ruleset.by_code(signal.code)
        if rule is None:
            continue
        rules.append({
            "alert": alert_name(rule), "expr": signal.build(selector), "for": signal.for_,
            "labels": {"severity": rule.severity, "code": rule.code},
            "annotations": alert_annotations(rule, signal.summary, signal.advice),
        })
    return rules


def logql_string(text: str) -> str:
    """A LogQL string literal: a raw `...` string unless the text holds a backtick."""
    if "`" not in text:
        return f"`{text}`"
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def pattern_anchors(rule: Rule) -> list[list[str]]:
    """The line filters of each of the rule's vLLM patterns (hosted-API wordings left out):
    each anchor widened to the literal run of the regex that holds it (every match holds
    the whole run; it reads better than the piece the anchor pass picked). Empty when a
    pattern has no good anchors: it would need the regex, not line filters."""
    found: list[list[str]] = []
    for pattern in rule.patterns:
        if pattern.hosted:
            continue
        source = pattern.compiled.pattern
        anchors = anchors_for(source)
        if needs_keywords(anchors):
            return []
        runs = required_runs(source) or []
        widened: list[str] = []
        for anchor in anchors.anchors:
            run = max((r for r in runs if anchor in r), key=len, default=anchor).strip()
            if run not in widened:
                widened.append(run)
        if widened not in found and not any(all(f in text for f in widened) for text in rule.counter_examples):
            found.append(widened)  # a counter-example that holds every filter: the numbers decide, not the text
    return found


def loki_expr(anchor_sets: list[list[str]], selector: str) -> str:
    clauses = []
    for anchors in anchor_sets:
        filters = " ".join(f"|= {logql_string(anchor)}" for anchor in anchors)
        clauses.append(f"sum by (job, instance) (count_over_time({selector} {filters} [{LOKI_WINDOW}])) > 0")
    return " or ".join(clauses)


def loki_rules(ruleset: RuleSet, selector: str = DEFAULT_LOKI_SELECTOR) -> list[dict[str, Any]]:
    rules = []
    for rule in ruleset.rules:
        if rule.kind != "finding" or rule.severity == "info" or rule.require is not None:
            continue  # a `require` weighs the line's numbers (usage >= 95%): no line filter can
        anchor_sets = pattern_anchors(rule)
        if not anchor_sets:
            continue
        summary = f"{{{{ $labels.instance }}}}: {{{{ $value }}}} log lines of {rule.code} in {LOKI_WINDOW}"
        rules.append({
            "alert": alert_name(rule), "expr": loki_expr(anchor_sets, selector),
            "labels": {"severity": rule.severity, "code": rule.code},
            "annotations": alert_annotations(rule, summary),
        })
    return rules
