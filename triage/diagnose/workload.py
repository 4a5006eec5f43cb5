"""Sizing from the whole workload: what vLLM's own request histograms say, per served model.

A rejection finding sees only the requests vLLM refused; the histograms see every request
that finished. Both end in the same arithmetic (diagnoser.sizing): the window that serves
the 99th percentile, rounded up to a block, and the concurrency it buys in the KV cache.

Read from buckets, a percentile is known only to lie in a bucket: the figure given is the
bucket's upper bound (an upper bound of the true percentile), or "above the top finite
bound" when it falls in +Inf. The histograms are separate, so p99(prompt) + p99(max_tokens)
is not p99 of their sum: it is at least that (a conservative stand-in).

HTTP-400 rejections never reach the histograms: a log joined with `--log` adds them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from triage.diagnose.diagnoser import requested_length, sizing
from triage.diagnose.facts import DEFAULTS
from triage.model import Finding
from triage.probe.exposition import (
    COMPLETION_HANDLERS,
    Histogram,
    ModelMetrics,
    Scrape,
    whole_number,
)

PERCENTS = (50, 90, 99)
FULL_USAGE = 0.95  # VT303's threshold: a cache this full with requests waiting is the limit
TAIL_SHARE = 0.01  # rejections above this share of all requests are inside the p99


@dataclass(slots=True, frozen=True)
class BucketPercentile:
    bound: float | None  # the upper bound of the bucket that holds it; None: the +Inf bucket
    top: float  # the top finite bound, which a bound of None lies above
    # In the +Inf bucket, with the window known: no admitted request exceeds the window, so
    # the window is the bound (bound holds it).
    window_bound: bool = False

    @property
    def tokens(self) -> int | None:
        return int(self.bound) if self.bound is not None else None


def bucket_percentile(histogram: Histogram, percent: float, window: int | None = None) -> BucketPercentile | None:
    """The nearest-rank percentile's bucket: the first bound whose cumulative count reaches
    percent% of the observations (counts may be rates: fractional). None without any.
    window: the served max_model_len, the bound of the +Inf bucket (vLLM refuses longer)."""
    total = histogram.total
    if total <= 0:
        return None
    rank = max(percent * total / 100, min(total, 1.0) * 1e-9)
    finite = [bound for bound, _ in histogram.buckets if bound != float("inf")]
    top = max(finite) if finite else 0.0
    # the first bucket that holds the rank (the last when none does)
    bound = next((b for b, count in histogram.buckets if count >= rank * (1 - 1e-12)), histogram.buckets[-1][0])
    if bound != float("inf"):
        return BucketPercentile(bound, top)
    if window is not None and window > top:
        return BucketPercentile(float(window), top, window_bound=True)
    return BucketPercentile(None, top)


@dataclass(slots=True)
class Capacity:
    """The KV cache of one engine in tokens, where the figure came from, or why it is not known."""

    kv_tokens: int | None = None
    block_size: int = DEFAULTS["block_size"]
    source: str | None = None
    missing: str | None = None


def scrape_capacity(scrape: Scrape, engines: int = 1) -> Capacity:
    """kv_cache_size_tokens where the version fills it in (0.24+), else blocks x block size."""
    cache = scrape.cache
    block_size = whole_number(cache.get("block_size")) or DEFAULTS["block_size"]
    if scrape.kv_tokens_by_engine:
        return Capacity(min(scrape.kv_tokens_by_engine), block_size, "cache_config_info kv_cache_size_tokens")
    if not cache:
        return Capacity(block_size=block_size, missing="no vllm:cache_config_info series")
    blocks = whole_number(cache.get("num_gpu_blocks"))
    if blocks is None:
        return Capacity(
            block_size=block_size,
            missing="cache_config_info has num_gpu_blocks=None (vLLM V1 0.8.x writes it before the KV cache is sized)",
        )
    # From 0.9 the label holds the sum over data-parallel engines: the figure is per engine.
    per_engine = blocks * block_size // max(1, engines)
    return Capacity(per_engine, block_size, f"cache_config_info num_gpu_blocks x block_size ({blocks} x {block_size})")


@dataclass(slots=True)
class Window:
    tokens: int | None = None
    source: str | None = None


@dataclass(slots=True)
class LogView:
    """What a log adds: the requests vLLM refused (absent from the histograms) and its facts."""

    source: str
    rejected: int = 0
    requested_p99: int | None = None
    requested_max: int | None = None
    codes: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)


def log_view(source: str, facts: Mapping[str, Any], findings: Iterable[Finding]) -> LogView:
    """The rejection aggregates of a scan (request-stage findings with their figures)."""
    view = LogView(source, facts=dict(facts))
    for finding in findings:
        length = requested_length(finding.fields)
        if finding.stage != "request" or finding.hosted or length is None:
            continue  # the diagnosis counts as rejections what states a requested length
        if finding.code not in view.codes:
            view.codes.append(finding.code)
        view.rejected += int(finding.derived.get("rejected", finding.count))
        for name in ("requested_p99", "requested_max"):
            value = finding.derived.get(name, length)  # a single rejection has no aggregate
            setattr(view, name, max(value, getattr(view, name) or 0))
    return view


@dataclass(slots=True)
class ModelSizing:
    model: str
    requests: float  # finished requests the prompt histogram counts (or their rate)
    percentiles: dict[str, dict[int, BucketPercentile]]
    missing: list[str]  # histograms absent from the scrape or empty
    window: Window
    capacity: Capacity
    usage: float | None
    running: float | None
    waiting: float | None
    preemptions: float | None
    finished_length: float | None
    finished_total: float | None
    stand_in: int | None = None  # p99(prompt) + p99(max_tokens) upper bounds
    stand_in_floor: int | None = None  # when a p99 is above the top bucket: the stand-in exceeds this
    stand_in_capped: bool = False  # the sum was above the window, which bounds every admitted request
    figures: dict[str, Any] = field(default_factory=dict)  # sizing(): recommended_max_model_len, ...
    log: LogView | None = None
    joined: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # what makes the probe exit 1
    notes: list[str] = field(default_factory=list)


def size_model(metrics: ModelMetrics, window: Window, capacity: Capacity, log: LogView | None = None) -> ModelSizing:
    if log is not None:
        window, capacity = with_log_facts(window, capacity, log)
    percentiles: dict[str, dict[int, BucketPercentile]] = {}
    missing = []
    for short in ("prompt", "max_tokens", "generation"):
        histogram = metrics.histograms.get(short)
        found = {p: bucket_percentile(histogram, p, window.tokens) for p in PERCENTS} if histogram else {}
        known = {p: value for p, value in found.items() if value is not None}
        if not known or len(known) < len(PERCENTS):
            missing.append(short)
            continue
        percentiles[short] = known
    prompt = metrics.histograms.get("prompt")
    result = ModelSizing(
        metrics.model, prompt.total if prompt else 0.0, percentiles, missing, window, capacity,
        metrics.usage, metrics.running, metrics.waiting, metrics.preemptions,
        metrics.finished.get("length"), sum(metrics.finished.values()) if metrics.finished else None, log=log,
    )
    stand_in(result)
    if log is not None:
        join(result, log)
    result.warnings.extend(pressure_warnings(result))
    result.notes.extend(capacity_notes(result))
    return result


def with_log_facts(window: Window, capacity: Capacity, log: LogView) -> tuple[Window, Capacity]:
    """The log's startup lines fill in what the metrics do not say (0.8.x's KV size, a file's window)."""
    facts = log.facts
    if window.tokens is None and facts.get("max_model_len"):
        window = Window(int(facts["max_model_len"]), f"the startup log ({log.source})")
    if capacity.kv_tokens is None and facts.get("kv_tokens"):
        block_size = int(facts.get("block_size") or capacity.block_size)
        capacity = Capacity(int(facts["kv_tokens"]), block_size, f"the startup log ({log.source})")
    return window, capacity


