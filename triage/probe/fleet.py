"""A fleet's workload through Prometheus: the single-server figures, from rates over a range.

The percentiles' upper bounds come from the bucket rates summed by `le` and `model_name`
(the same reading as one server's buckets); histogram_quantile's interpolated estimates
are shown beside them, as Grafana would draw them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from triage.diagnose.workload import (
    PERCENTS,
    Capacity,
    ModelSizing,
    Window,
    scrape_capacity,
    size_model,
    worst_first,
)
from triage.probe import queries
from triage.probe.exposition import (
    HISTOGRAMS,
    USAGE_NAMES,
    Histogram,
    ModelMetrics,
    Scrape,
    whole_number,
)
from triage.probe.fetch import ProbeError
from triage.probe.prometheus import query


@dataclass(slots=True)
class Fleet:
    models: list[ModelSizing]
    estimates: dict[str, dict[str, dict[int, float]]]  # model -> histogram -> percent -> histogram_quantile
    worst: list[dict[str, Any]]
    queries: list[str] = field(default_factory=list)


class Runner:
    """Runs queries and keeps their text in order, for --show-queries."""

    def __init__(self, url: str, timeout: float):
        self.url, self.timeout = url, timeout
        self.ran: list[str] = []

    def __call__(self, expression: str):
        self.ran.append(expression)
        return query(self.url, expression, self.timeout)


def read_fleet(url: str, selector: str, range_: str, max_model_len: int | None, timeout: float) -> Fleet:
    try:
        queries.matchers(selector)
        queries.check_range(range_)
    except queries.QueryError as error:
        raise ProbeError(str(error)) from None
    run = Runner(url, timeout)
    metrics: dict[str, ModelMetrics] = {}
    for short in HISTOGRAMS:
        for sample in run(queries.bucket_rates(short, selector, range_)):
            model = sample.labels.get("model_name", "")
            histograms = metrics.setdefault(model, ModelMetrics(model)).histograms
            single = Histogram([(float(sample.labels["le"]), sample.value)])
            histograms[short] = histograms[short].add(single) if short in histograms else single
    estimates = quantile_estimates(run, selector, range_, set(metrics))
    rows = instance_rows(run, selector, range_)
    for row in rows:
        model = metrics.setdefault(row["model"], ModelMetrics(row["model"]))
        model.preemptions = (model.preemptions or 0.0) + (row.get("preemptions") or 0.0)
        if row.get("peak_usage") is not None:
            model.usage_by_name[USAGE_NAMES[0]] = max(row["peak_usage"], model.usage_by_name.get(USAGE_NAMES[0], 0.0))
    for sample in run(queries.finished(selector, range_)):
        model = metrics.setdefault(sample.labels.get("model_name", ""), ModelMetrics(sample.labels.get("model_name", "")))
        reason = sample.labels.get("finished_reason", "")
        model.finished[reason] = model.finished.get(reason, 0.0) + sample.value
    capacities = model_capacities(run(queries.cache_config(selector)), rows)
    window = Window(max_model_len, "--max-model-len" if max_model_len else None)
    models = [
        size_model(m, window, capacities.get(name, Capacity(missing="no vllm:cache_config_info series for it")))
        for name, m in sorted(metrics.items())
    ]
    if not models:
        raise ProbeError(f"{url}: no vLLM series match {selector or '{}'} in the last {range_}")
    return Fleet(models, estimates, worst_first(rows), run.ran)


def quantile_estimates(run: Runner, selector: str, range_: str, models: set[str]) -> dict[str, dict[str, dict[int, float]]]:
    estimates: dict[str, dict[str, dict[int, float]]] = {}
    for short in HISTOGRAMS:
        for percent in PERCENTS:
            for sample in run(queries.quantile(percent, short, selector, range_)):
                model = sample.labels.get("model_name", "")
                if model in models:
                    estimates.setdefault(model, {}).setdefault(short, {})[percent] = sample.value
    return estimates


def instance_rows(run: Runner, selector: str, range_: str) -> list[dict[str, Any]]:
    """One row per (instance, model): preemptions in the range, peak usage, peak waiting."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for key, expression in (
        ("preemptions", queries.preemptions(selector, range_)),
        ("peak_usage", queries.peak_usage(selector, range_)),
        ("peak_waiting", queries.peak_waiting(selector, range_)),
    ):
        for sample in run(expression):
            instance, model = sample.labels.get("instance", "?"), sample.labels.get("model_name", "")
            rows.setdefault((instance, model), {"instance": instance, "model": model})[key] = sample.value
    return list(rows.values())


def model_capacities(samples, rows: list[dict[str, Any]]) -> dict[str, Capacity]:
    """cache_config_info carries no model_name: an instance's models come from its other
    series. A model's figure is its smallest instance's (the one that runs out first)."""
    by_instance: dict[str, list[dict[str, str]]] = {}
    for sample in samples:
        by_instance.setdefault(sample.labels.get("instance", "?"), []).append(sample.labels)
    capacities: dict[str, Capacity] = {}
    for row in rows:
        engines = by_instance.get(row["instance"])
        if not engines:
            continue
        tokens = [t for t in (whole_number(e.get("kv_cache_size_tokens")) for e in engines) if t is not None]
        capacity = scrape_capacity(Scrape({}, {}, False, engines[0], tokens, len(engines)), len(engines))
        known = capacities.get(row["model"])
        if known is None or known.kv_tokens is None or (capacity.kv_tokens or known.kv_tokens) < known.kv_tokens:
            capacities[row["model"]] = capacity
    return capacities
