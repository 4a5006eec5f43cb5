"""Capacity assertions over what a startup log says about the server (`vllm-triage gate`).

Pure functions of the facts, findings and run summary of one log's last run (the
deployment as the log leaves it; a restart's failed first run is history). Each assertion
is a rule of rules/gate.yaml (kind: gate: code, title, cause and fix templates) plus a small
function here that works out its numbers; a failed assertion becomes a Finding like any
rule's, so every format reports it, and a passed one a Check with the figures it compared.
An assertion whose number the log never states fails too: a gate that cannot see the
capacity must not pass it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from triage.diagnose.diagnoser import rule_finding
from triage.plan.kvcache import DEFAULT_BLOCK_SIZE, round_down
from triage.rules.ruleset import AUTO_FIT, GATE_CODES, Rule
from triage.model import Check, Finding, RunSummary, ScanResult

AUTO_FIT_RULE = AUTO_FIT  # its max_model_len is the window after auto-fit
FATAL_STAGES = ("startup", "config")  # an error finding here means the engine did not start
WHOLE_LOG = 1  # an assertion no line proves (the log never states the number) points at the log's start


@dataclass(frozen=True, slots=True)
class Judged:
    """An assertion's numbers, and whether they pass."""

    passed: bool
    numbers: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Ending:
    """How the judged run ended: its summary (outcome, first failure) and the log's last line."""

    run: RunSummary | None = None
    log_end: int | None = None


NO_ENDING = Ending()


@dataclass(frozen=True, slots=True)
class Thresholds:
    min_max_model_len: int | None = None
    min_concurrency: float | None = None
    max_kv_usage_at_start: float | None = None
    require_ready: bool = False


# The assertions, by code: their titles, causes and fixes are rules/gate.yaml's (kind: gate),
# loaded with every rule; here is how each one's numbers are worked out.
READY, WINDOW, CONCURRENCY, KV_USAGE = GATE_CODES


@functools.cache
def builtin_assertions() -> dict[str, Rule]:
    from triage.rules.ruleset import load_rules

    return assertions_of(load_rules(()).rules)


def assertions_of(rules: Sequence[Rule]) -> dict[str, Rule]:
    """The gate's rules among these, by code."""
    return {rule.code: rule for rule in rules if rule.kind == "gate"}


def checks_run(thresholds: Thresholds, assertions: Mapping[str, Rule] | None = None) -> list[Rule]:
    """The assertions the thresholds ask for, in code order. assertions: the gate's rules by
    code (default: the built-in ones)."""
    assertions = builtin_assertions() if assertions is None else assertions
    wanted = {
        READY: thresholds.require_ready,
        WINDOW: thresholds.min_max_model_len is not None,
        CONCURRENCY: thresholds.min_concurrency is not None,
        KV_USAGE: thresholds.max_kv_usage_at_start is not None,
    }
    return [assertions[code] for code in sorted(wanted) if wanted[code]]


# --- the numbers ------------------------------------------------------------------------


def served_window(facts: Mapping[str, Any], findings: Sequence[Finding]) -> tuple[int | None, str, Finding | None]:
    """The max_model_len the server serves, the line that says so, and the auto-fit finding if any.

    The 'Maximum concurrency for N tokens' line is printed after the KV cache is sized, so it
    already holds any auto-fit; then the auto-fit line; then the configured window."""
    auto_fit = next((f for f in findings if f.name == AUTO_FIT_RULE and "max_model_len" in f.fields), None)
    if facts.get("concurrency_tokens"):
        return int(facts["concurrency_tokens"]), "'Maximum concurrency for N tokens'", auto_fit
    if auto_fit is not None:
        return int(auto_fit.fields["max_model_len"]), "auto-fit", auto_fit
    if facts.get("max_model_len"):
        return int(facts["max_model_len"]), "'Using max model len' or engine config", None
    return None, "", None


def concurrency_at_full_length(facts: Mapping[str, Any], window: int | None) -> float | None:
    """vLLM's own figure when it printed one, else KV-cache tokens over the window."""
    if facts.get("concurrency") is not None:
        return float(facts["concurrency"])
    if facts.get("kv_tokens") and window:
        return round(facts["kv_tokens"] / window, 2)
    return None


def startup_errors(findings: Sequence[Finding]) -> list[Finding]:
    return sorted(
        (f for f in findings if f.severity == "error" and f.stage in FATAL_STAGES),
        key=lambda f: f.line,
    )


