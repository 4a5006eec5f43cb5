"""Formatting for `rules list`, `rules show`, `rules test` and `explain`. Nothing here matches or computes."""

from __future__ import annotations

import io
import json
import shutil
import textwrap
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from triage.plan.explain import KV_CACHE, KNOBS, Knob

if TYPE_CHECKING:
    from triage.rules.ruleset import Rule
    from triage.rules.ruletest import Outcome

LIST_COLUMNS = ("code", "name", "stage", "severity", "title")
TEXT_WIDTH = 110
TABLE_WIDTH = 120  # narrower terminals get the knobs as a list: four columns broke identifiers


# --- rules list ------------------------------------------------------------------------


def rule_summary(rule: Rule) -> dict[str, Any]:
    return {"code": rule.code, "name": rule.name, "stage": rule.stage, "severity": rule.severity,
            "kind": rule.kind, "title": rule.title}


def rules_list(rules: list[Rule], format_name: str) -> str:
    if format_name == "json":
        return json.dumps([rule_summary(r) for r in sorted(rules, key=lambda r: r.code)], indent=2, ensure_ascii=False) + "\n"
    rules = sorted(rules, key=lambda r: r.code)
    rows = [[getattr(r, c) for c in LIST_COLUMNS] for r in rules]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(LIST_COLUMNS)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(LIST_COLUMNS, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.append(f"{len(rules)} rules")
    return "\n".join(lines) + "\n"


# --- rules show ------------------------------------------------------------------------


def rule_detail(rule: Rule) -> dict[str, Any]:
    example = rule.examples[0].text if rule.examples else ""
    return {
        **rule_summary(rule),
        "description": rule.description,
        "versions": rule.versions,
        "patterns": [{"id": p.id, "versions": p.versions, "hosted": p.hosted} for p in rule.patterns],
        "require": rule.require.source if rule.require else None,
        "cause": [_step(s) for s in rule.cause],
        "fixes": [_step(s) for s in rule.fixes],
        "example": example,
        "references": list(rule.references),
        "deprecated_by": rule.deprecated_by,
        "file": rule.file,
        "line": rule.line,
    }


def _step(step) -> dict[str, Any]:
    return {"text": step.text, "when": step.when.source if step.when else None, "server": step.server}


def rule_show(rule: Rule, format_name: str) -> str:
    detail = rule_detail(rule)
    if format_name == "json":
        return json.dumps(detail, indent=2, ensure_ascii=False) + "\n"
    lines = [f"{rule.code} {rule.name} [{rule.stage}, {rule.severity}{', fact' if rule.kind == 'fact' else ''}]",
             rule.title, ""]
    if rule.deprecated_by:
        lines += [f"Deprecated: use {rule.deprecated_by}.", ""]
    lines += _section("What it means", [rule.description or rule.title])
    lines += _section("Why it happens", [_condition(s) for s in detail["cause"]])
    lines += _section("How to fix", [f"{n}. {_condition(s)}" for n, s in enumerate(detail["fixes"], 1)])
    if detail["require"]:
        lines += _section("Fires only when", [detail["require"]])
    lines += _section("Example", [detail["example"]] if detail["example"] else [])
    covered = [f"{p['id']}: {p['versions'] or 'all versions'}{' (hosted APIs)' if p['hosted'] else ''}"
               for p in detail["patterns"]]
    lines += _section(f"vLLM versions ({rule.versions or 'see patterns'})", covered)
    lines += _section("References", detail["references"])
    lines.append(f"Defined in {rule.file}:{rule.line}")
    return "\n".join(lines) + "\n"


def _condition(step: dict[str, Any]) -> str:
    text = step["text"]
    if step["when"]:
        text += f"  [when {step['when']}]"
    if step["server"]:
        text += "  [server flag: not shown for hosted APIs]"
    return text


def _section(title: str, items: list[str]) -> list[str]:
    if not items:
        return []
    return [f"{title}:", *(f"  {item}" for item in items), ""]


# --- rules test ------------------------------------------------------------------------


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' if number != 1 else ''}"


def test_outcome(outcome: Outcome) -> str:
    counted = (f"{_count(outcome.rules, 'rule')}, {_count(outcome.examples, 'example')}, "
               f"{_count(outcome.markers, 'marker')} in {_count(outcome.fixtures, 'fixture')}")
    if outcome.passed:
        return f"rules test: all passed ({counted})\n"
    lines = []
    for failure in outcome.failures:
        lines.append(f"FAIL {failure.where}  {failure.rule}: {failure.problem}")
        if failure.expected is not None or failure.got is not None:
            lines.append(f"  - expected: {failure.expected}")
            lines.append(f"  + got:      {failure.got}")
    lines.append(f"rules test: {len(outcome.failures)} failure{'s' if len(outcome.failures) != 1 else ''} ({counted})")
    return "\n".join(lines) + "\n"


# --- explain ---------------------------------------------------------------------------


def knob_dict(knob: Knob, titles: dict[str, str]) -> dict[str, Any]:
    return {
        "topic": knob.topic, "title": knob.title, "set_where": knob.set_where, "limits": knob.limits,
        "when_exceeded": knob.when_exceeded, "notes": knob.notes,
        "rules": [{"code": c, "title": titles.get(c, "")} for c in knob.rules],
    }


def explain_all(titles: dict[str, str], format_name: str) -> str:
    if format_name == "json":
        document = {"knobs": [knob_dict(k, titles) for k in KNOBS], "kv_cache": knob_dict(KV_CACHE, titles)}
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    tail = (f"\nAnd the one that decides them all: KV-cache memory. {KV_CACHE.set_where} "
            f"{KV_CACHE.notes} (vllm-triage explain {KV_CACHE.topic})\n")
    if format_name != "rich" or _width() < TABLE_WIDTH:
        return _knob_list() + _wrap(tail, format_name)
    table = Table(title="The five knobs that bound a request's length", show_lines=True, expand=True)
    table.add_column("knob", width=28, overflow="fold")  # the longest flag name stays whole
    for column in ("set where", "limits", "when exceeded"):
        table.add_column(column, ratio=1 if column == "limits" else 2, overflow="fold")
    for knob in KNOBS:
        table.add_row(f"{knob.title}\n(explain {knob.topic})", knob.set_where, knob.limits, knob.when_exceeded)
    return _render(table, format_name) + _wrap(tail, format_name)


def _knob_list() -> str:
    """The knobs one under another (a table's narrow columns broke identifiers: --max-model-l/en.)."""
    lines = ["The five knobs that bound a request's length", ""]
    for knob in KNOBS:
        lines.append(f"{knob.title} (vllm-triage explain {knob.topic})")
        for label, text in (("set where", knob.set_where), ("limits", knob.limits), ("when exceeded", knob.when_exceeded)):
            lines.append(f"  {label}: {text}")
        lines.append("")
    return _wrap("\n".join(lines), "text", hanging="    ")


def explain_topic(knob: Knob, titles: dict[str, str], format_name: str) -> str:
    if format_name == "json":
        return json.dumps(knob_dict(knob, titles), indent=2, ensure_ascii=False) + "\n"
    lines = [knob.title, ""]
    lines += _section("Set where", [knob.set_where])
    lines += _section("Limits", [knob.limits])
    lines += _section("When exceeded", [knob.when_exceeded])
    lines += _section("Good to know", [knob.notes])
    if knob is not KV_CACHE:
        lines += _section("What decides it", [f"KV-cache memory. {KV_CACHE.notes} (vllm-triage explain {KV_CACHE.topic})"])
    lines += _section("Related rules (vllm-triage rules show CODE)",
                      [f"{c}  {titles.get(c, '(not in this rule set)')}" for c in knob.rules])
    return _wrap("\n".join(lines).rstrip() + "\n", format_name)


def _width() -> int:
    return min(shutil.get_terminal_size((TEXT_WIDTH, 24)).columns, 140)


def _render(renderable, format_name: str) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=format_name == "rich", no_color=format_name != "rich",
                      width=_width(), highlight=False)
    console.print(renderable)
    return buffer.getvalue()


def _wrap(text: str, format_name: str, hanging: str | None = None) -> str:
    """Long paragraphs wrapped to the width at spaces only (a flag such as --max-model-len is
    never split), continuation lines under the text (hanging: their indent, if given)."""
    width = _width()
    out = []
    for line in text.split("\n"):
        indent = line[: len(line) - len(line.lstrip())]
        under = hanging if hanging is not None and indent else indent + ("   " if line.lstrip()[:1].isdigit() else "")
        out.append(textwrap.fill(line, width, subsequent_indent=under, break_long_words=False, break_on_hyphens=False)
                   if len(line) > width else line)
    return "\n".join(out)
