"""What `vllm-triage gate` prints of its assertions after the report: the verdict, and for
each assertion that held the figures it compared and by how much they passed (a failed one
is a finding of the report, with its cause and fixes)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from triage.model import Check
from triage.rules.expr import format_value


def _ready(figures: Mapping[str, Any], line: int) -> str:
    return f"ready: at line {line:,}, no startup error"


def _window(figures: Mapping[str, Any], line: int) -> str:
    return (
        f"served window: {format_value(figures['served_max_model_len'])} tokens (line {line:,})"
        f" >= {format_value(figures['min_max_model_len'])} required: {format_value(figures['spare_tokens'])} tokens to spare"
    )


def _concurrency(figures: Mapping[str, Any], line: int) -> str:
    text = f"concurrency: {figures['concurrency']:.2f}x"
    if figures.get("window_tokens"):
        text += f" requests of {format_value(figures['window_tokens'])} tokens"
    text += f" (line {line:,}) >= {figures['min_concurrency']:g}x required: {figures['spare_concurrency']:.2f}x to spare"
    if figures.get("kv_tokens_needed"):
        text += (
            f"; the KV cache holds {format_value(figures['kv_tokens'])} tokens,"
            f" {format_value(figures['kv_tokens_needed'])} needed"
        )
    return text


def _kv_usage(figures: Mapping[str, Any], line: int) -> str:
    return (
        f"KV cache in use at the first metrics line: {figures['kv_usage_at_start_pct']:g}% (line {line:,})"
        f" <= {figures['max_kv_usage_at_start']:g}% allowed: {figures['spare_pct']:g} points to spare"
    )


PASSED: dict[str, Callable[[Mapping[str, Any], int], str]] = {
    "server-not-ready": _ready,
    "served-window-too-short": _window,
    "concurrency-too-low": _concurrency,
    "kv-usage-high-at-start": _kv_usage,
}


def render_checks(checks: Sequence[Check]) -> str:
    """'' when the gate asserted nothing."""
    if not checks:
        return ""
    failed = [check.code for check in checks if not check.passed]
    if failed:
        head = f"gate: {len(failed)} of {len(checks)} assertions failed ({', '.join(failed)})"
    else:
        head = f"gate: passed ({len(checks)} of {len(checks)} assertions)"
    lines = [head]
    for check in checks:
        if check.passed:
            lines.append(f"  {check.code} {PASSED[check.name](check.figures, check.line)}")
    return "\n".join(lines) + "\n"