def ready_numbers(facts: Mapping[str, Any], findings: Sequence[Finding], thresholds: Thresholds,
                  ending: Ending = NO_ENDING) -> Judged | None:
    """Ready means the run's outcome is ready (a failure after it is the runtime's) and no
    startup or config error: else the first process to fail and its error, or where the log
    ends when nothing failed."""
    if not thresholds.require_ready:  # not asked for: it cannot fail
        return None
    errors = startup_errors(findings)
    run = ending.run
    ready_line = (run.outcome_line or 0) if run is not None and run.outcome == "ready" else 0
    if run is None and facts.get("ready"):
        ready_line = WHOLE_LOG  # facts alone say it got ready, not where
    numbers: dict[str, Any] = {"ready_line": ready_line, "startup_errors": len(errors)}
    if ready_line and not errors:
        return Judged(True, numbers)
    if errors:
        numbers.update(first_error_code=errors[0].code, first_error_line=errors[0].line)
    first = run.first_failure if run is not None else None
    if first is not None and first.stage == "startup":
        numbers.update(
            root_process=first.process or "the untagged main process", root_line=first.line,
            root_error_line=first.error_line, root_error=first.error, consequences=len(run.consequences),  # type: ignore[union-attr]
            root_died=int(first.died),
        )
    elif not ready_line and not errors and ending.log_end:
        numbers["log_end"] = ending.log_end
    return Judged(False, numbers)


def window_numbers(facts: Mapping[str, Any], findings: Sequence[Finding], thresholds: Thresholds,
                   ending: Ending = NO_ENDING) -> Judged | None:
    required = thresholds.min_max_model_len
    if required is None:  # not asked for: it cannot fail
        return None
    served, window_from, auto_fit = served_window(facts, findings)
    numbers: dict[str, Any] = {"min_max_model_len": required, "served_known": int(served is not None)}
    if served is not None:
        numbers.update(served_max_model_len=served, window_from=window_from)
        if served >= required:
            return Judged(True, {**numbers, "spare_tokens": served - required})
        numbers["shortfall_tokens"] = required - served
    if auto_fit is not None and auto_fit.fields.get("user_max_model_len"):
        numbers["auto_fit_from"] = auto_fit.fields["user_max_model_len"]
    if facts.get("kv_tokens"):
        numbers["kv_tokens"] = facts["kv_tokens"]
    return Judged(False, numbers)


def concurrency_numbers(facts: Mapping[str, Any], findings: Sequence[Finding], thresholds: Thresholds,
                        ending: Ending = NO_ENDING) -> Judged | None:
    required = thresholds.min_concurrency
    if required is None:
        return None
    window, _, _ = served_window(facts, findings)
    concurrency = concurrency_at_full_length(facts, window)
    numbers: dict[str, Any] = {"min_concurrency": required, "concurrency_known": int(concurrency is not None)}
    if concurrency is not None:
        numbers["concurrency"] = concurrency
    if window:
        numbers["window_tokens"] = window
    kv_tokens = facts.get("kv_tokens")
    if kv_tokens and window:
        numbers.update(kv_tokens=kv_tokens, kv_tokens_needed=math.ceil(required * window))
    if concurrency is not None and concurrency >= required:
        return Judged(True, {**numbers, "spare_concurrency": round(concurrency - required, 2)})
    if kv_tokens and window:
        block_size = int(facts.get("block_size") or DEFAULT_BLOCK_SIZE)
        numbers["window_for_min_concurrency"] = round_down(kv_tokens / required, block_size) if required > 0 else 0
    return Judged(False, numbers)


def kv_usage_numbers(facts: Mapping[str, Any], findings: Sequence[Finding], thresholds: Thresholds,
                     ending: Ending = NO_ENDING) -> Judged | None:
    allowed = thresholds.max_kv_usage_at_start
    if allowed is None:
        return None
    usage = facts.get("kv_usage_at_start_pct")
    numbers: dict[str, Any] = {"max_kv_usage_at_start": allowed, "usage_known": int(usage is not None)}
    if usage is not None:
        numbers["kv_usage_at_start_pct"] = usage
        if usage <= allowed:
            return Judged(True, {**numbers, "spare_pct": round(allowed - usage, 2)})
    window, _, _ = served_window(facts, findings)
    concurrency = concurrency_at_full_length(facts, window)
    if concurrency is not None and window:
        numbers.update(concurrency=concurrency, window_tokens=window)
    return Judged(False, numbers)


Judge = Callable[[Mapping[str, Any], Sequence[Finding], Thresholds, Ending], Judged | None]
NUMBERS: dict[str, Judge] = {
    READY: ready_numbers,
    WINDOW: window_numbers,
    CONCURRENCY: concurrency_numbers,
    KV_USAGE: kv_usage_numbers,
}
# Numbers that say how the rest were found, not what the server has: kept out of `fields`.
FLAGS = {"ready_line", "served_known", "concurrency_known", "usage_known"}
COMPUTED = {"shortfall_tokens", "kv_tokens_needed", "window_for_min_concurrency"}


# --- findings ---------------------------------------------------------------------------


def evaluate(
    source: str, facts: Mapping[str, Any], findings: Sequence[Finding], thresholds: Thresholds,
    fact_lines: Mapping[str, tuple[str, int]] | None = None, assertions: Mapping[str, Rule] | None = None,
    ending: Ending = NO_ENDING,
) -> list[Finding]:
    """A finding for each assertion that fails, in code order, at the line of the number it
    judged (see checked())."""
    return failures(checked(source, facts, findings, thresholds, fact_lines, assertions, ending))


