"""PromQL over vLLM's series: the fleet's sizing queries and the alerting rules' expressions.

Every query text is built here, so what `probe --show-queries` prints is what was run.
"""

from __future__ import annotations

import re

from triage.probe.exposition import COMPLETION_HANDLERS, HISTOGRAMS, USAGE_NAMES

DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")
COMPLETIONS = "|".join(re.escape(h) for h in COMPLETION_HANDLERS)


class QueryError(ValueError):
    pass


def matchers(selector: str) -> str:
    """The label matchers inside a selector given as '{job="vllm"}' (or empty)."""
    text = selector.strip()
    if not text:
        return ""
    if not (text.startswith("{") and text.endswith("}")):
        raise QueryError(f"--selector takes label matchers in braces, e.g. '{{job=\"vllm\"}}', not {selector!r}")
    return text[1:-1].strip().rstrip(",")


def series(name: str, selector: str, *extra: str) -> str:
    inner = ",".join(part for part in (matchers(selector), *extra) if part)
    return f"{name}{{{inner}}}" if inner else name


def check_range(range_: str) -> str:
    if not DURATION.match(range_):
        raise QueryError(f"--range takes a Prometheus duration (30m, 24h, 7d), not {range_!r}")
    return range_


def bucket_rates(short: str, selector: str, range_: str) -> str:
    """A histogram's buckets summed over instances and engines, per model: the counts the
    single-server percentiles are read from, as rates."""
    return f"sum by (le, model_name) (rate({series(HISTOGRAMS[short] + '_bucket', selector)}[{range_}]))"


def quantile(percent: int, short: str, selector: str, range_: str) -> str:
    return f"histogram_quantile({percent / 100:g}, {bucket_rates(short, selector, range_)})"


def peak_usage(selector: str, range_: str) -> str:
    """The newer name first: 0.9.2-0.10 expose both (equal); `or` keeps one per series."""
    new, old = (f"max_over_time({series(name, selector)}[{range_}])" for name in USAGE_NAMES)
    return f"max by (instance, model_name) ({new} or {old})"


def preemptions(selector: str, range_: str) -> str:
    return f"sum by (instance, model_name) (increase({series('vllm:num_preemptions_total', selector)}[{range_}]))"


def peak_waiting(selector: str, range_: str) -> str:
    return f"max by (instance, model_name) (max_over_time({series('vllm:num_requests_waiting', selector)}[{range_}]))"


def finished(selector: str, range_: str) -> str:
    return f"sum by (model_name, finished_reason) (increase({series('vllm:request_success_total', selector)}[{range_}]))"


def cache_config(selector: str) -> str:
    return series("vllm:cache_config_info", selector)


def refused(selector: str, range_: str) -> str:
    """Non-2xx answers of the completion endpoints (pfi's counter; 4xx mixes every client error)."""
    name = series("http_requests_total", selector, f'handler=~"{COMPLETIONS}"', 'status=~"4xx|5xx"')
    return f"sum by (instance, status) (increase({name}[{range_}]))"


# --- alerting rules (rules export --format prometheus) ----------------------------------


def alert_preemptions(selector: str) -> str:
    return f"{preemptions(selector, '10m')} > 0"


def alert_saturated(selector: str) -> str:
    usage = " or ".join(series(name, selector) for name in USAGE_NAMES)
    waiting = f"sum by (instance, model_name) ({series('vllm:num_requests_waiting', selector)})"
    return f"max by (instance, model_name) ({usage}) >= 0.95 and on (instance, model_name) {waiting} > 0"


def alert_refused(selector: str) -> str:
    name = series("http_requests_total", selector, f'handler=~"{COMPLETIONS}"', 'status="4xx"')
    return f"sum by (instance) (increase({name}[10m])) > 0"