def stand_in(result: ModelSizing) -> None:
    prompt, max_tokens = result.percentiles.get("prompt"), result.percentiles.get("max_tokens")
    if prompt is None or max_tokens is None:
        return
    high = [prompt[99], max_tokens[99]]
    if any(p.bound is None for p in high):
        result.stand_in_floor = int(sum(p.bound if p.bound is not None else p.top for p in high))
        return
    result.stand_in = int(sum(p.bound for p in high if p.bound is not None))
    if result.window.tokens is not None and result.stand_in > result.window.tokens:
        # vLLM admits no request whose prompt + max_tokens exceeds the window (and clamps
        # max_tokens from 0.32): the p99 of the sum is at most the window.
        result.stand_in, result.stand_in_capped = result.window.tokens, True
    result.figures = sizing(result.stand_in, capacity_facts(result.capacity), result.window.tokens)


def capacity_facts(capacity: Capacity) -> dict[str, Any]:
    return {"block_size": capacity.block_size, "kv_tokens": capacity.kv_tokens}


def join(result: ModelSizing, log: LogView) -> None:
    """All requests = the finished ones (histograms) + the refused ones (log). Refused
    requests are longer than the window: when they are more than 1% of all, the p99 of all
    requests is one of them, and the window that serves p99 is the rejections' p99."""
    if not log.rejected:
        return
    total = result.requests + log.rejected
    share = log.rejected / total if total else 1.0
    result.joined = {"rejected": log.rejected, "all_requests": int(total), "rejected_share": round(share, 4)}
    result.warnings.append(
        f"{log.rejected:,} requests were refused ({', '.join(log.codes)} in {log.source}): "
        "they never reached the histograms"
    )
    if share > TAIL_SHARE and log.requested_p99 is not None:
        length = max(log.requested_p99, result.stand_in or 0)
        result.joined.update({"p99_length": length, **sizing(length, capacity_facts(result.capacity), result.window.tokens)})


def pressure_warnings(result: ModelSizing) -> list[str]:
    """Harm the server counted: preemptions (work thrown away and redone)."""
    if result.preemptions:
        return [f"VT301: {result.preemptions:,.0f} preemptions: the KV cache was too small for the admitted load"]
    return []


def capacity_notes(result: ModelSizing) -> list[str]:
    """A full cache with requests waiting is how a busy server looks (VT303 is info): a note,
    not a warning that fails the probe."""
    if result.usage is not None and result.waiting and result.usage >= FULL_USAGE:
        return [f"VT303: the KV cache is {result.usage:.0%} full with {result.waiting:,.0f} requests waiting"]
    return []


def rejected_by_http(scrape: Scrape) -> dict[str, float]:
    """Status class -> requests on the completion endpoints that were not 2xx."""
    counts: dict[str, float] = {}
    for (handler, status), value in scrape.http.items():
        if handler in COMPLETION_HANDLERS and status != "2xx":
            counts[status] = counts.get(status, 0.0) + value
    return counts


def worst_first(rows: Sequence[dict[str, Any]], limit: int = 5) -> list[dict[str, Any]]:
    """A fleet's instances under the most KV pressure: preemptions, then peak usage, then waiting."""
    def pressure(row: dict[str, Any]) -> tuple:
        return (row.get("preemptions") or 0, row.get("peak_usage") or 0, row.get("peak_waiting") or 0)

    return sorted(rows, key=pressure, reverse=True)[:limit]