def failures(judged: Sequence[tuple[Rule, Check]]) -> list[Finding]:
    """The finding of each check that did not pass, in the order judged."""
    return [to_finding(rule, check) for rule, check in judged if not check.passed]


def checked(
    source: str, facts: Mapping[str, Any], findings: Sequence[Finding], thresholds: Thresholds,
    fact_lines: Mapping[str, tuple[str, int]] | None = None, assertions: Mapping[str, Rule] | None = None,
    ending: Ending = NO_ENDING,
) -> list[tuple[Rule, Check]]:
    """Each assertion asked for, in code order, with its rule: passed or not, its numbers and
    the line that states them. fact_lines: fact name -> (source, line) that set it; by default
    the lines the facts carry (facts.Facts). assertions: the gate's rules by code (default:
    the built-in ones). ending: the run's summary and the log's last line, for --require-ready."""
    if fact_lines is None:
        fact_lines = getattr(facts, "lines", {})
    judged = []
    for rule in checks_run(thresholds, assertions):
        verdict = NUMBERS[rule.code](facts, findings, thresholds, ending)
        if verdict is not None:
            line = evidence_line(rule, verdict.numbers, facts, fact_lines, findings)
            judged.append((rule, Check(rule.code, rule.name, verdict.passed, source, line, verdict.numbers)))
    return judged


def gate_log(
    result: ScanResult, name: str, thresholds: Thresholds, assertions: Mapping[str, Rule] | None = None,
) -> tuple[list[Finding], list[Check]]:
    """The gate over one scanned input: its last run's summary, facts and findings (scan's
    own runs), and where the log ends. The failed assertions' findings, and every check."""
    runs = [run.summary for run in result.runs.get(name, ()) if run.summary is not None]
    run = runs[-1] if runs else None
    facts: Mapping[str, Any] = result.facts.get(name, {})
    fact_lines: Mapping[str, tuple[str, int]] | None = None
    findings = [f for f in result.findings if f.source == name]
    if run is not None:
        facts = run.facts
        fact_lines = {fact: (name, line) for fact, line in run.fact_lines.items()}
        findings = [f for f in findings if f.run == run.number]
    ending = Ending(run, result.line_counts.get(name))
    judged = checked(name, facts, findings, thresholds, fact_lines, assertions, ending)
    return failures(judged), [check for _, check in judged]


def evidence_line(
    check: Rule, numbers: Mapping[str, Any], facts: Mapping[str, Any],
    fact_lines: Mapping[str, tuple[str, int]], findings: Sequence[Finding],
) -> int:
    """The line that states the number the assertion judged; the log's start when none does."""
    if check.code == READY:
        for name in ("root_error_line", "first_error_line", "log_end", "ready_line"):
            if numbers.get(name):
                return int(numbers[name])
        return WHOLE_LOG
    if check.code == WINDOW:
        return window_line(numbers.get("served_max_model_len"), facts, fact_lines, findings)
    for name in evidence_facts(check, numbers, facts):
        if name in fact_lines:
            return fact_lines[name][1]
    return WHOLE_LOG


def window_line(
    served: int | None, facts: Mapping[str, Any], fact_lines: Mapping[str, tuple[str, int]], findings: Sequence[Finding],
) -> int:
    """The line that set max_model_len to the served window (a fact line or the auto-fit
    line), else the 'Maximum concurrency for N tokens' line that states it."""
    if not served:
        return WHOLE_LOG
    if facts.get("max_model_len") == served and "max_model_len" in fact_lines:
        return fact_lines["max_model_len"][1]
    auto_fit = next((f for f in findings if f.name == AUTO_FIT_RULE and f.fields.get("max_model_len") == served), None)
    if auto_fit is not None:
        return auto_fit.line
    if facts.get("concurrency_tokens") == served and "concurrency_tokens" in fact_lines:
        return fact_lines["concurrency_tokens"][1]
    return WHOLE_LOG


def evidence_facts(check: Rule, numbers: Mapping[str, Any], facts: Mapping[str, Any]) -> list[str]:
    """The facts that gave the judged number, the best witness first."""
    if check.code == CONCURRENCY and numbers.get("concurrency_known"):
        return ["concurrency"] if facts.get("concurrency") is not None else ["kv_tokens"]
    if check.code == KV_USAGE and numbers.get("usage_known"):
        return ["kv_usage_at_start_pct"]
    return []


def to_finding(rule: Rule, check: Check) -> Finding:
    numbers = check.figures
    return rule_finding(
        rule, numbers, source=check.source, line=check.line, excerpt="",
        fields={k: v for k, v in numbers.items() if k not in FLAGS | COMPUTED},
        derived={k: v for k, v in numbers.items() if k in COMPUTED},
    )
