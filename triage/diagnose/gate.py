"""Capacity assertions over what a startup log says about the server (`vllm-triage gate`).

Pure functions of the facts and findings of one log. Each assertion is data (a Check:
code, title, cause and fix templates) plus a small function that works out its numbers;
a failed assertion becomes a Finding like any rule's, so every format reports it. An
assertion whose number the log never states fails too: a gate that cannot see the
capacity must not pass it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from triage.diagnose.diagnoser import render_steps
from triage.rules.expr import Expression
from triage.plan.kvcache import DEFAULT_BLOCK_SIZE, round_down
from triage.rules.ruleset import Step
from triage.model import Finding

AUTO_FIT_RULE = "max-model-len-auto-reduced"  # its max_model_len is the window after auto-fit
FATAL_STAGES = ("startup", "config")  # an error finding here means the engine did not start
WHOLE_LOG = 1  # an assertion no line proves (the log never states the number) points at the log's start


@dataclass(frozen=True, slots=True)
class Thresholds:
    min_max_model_len: int | None = None
    min_concurrency: float | None = None
    max_kv_usage_at_start: float | None = None
    require_ready: bool = False


@dataclass(slots=True)
class Check:
    """One assertion, described like a rule so SARIF and JUnit can list it."""

    code: str
    name: str
    title: str
    stage: str
    description: str
    option: str
    cause: list[Step]
    fixes: list[Step]
    severity: str = "error"
    kind: str = "gate"
    references: list[str] = field(default_factory=list)


def _step(text: str, when: str | None = None) -> Step:
    return Step(" ".join(text.split()), Expression(when) if when else None)


READY = Check(
    code="VT801",
    name="server-not-ready",
    title="The server did not reach ready",
    stage="startup",
    option="--require-ready",
    description=(
        "The log must show the API server ready ('Starting vLLM API server' or uvicorn's "
        "'Application startup complete') and no startup or config error."
    ),
    cause=[
        _step(
            "The log has no 'Starting vLLM API server' or 'Application startup complete' line: the "
            "server never got ready, or the log was saved before it did.",
            "ready_line == 0",
        ),
        _step(
            "The log shows {startup_errors} startup error finding(s); the first, {first_error_code}, is at "
            "line {first_error_line}.",
            "startup_errors > 0",
        ),
    ],
    fixes=[
        _step("Fix {first_error_code} first: its own finding in this report gives the numbers and the fix.", "startup_errors > 0"),
        _step(
            "Save the log only once the server answers (poll GET /health until it returns 200), so the "
            "ready line is in it.",
            "ready_line == 0 and startup_errors == 0",
        ),
    ],
)

WINDOW = Check(
    code="VT802",
    name="served-window-too-short",
    title="The server serves a shorter window than required",
    stage="config",
    option="--min-max-model-len",
    description=(
        "The window the server actually serves (max_model_len after derivation and auto-fit, as the "
        "'Maximum concurrency for N tokens', auto-fit, 'Using max model len' or engine config line "
        "states it) must be at least --min-max-model-len tokens: requests longer than it are refused."
    ),
    cause=[
        _step(
            "The server serves {served_max_model_len:,} tokens (from the {window_from} line), "
            "{shortfall_tokens:,} fewer than the required {min_max_model_len:,}.",
            "served_known == 1",
        ),
        _step("vLLM's auto-fit cut the window from {auto_fit_from:,} to fit the KV cache.", "auto_fit_from > 0"),
        _step(
            "The log states no served window (no 'Maximum concurrency for N tokens', auto-fit, 'Using max "
            "model len' or engine config line), so it cannot show {min_max_model_len:,} tokens are served.",
            "served_known == 0",
        ),
    ],
    fixes=[
        _step(
            "The KV cache holds {kv_tokens:,} tokens, enough for one request of {min_max_model_len:,}: "
            "start vLLM with --max-model-len {min_max_model_len:d} (if the model's config.json allows it).",
            "kv_tokens >= min_max_model_len",
        ),
        _step(
            "The KV cache holds only {kv_tokens:,} tokens, fewer than {min_max_model_len:,}: give it more "
            "memory first (raise --gpu-memory-utilization, use --kv-cache-dtype fp8, or more GPUs with "
            "--tensor-parallel-size), then set --max-model-len {min_max_model_len:d}.",
            "kv_tokens < min_max_model_len",
        ),
        _step(
            "Gate the whole startup log, from the first line to 'Application startup complete'.",
            "served_known == 0",
        ),
        _step(
            "If {served_max_model_len:,} tokens is enough for your traffic, lower the gate's --min-max-model-len.",
            "served_known == 1",
        ),
    ],
)

CONCURRENCY = Check(
    code="VT803",
    name="concurrency-too-low",
    title="Too few full-length requests fit in the KV cache",
    stage="startup",
    option="--min-concurrency",
    description=(
        "The KV cache must hold at least --min-concurrency requests of the full window at once: "
        "vLLM's 'Maximum concurrency for N tokens per request: X' line, or KV-cache tokens divided "
        "by max_model_len. Below it, long requests wait or are preempted under load."
    ),
    cause=[
        _step(
            "The maximum concurrency at {window_tokens:,} tokens per request is {concurrency}x; the "
            "gate requires at least {min_concurrency}x.",
            "concurrency_known == 1",
        ),
        _step(
            "The log states neither vLLM's 'Maximum concurrency' line nor the KV cache size and window, "
            "so it cannot show {min_concurrency}x fits.",
            "concurrency_known == 0",
        ),
    ],
    fixes=[
        _step(
            "{min_concurrency}x at {window_tokens:,} tokens needs {kv_tokens_needed:,} KV-cache tokens and "
            "the cache holds {kv_tokens:,}: raise --gpu-memory-utilization, use --kv-cache-dtype fp8 "
            "(about twice the tokens), or add GPUs (--tensor-parallel-size).",
            "kv_tokens_needed > 0",
        ),
        _step(
            "Or serve a shorter window: --max-model-len {window_for_min_concurrency:d} gives "
            "{min_concurrency}x with this cache.",
            "window_for_min_concurrency > 0",
        ),
        _step(
            "Gate the whole startup log: the capacity lines come after the model loads.",
            "concurrency_known == 0",
        ),
        _step(
            "Requests shorter than the window share the cache: if your traffic is short, a lower "
            "--min-concurrency may be the right gate.",
            "concurrency_known == 1",
        ),
    ],
)

KV_USAGE = Check(
    code="VT804",
    name="kv-usage-high-at-start",
    title="More of the KV cache is in use at the first metrics line than the gate allows",
    stage="runtime",
    option="--max-kv-usage-at-start",
    description=(
        "The first metrics line ('GPU KV cache usage: P%') must show at most --max-kv-usage-at-start "
        "percent in use: a cache that is full before real traffic leaves no room for it."
    ),
    cause=[
        _step(
            "The first metrics line shows {kv_usage_at_start_pct:g}% of the KV cache in use; the gate allows "
            "{max_kv_usage_at_start:g}%.",
            "usage_known == 1",
        ),
        _step(
            "The log holds no metrics line ('GPU KV cache usage: P%'), so it cannot show the cache starts "
            "below {max_kv_usage_at_start}%.",
            "usage_known == 0",
        ),
    ],
    fixes=[
        _step(
            "Traffic (or a warm-up) reached the server before the first metrics line: gate the log before "
            "traffic starts, or raise --max-kv-usage-at-start.",
            "usage_known == 1",
        ),
        _step(
            "If a little traffic fills it, the cache is small for the window ({concurrency}x requests of "
            "{window_tokens:,} tokens): give it more memory or lower --max-model-len.",
            "usage_known == 1 and concurrency > 0",
        ),
        _step(
            "vLLM prints a metrics line every few seconds while it serves (idle intervals only at DEBUG "
            "from 0.8.5): capture the log after a first request, or drop --max-kv-usage-at-start.",
            "usage_known == 0",
        ),
    ],
)

CHECKS = (READY, WINDOW, CONCURRENCY, KV_USAGE)


def checks_run(thresholds: Thresholds) -> list[Check]:
    """The assertions the thresholds ask for, in code order."""
    wanted = {
        READY.code: thresholds.require_ready,
        WINDOW.code: thresholds.min_max_model_len is not None,
        CONCURRENCY.code: thresholds.min_concurrency is not None,
        KV_USAGE.code: thresholds.max_kv_usage_at_start is not None,
    }
    return [check for check in CHECKS if wanted[check.code]]


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


def ready_numbers(facts: Mapping[str, Any], findings: Sequence[Finding], thresholds: Thresholds) -> dict | None:
    if not thresholds.require_ready:  # not asked for: it cannot fail
        return None
    errors = startup_errors(findings)
    ready_line = 1 if facts.get("ready") else 0
    if ready_line and not errors:
        return None
    numbers: dict[str, Any] = {"ready_line": ready_line, "startup_errors": len(errors)}
    if errors:
        numbers.update(first_error_code=errors[0].code, first_error_line=errors[0].line)
    return numbers


def window_numbers(facts: Mapping[str, Any], findings: Sequence[Finding], thresholds: Thresholds) -> dict | None:
    required = thresholds.min_max_model_len
    if required is None:  # not asked for: it cannot fail
        return None
    served, window_from, auto_fit = served_window(facts, findings)
    if served is not None and served >= required:
        return None
    numbers: dict[str, Any] = {"min_max_model_len": required, "served_known": int(served is not None)}
    if served is not None:
        numbers.update(served_max_model_len=served, window_from=window_from, shortfall_tokens=required - served)
    if auto_fit is not None and auto_fit.fields.get("user_max_model_len"):
        numbers["auto_fit_from"] = auto_fit.fields["user_max_model_len"]
    if facts.get("kv_tokens"):
        numbers["kv_tokens"] = facts["kv_tokens"]
    return numbers


def concurrency_numbers(facts: Mapping[str, Any], findings: Sequence[Finding], thresholds: Thresholds) -> dict | None:
    required = thresholds.min_concurrency
    if required is None:
        return None
    window, _, _ = served_window(facts, findings)
    concurrency = concurrency_at_full_length(facts, window)
    if concurrency is not None and concurrency >= required:
        return None
    numbers: dict[str, Any] = {"min_concurrency": required, "concurrency_known": int(concurrency is not None)}
    if concurrency is not None:
        numbers["concurrency"] = concurrency
    if window:
        numbers["window_tokens"] = window
    kv_tokens = facts.get("kv_tokens")
    if kv_tokens and window:
        block_size = int(facts.get("block_size") or DEFAULT_BLOCK_SIZE)
        numbers.update(
            kv_tokens=kv_tokens,
            kv_tokens_needed=math.ceil(required * window),
            window_for_min_concurrency=round_down(kv_tokens / required, block_size) if required > 0 else 0,
        )
    return numbers


def kv_usage_numbers(facts: Mapping[str, Any], findings: Sequence[Finding], thresholds: Thresholds) -> dict | None:
    allowed = thresholds.max_kv_usage_at_start
    if allowed is None:
        return None
    usage = facts.get("kv_usage_at_start_pct")
    if usage is not None and usage <= allowed:
        return None
    numbers: dict[str, Any] = {"max_kv_usage_at_start": allowed, "usage_known": int(usage is not None)}
    if usage is not None:
        numbers["kv_usage_at_start_pct"] = usage
    window, _, _ = served_window(facts, findings)
    concurrency = concurrency_at_full_length(facts, window)
    if concurrency is not None and window:
        numbers.update(concurrency=concurrency, window_tokens=window)
    return numbers


NUMBERS: dict[str, Callable[[Mapping[str, Any], Sequence[Finding], Thresholds], dict | None]] = {
    READY.code: ready_numbers,
    WINDOW.code: window_numbers,
    CONCURRENCY.code: concurrency_numbers,
    KV_USAGE.code: kv_usage_numbers,
}
# Numbers that say how the rest were found, not what the server has: kept out of `fields`.
FLAGS = {"ready_line", "served_known", "concurrency_known", "usage_known"}
COMPUTED = {"shortfall_tokens", "kv_tokens_needed", "window_for_min_concurrency"}


# --- findings ---------------------------------------------------------------------------


def evaluate(
    source: str, facts: Mapping[str, Any], findings: Sequence[Finding], thresholds: Thresholds,
    fact_lines: Mapping[str, tuple[str, int]] | None = None,
) -> list[Finding]:
    """A finding for each assertion that fails, in code order, at the line of the number it
    judged. fact_lines: fact name -> (source, line) that set it; by default the lines the
    facts carry (facts.Facts)."""
    if fact_lines is None:
        fact_lines = getattr(facts, "lines", {})
    failed = []
    for check in checks_run(thresholds):
        numbers = NUMBERS[check.code](facts, findings, thresholds)
        if numbers is not None:
            line = evidence_line(check, numbers, facts, fact_lines, findings)
            failed.append(to_finding(check, source, numbers, line))
    return failed


def evidence_line(
    check: Check, numbers: Mapping[str, Any], facts: Mapping[str, Any],
    fact_lines: Mapping[str, tuple[str, int]], findings: Sequence[Finding],
) -> int:
    """The line that states the number the assertion judged; the log's start when none does."""
    if check is READY:
        return int(numbers.get("first_error_line") or WHOLE_LOG)
    if check is WINDOW:
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


def evidence_facts(check: Check, numbers: Mapping[str, Any], facts: Mapping[str, Any]) -> list[str]:
    """The facts that gave the judged number, the best witness first."""
    if check is CONCURRENCY and numbers.get("concurrency_known"):
        return ["concurrency"] if facts.get("concurrency") is not None else ["kv_tokens"]
    if check is KV_USAGE and numbers.get("usage_known"):
        return ["kv_usage_at_start_pct"]
    return []


def to_finding(check: Check, source: str, numbers: Mapping[str, Any], line: int) -> Finding:
    return Finding(
        code=check.code,
        name=check.name,
        title=check.title,
        stage=check.stage,
        severity=check.severity,
        source=source,
        line=line,
        excerpt="",
        fields={k: v for k, v in numbers.items() if k not in FLAGS | COMPUTED},
        derived={k: v for k, v in numbers.items() if k in COMPUTED},
        cause=render_steps(check.cause, numbers),
        fixes=render_steps(check.fixes, numbers),
    )
