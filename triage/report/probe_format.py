"""Text of `probe`: one server's workload per model, or a fleet's from Prometheus. Never computes."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from triage.diagnose.workload import PERCENTS, BucketPercentile, ModelSizing

HISTOGRAM_TITLES = {"prompt": "prompt tokens", "max_tokens": "max_tokens asked", "generation": "generated tokens"}
BOUND_NOTE = "upper bounds: each figure is the top of the histogram bucket the percentile falls in"
STAND_IN_NOTE = (
    "p99(prompt) + p99(max_tokens), a conservative stand-in for the p99 of prompt + output "
    "(the histograms are separate; a client that sends no max_tokens counts as the window minus its prompt)"
)
HISTOGRAM_NOTE = "the histograms count finished requests only: requests refused with HTTP 400 are not in them"


def bound(value: BucketPercentile) -> str:
    if value.window_bound:
        return f"<= {value.bound:,.0f} (window)"
    return f"<= {value.bound:,.0f}" if value.bound is not None else f"> {value.top:,.0f}"


def percentile_rows(sizing: ModelSizing, estimates: Mapping[str, Mapping[int, float]] | None = None) -> list[str]:
    header = "".join(f"{'p' + str(p):>22}" for p in PERCENTS)
    lines = [f"    {'':<18}{header}"]
    for short, found in sizing.percentiles.items():
        cells = []
        for percent in PERCENTS:
            cell = bound(found[percent])
            estimate = (estimates or {}).get(short, {}).get(percent)
            if estimate is not None:
                cell += f" (~{estimate:,.0f})"
            cells.append(f"{cell:>22}")
        lines.append(f"    {HISTOGRAM_TITLES[short]:<18}{''.join(cells)}")
    return lines


def head_line(sizing: ModelSizing) -> str:
    window = sizing.window
    served = f"served window {window.tokens:,} tokens ({window.source})" if window.tokens else "served window unknown"
    capacity = sizing.capacity
    kv = (
        f"KV cache {capacity.kv_tokens:,} tokens per engine ({capacity.source})"
        if capacity.kv_tokens else f"KV cache size unknown: {capacity.missing}"
    )
    return f"model {sizing.model}: {served}; {kv}"


def state_line(sizing: ModelSizing, now: bool = True) -> str | None:
    """now: one server's gauges and totals; else a fleet's peaks and increases over the range."""
    parts = []
    if sizing.usage is not None:
        parts.append(f"KV cache {sizing.usage:.1%} used" if now else f"peak KV-cache usage {sizing.usage:.1%}")
    if sizing.running is not None:
        parts.append(f"{sizing.running:,.0f} running")
    if sizing.waiting is not None:
        parts.append(f"{sizing.waiting:,.0f} waiting")
    if sizing.preemptions is not None:
        parts.append(f"{sizing.preemptions:,.0f} preemptions {'so far' if now else 'in the range'}")
    if sizing.finished_length is not None and sizing.finished_total:
        parts.append(
            f"{sizing.finished_length:,.0f} of {sizing.finished_total:,.0f} finished requests{'' if now else ' in the range'} "
            f"({sizing.finished_length / sizing.finished_total:.1%}) ended at their length limit"
        )
    return f"  {'now' if now else 'range'}: {', '.join(parts)}" if parts else None


def sizing_lines(sizing: ModelSizing) -> list[str]:
    figures = sizing.figures
    if sizing.stand_in is None:
        if sizing.stand_in_floor is not None:
            return [(f"  sizing: a p99 lies above the top bucket: p99(prompt) + p99(max_tokens) is more than "
                     f"{sizing.stand_in_floor:,} tokens; no window to recommend from the buckets (give --max-model-len)")]
        return ["  sizing: needs the prompt and max_tokens histograms"]
    lines = [f"  sizing: {sizing.stand_in:,} tokens = {STAND_IN_NOTE}"]
    if sizing.stand_in_capped:
        lines[0] += "; capped at the served window, which no admitted request exceeds: the workload reaches the whole window"
    advice = f"    -> --max-model-len {figures['recommended_max_model_len']:,} (a multiple of the {sizing.capacity.block_size}-token block)"
    if "recommended_concurrency" in figures:
        advice += f": {figures['recommended_concurrency']:,} sequences of that length fit in the KV cache"
        if "current_concurrency" in figures:
            advice += f" (now {figures['current_concurrency']:,} at {sizing.window.tokens:,})"
    lines.append(advice)
    return lines


def joined_lines(sizing: ModelSizing) -> list[str]:
    log, joined = sizing.log, sizing.joined
    if log is None:
        return []
    if not joined:
        return [f"  log {log.source}: no refused requests; the histograms see the whole workload"]
    line = (
        f"  log {log.source}: {joined['rejected']:,} refused requests ({', '.join(log.codes)}) beside "
        f"{sizing.requests:,.0f} finished: {joined['rejected_share']:.1%} of {joined['all_requests']:,}"
    )
    if log.requested_p99 is not None:
        line += f"; the refused asked up to {log.requested_max:,} tokens (p99 {log.requested_p99:,})"
    lines = [line]
    if "recommended_max_model_len" in joined:
        advice = (f"    -> with them, p99 of all requests is about {joined['p99_length']:,} tokens: "
                  f"--max-model-len {joined['recommended_max_model_len']:,}")
        if "recommended_concurrency" in joined:
            advice += f" ({joined['recommended_concurrency']:,} sequences of that length fit)"
        lines.append(advice)
    else:
        lines.append("    -> they are under 1% of all requests: the stand-in above still serves 99% of them")
    return lines


def model_block(sizing: ModelSizing, estimates: Mapping[str, Mapping[int, float]] | None = None, now: bool = True) -> list[str]:
    lines = [head_line(sizing)]
    state = state_line(sizing, now)
    if state:
        lines.append(state)
    if sizing.percentiles:
        counted = "finished requests" if now else "finished requests a second"
        lines.append(f"  {sizing.requests:,.{0 if now else 3}f} {counted}; percentiles are {BOUND_NOTE}"
                     + ("; (~N): Prometheus's histogram_quantile, interpolated inside the bucket" if estimates else ""))
        lines.extend(percentile_rows(sizing, estimates))
        lines.append(f"  ({HISTOGRAM_NOTE})")
    if sizing.missing:
        names = ", ".join(HISTOGRAM_TITLES[m] for m in sizing.missing)
        lines.append(f"  missing: no observations in the histograms of {names}")
    lines.extend(sizing_lines(sizing))
    lines.extend(joined_lines(sizing))
    lines.extend(f"  note: {note}" for note in sizing.notes)
    return lines


def render_server(source: str, models: Sequence[ModelSizing], http: Mapping[str, float] | None,
                  notes: Sequence[str]) -> str:
    lines = [f"vllm-triage probe: {source}"]
    for sizing in models:
        lines.extend(model_block(sizing))
    if http is None:
        lines.append("http: no http_requests_total (vLLM before 0.8.5): refused requests cannot be counted from metrics")
    elif http:
        counts = ", ".join(f"{value:,.0f} {status}" for status, value in sorted(http.items()))
        lines.append(f"http: {counts} on the completion endpoints; 4xx holds every client error, too-long "
                     "requests among them (vLLM 0.18-0.25 count those 400s as 5xx)")
    lines.extend(f"note: {note}" for note in notes)
    lines.extend(warnings_block(models))
    return "\n".join(lines) + "\n"


def warnings_block(models: Sequence[ModelSizing]) -> list[str]:
    found = [(s.model, w) for s in models for w in s.warnings]
    if not found:
        return ["no warnings"]
    return ["warnings:"] + [f"  {model}: {warning}" for model, warning in found]


def fleet_line(sizing: ModelSizing, estimates: Mapping[str, Mapping[int, float]]) -> str:
    """One model of a fleet: its rate, the p99s (bound and estimate), the window advice, the pressure."""
    p99s = []
    for short, found in sizing.percentiles.items():
        estimate = estimates.get(short, {}).get(99)
        p99s.append(f"{short} {bound(found[99])}" + (f" (~{estimate:,.0f})" if estimate is not None else ""))
    parts = [f"{sizing.requests:,.2f} requests/s", "p99 " + ", ".join(p99s) if p99s else "no histograms"]
    figures = sizing.figures
    if "recommended_max_model_len" in figures:
        advice = f"--max-model-len {figures['recommended_max_model_len']:,}"
        if "recommended_concurrency" in figures:
            advice += f" ({figures['recommended_concurrency']:,} sequences fit)"
        parts.append(advice)
    elif sizing.stand_in_floor is not None:
        parts.append(f"stand-in above {sizing.stand_in_floor:,}: no window from the buckets")
    if sizing.preemptions:
        parts.append(f"{sizing.preemptions:,.0f} preemptions")
    if sizing.usage is not None:
        parts.append(f"peak usage {sizing.usage:.1%}")
    return f"  {sizing.model}: " + "; ".join(parts)


def render_fleet(source: str, selector: str, range_: str, models: Sequence[ModelSizing],
                 estimates: Mapping[str, Mapping[str, Mapping[int, float]]], instances: Sequence[Mapping[str, Any]],
                 queries: Sequence[str] = (), details: bool = False) -> str:
    """One line per model and the worst instances; details: each model's whole block too."""
    lines = []
    if queries:
        lines.append("queries:")
        lines.extend(f"  {query}" for query in queries)
    lines.append(f"vllm-triage probe: Prometheus {source}, series {selector or '{}'} over the last {range_}")
    if not models:
        lines.append("no vLLM request histograms in that range")
    lines.append(f"models ({BOUND_NOTE}; ~N: histogram_quantile; sizing from {STAND_IN_NOTE.split(',')[0]}):")
    lines.extend(fleet_line(sizing, estimates.get(sizing.model, {})) for sizing in models)
    for sizing in models if details else ():
        lines.extend(model_block(sizing, estimates.get(sizing.model), now=False))
    if instances:
        lines.append("worst instances (preemptions in the range, then peak KV-cache usage, then peak waiting):")
        for row in instances:
            usage = f"{row['peak_usage']:.1%}" if row.get("peak_usage") is not None else "?"
            waiting = f"{row['peak_waiting']:,.0f}" if row.get("peak_waiting") is not None else "?"
            lines.append(f"  {row['instance']} {row['model']}: {row.get('preemptions') or 0:,.0f} preemptions, "
                         f"peak usage {usage}, peak waiting {waiting}")
    if not details:  # each model's block, which lists its notes, is not printed
        lines.extend(f"note: {sizing.model}: {note}" for sizing in models for note in sizing.notes)
    lines.extend(warnings_block(models))
    return "\n".join(lines) + "\n"


