"""One server's metrics text, read into the figures sizing needs, per served model.

The text is parsed by prometheus_client's parser (the reference implementation of the
format); this module only picks vLLM's series out of what it yields. Names, labels and
their changes by version (facts from vLLM's sources):
- token histograms `vllm:request_{prompt_tokens,params_max_tokens,generation_tokens}`,
  label `model_name` (and `engine`, the data-parallel index, from 0.8.3);
- `vllm:kv_cache_usage_perc` from 0.9.2, `vllm:gpu_cache_usage_perc` before (and beside it
  until 0.11): read the new name first;
- counters keep their exposed `_total` names across vLLM's renames;
- `vllm:cache_config_info` is a gauge fixed at 1 whose labels carry the settings:
  `kv_cache_size_tokens` per engine from 0.24, else `num_gpu_blocks` (summed over
  data-parallel engines from 0.9; the string "None" in V1 0.8.x) times `block_size`;
- HTTP-400 rejections reach no vllm:* series, only `http_requests_total{status="4xx"}`
  (pfi, 0.8.5+), which mixes every client error; 0.18-0.25 count them as 5xx.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

# Short name -> the histogram as exposed (buckets read from the text: configurable from 0.32).
HISTOGRAMS = {
    "prompt": "vllm:request_prompt_tokens",
    "max_tokens": "vllm:request_params_max_tokens",
    "generation": "vllm:request_generation_tokens",
}
USAGE_NAMES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # newest first
RUNNING, WAITING = "vllm:num_requests_running", "vllm:num_requests_waiting"
PREEMPTIONS = "vllm:num_preemptions_total"
FINISHED = "vllm:request_success_total"
CACHE_CONFIG = "vllm:cache_config_info"
HTTP_REQUESTS = "http_requests_total"
COMPLETION_HANDLERS = ("/v1/chat/completions", "/v1/completions")


class ExpositionError(ValueError):
    """The text is not a Prometheus exposition, or holds no vLLM series."""


@dataclass(slots=True)
class Histogram:
    """Cumulative counts by upper bound (`le`), ascending, +Inf last: as exposed."""

    buckets: list[tuple[float, float]]

    @property
    def total(self) -> float:
        return self.buckets[-1][1] if self.buckets else 0.0

    def add(self, other: Histogram) -> Histogram:
        """The sum of two histograms over the same bounds (data-parallel engines, instances)."""
        counts = dict(self.buckets)
        for bound, count in other.buckets:
            counts[bound] = counts.get(bound, 0.0) + count
        return Histogram(sorted(counts.items()))


@dataclass(slots=True)
class ModelMetrics:
    """What one server says about one served model (summed over its engines)."""

    model: str
    histograms: dict[str, Histogram] = field(default_factory=dict)
    usage_by_name: dict[str, float] = field(default_factory=dict)  # fraction 0-1, the fullest engine
    running: float | None = None
    waiting: float | None = None
    preemptions: float | None = None
    finished: dict[str, float] = field(default_factory=dict)  # finished_reason -> requests
    engines: set[str] = field(default_factory=set)

    @property
    def usage(self) -> float | None:
        """KV-cache usage under the newest name the server exposes (both 0.9.2-0.10, equal)."""
        return next((self.usage_by_name[n] for n in USAGE_NAMES if n in self.usage_by_name), None)


@dataclass(slots=True)
class Scrape:
    models: dict[str, ModelMetrics]
    http: dict[tuple[str, str], float]  # (handler, status class) -> requests, completions handlers only
    has_http_metrics: bool
    # cache_config_info carries no model_name: it is the server's (one engine's labels).
    cache: dict[str, str] = field(default_factory=dict)
    kv_tokens_by_engine: list[int] = field(default_factory=list)  # kv_cache_size_tokens (0.24+)
    cache_engines: int = 0


def parse(text: str) -> Scrape:
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, IndexError, KeyError) as exc:
        raise ExpositionError(f"not a Prometheus metrics text ({first_line(str(exc))})") from None
    samples = [sample for family in families for sample in family.samples]
    if not any(sample.name.startswith("vllm:") for sample in samples):
        raise ExpositionError("a metrics text without any vllm:* series (not a vLLM server?)")
    scrape = Scrape({}, {}, has_http_metrics=any(s.name == HTTP_REQUESTS for s in samples))
    raw: dict[tuple[str, str, str], dict[float, float]] = {}  # (model, histogram, engine) -> le -> count
    for sample in samples:
        model = sample.labels.get("model_name")
        if model is None:
            read_server_sample(scrape, sample.name, sample.labels, sample.value)
            continue
        read_sample(scrape.models.setdefault(model, ModelMetrics(model)), sample, raw)
    for (model, short, _engine), counts in raw.items():
        histogram = Histogram(sorted(counts.items()))
        known = scrape.models[model].histograms.get(short)
        scrape.models[model].histograms[short] = histogram if known is None else known.add(histogram)
    return scrape


BUCKET_NAMES = {f"{name}_bucket": short for short, name in HISTOGRAMS.items()}


def read_sample(metrics: ModelMetrics, sample, raw: dict) -> None:
    name, labels, value = sample.name, sample.labels, sample.value
    engine = labels.get("engine", "")
    if name in BUCKET_NAMES:
        raw.setdefault((metrics.model, BUCKET_NAMES[name], engine), {})[float(labels["le"])] = value
    elif name in USAGE_NAMES:
        metrics.usage_by_name[name] = max(value, metrics.usage_by_name.get(name, value))
    elif name == RUNNING:
        metrics.running = (metrics.running or 0.0) + value
        metrics.engines.add(engine)
    elif name == WAITING:
        metrics.waiting = (metrics.waiting or 0.0) + value
    elif name == PREEMPTIONS:
        metrics.preemptions = (metrics.preemptions or 0.0) + value
    elif name == FINISHED:
        reason = labels.get("finished_reason", "")
        metrics.finished[reason] = metrics.finished.get(reason, 0.0) + value


def read_server_sample(scrape: Scrape, name: str, labels: dict[str, str], value: float) -> None:
    """A series of the whole server: the cache settings and the HTTP counts."""
    if name == CACHE_CONFIG:
        scrape.cache_engines += 1
        scrape.cache = scrape.cache or dict(labels)
        tokens = whole_number(labels.get("kv_cache_size_tokens"))
        if tokens is not None:
            scrape.kv_tokens_by_engine.append(tokens)
    elif name == HTTP_REQUESTS and labels.get("handler", "") in COMPLETION_HANDLERS:
        key = (labels["handler"], labels.get("status", ""))
        scrape.http[key] = scrape.http.get(key, 0.0) + value


def whole_number(text: str | None) -> int | None:
    """A label's number; None for "None" (a setting vLLM had not filled in) or no label."""
    try:
        value = float(text) if text is not None else math.nan
    except ValueError:
        return None
    return int(value) if math.isfinite(value) else None


def first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "unreadable"
    return line if len(line) <= 100 else line[:97] + "..."