def sizing_json(sizing: ModelSizing, estimates: Mapping[str, Mapping[int, float]] | None = None) -> dict[str, Any]:
    percentiles = {
        short: {f"p{p}": {"bound": value.tokens, "above": value.top if value.bound is None else None,
                          "window_bound": value.window_bound} for p, value in found.items()}
        for short, found in sizing.percentiles.items()
    }
    data: dict[str, Any] = {
        "model": sizing.model, "max_model_len": sizing.window.tokens, "max_model_len_source": sizing.window.source,
        "kv_tokens": sizing.capacity.kv_tokens, "kv_tokens_source": sizing.capacity.source,
        "kv_tokens_missing": sizing.capacity.missing, "block_size": sizing.capacity.block_size,
        "kv_usage": sizing.usage, "running": sizing.running, "waiting": sizing.waiting,
        "preemptions": sizing.preemptions, "finished_length": sizing.finished_length,
        "finished": sizing.finished_total, "requests": sizing.requests, "percentiles": percentiles,
        "missing": sizing.missing, "stand_in": sizing.stand_in, "stand_in_capped": sizing.stand_in_capped,
        "stand_in_above": sizing.stand_in_floor, **sizing.figures, "joined": sizing.joined or None,
        "warnings": sizing.warnings, "notes": sizing.notes,
    }
    if estimates is not None:
        data["histogram_quantile"] = {short: {f"p{p}": v for p, v in found.items()} for short, found in estimates.items()}
    return data


def render_server_json(source: str, models: Sequence[ModelSizing], http: Mapping[str, float] | None,
                       notes: Sequence[str]) -> str:
    data = {"source": source, "models": [sizing_json(s) for s in models], "http_not_2xx": http, "notes": list(notes)}
    return json.dumps(data, indent=2) + "\n"


def render_fleet_json(source: str, selector: str, range_: str, models: Sequence[ModelSizing],
                      estimates: Mapping[str, Mapping[str, Mapping[int, float]]], instances: Sequence[Mapping[str, Any]],
                      queries: Sequence[str] = ()) -> str:
    data = {
        "prometheus": source, "selector": selector, "range": range_,
        "models": [sizing_json(s, estimates.get(s.model, {})) for s in models],
        "worst_instances": [dict(row) for row in instances], "queries": list(queries),
    }
    return json.dumps(data, indent=2) + "\n"
