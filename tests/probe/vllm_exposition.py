"""Metrics texts in the shapes vLLM serves them, by version, for workloads the tests make up.

The shapes (facts from vLLM's sources): token histograms with 1-2-5 buckets up to the
window; `engine` label from 0.8.3; `_created` lines in single-process V1 servers only;
`gpu_cache_usage_perc` up to 0.11, `kv_cache_usage_perc` from 0.9.2; `cache_config_info`
a gauge at 1 whose labels carry the settings (`num_gpu_blocks="None"` in V1 0.8.x,
`kv_cache_size_tokens` from 0.24); pfi's `http_requests_total` from 0.8.5, `status`
grouped as 2xx/4xx/5xx; finished reasons stop/length/abort, plus error (0.13+) and
repetition (0.17+). The numbers are the tests' own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

CREATED = 1.7e9


@dataclass
class Shape:
    version: str
    engine_label: bool
    created_lines: bool
    usage_names: tuple[str, ...]
    blocks_filled: bool
    kv_size_tokens: bool
    http_metrics: bool
    reasons: tuple[str, ...]


SHAPES = {
    "0.6.6": Shape("0.6.6", False, False, ("vllm:gpu_cache_usage_perc",), True, False, False, ("stop", "length", "abort")),
    "0.8.5": Shape("0.8.5", True, True, ("vllm:gpu_cache_usage_perc",), False, False, True, ("stop", "length", "abort")),
    "0.10.2": Shape("0.10.2", True, True, ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), True, False, True,
                    ("stop", "length", "abort")),
    "0.33.0": Shape("0.33.0", True, True, ("vllm:kv_cache_usage_perc",), True, True, True,
                    ("stop", "length", "abort", "error", "repetition")),
}


@dataclass
class Request:
    prompt: int
    max_tokens: int
    generated: int
    finished_reason: str = "stop"


@dataclass
class Served:
    """One model on one server: its window, KV cache and the requests one 'round' finishes."""

    model: str
    max_model_len: int
    requests: list[Request]
    num_gpu_blocks: int = 20000
    block_size: int = 16
    usage: float = 0.25
    running: int = 3
    waiting: int = 0
    preemptions_per_round: int = 0
    refused_per_round: int = 0
    custom_buckets: list[float] | None = None  # --custom-histogram-buckets (0.32+)
    extra: dict = field(default_factory=dict)


def buckets_1_2_5(limit: int) -> list[float]:
    """1, 2, 5, 10, 20, 50 ... up to the largest value not above the limit."""
    bounds, magnitude = [], 1
    while True:
        for step in (1, 2, 5):
            if step * magnitude > limit:
                return [float(b) for b in bounds]
            bounds.append(step * magnitude)
        magnitude *= 10


def number(value: float) -> str:
    return repr(float(value)) if abs(value) < 1e6 else f"{value:e}"


def labels(pairs: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(pairs.items())) + "}"


def histogram(name: str, help_text: str, values: list[int], bounds: list[float], base: dict[str, str],
              rounds: int, shape: Shape) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
    for bound in [*bounds, math.inf]:
        count = sum(1 for v in values if v <= bound) * rounds
        le = "+Inf" if bound == math.inf else number(bound)
        lines.append(f"{name}_bucket{labels({**base, 'le': le})} {number(count)}")
    lines.append(f"{name}_count{labels(base)} {number(len(values) * rounds)}")
    lines.append(f"{name}_sum{labels(base)} {number(sum(values) * rounds)}")
    if shape.created_lines:
        lines += [f"# HELP {name}_created {help_text}", f"# TYPE {name}_created gauge",
                  f"{name}_created{labels(base)} {CREATED:e}"]
    return lines


def scalar(name: str, kind: str, help_text: str, series: list[tuple[dict[str, str], float]], shape: Shape) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    exposed = f"{name}_total" if kind == "counter" else name
    lines += [f"{exposed}{labels(pairs)} {number(value)}" for pairs, value in series]
    if kind == "counter" and shape.created_lines:
        lines += [f"# HELP {name}_created {help_text}", f"# TYPE {name}_created gauge"]
        lines += [f"{name}_created{labels(pairs)} {CREATED:e}" for pairs, _ in series]
    return lines


def exposition(shape_name: str, served: list[Served], rounds: int = 1) -> str:
    """The /metrics text after `rounds` rounds of each model's requests."""
    shape = SHAPES[shape_name]
    lines = ["# HELP python_info Python platform information", "# TYPE python_info gauge",
             'python_info{implementation="CPython",major="3",minor="12",patchlevel="3",version="3.12.3"} 1.0']
    for item in served:
        base = {"model_name": item.model, **({"engine": "0"} if shape.engine_label else {})}
        lines += scalar("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
                        [(base, item.running)], shape)
        lines += scalar("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
                        [(base, item.waiting)], shape)
        for name in shape.usage_names:
            lines += scalar(name, "gauge", "KV-cache usage. 1 means 100 percent usage.", [(base, item.usage)], shape)
        lines += scalar("vllm:num_preemptions", "counter", "Cumulative number of preemption from the engine.",
                        [(base, item.preemptions_per_round * rounds)], shape)
        finished = [({**base, "finished_reason": reason},
                     sum(1 for r in item.requests if r.finished_reason == reason) * rounds) for reason in shape.reasons]
        lines += scalar("vllm:request_success", "counter", "Count of successfully processed requests.", finished, shape)
        bounds = item.custom_buckets or buckets_1_2_5(item.max_model_len)
        for name, help_text, values in (
            ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", [r.prompt for r in item.requests]),
            ("vllm:request_generation_tokens", "Number of generation tokens processed.", [r.generated for r in item.requests]),
            ("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
             [r.max_tokens for r in item.requests]),
        ):
            lines += histogram(name, help_text, values, bounds, base, rounds, shape)
    lines += cache_config(shape, served[0])
    if shape.http_metrics:
        lines += http_requests(served, rounds)
    return "\n".join(lines) + "\n"


def cache_config(shape: Shape, item: Served) -> list[str]:
    settings = {"block_size": str(item.block_size), "cache_dtype": "auto", "gpu_memory_utilization": "0.9",
                "enable_prefix_caching": "True", "num_cpu_blocks": "None", "sliding_window": "None",
                "num_gpu_blocks": str(item.num_gpu_blocks) if shape.blocks_filled else "None"}
    if shape.engine_label and shape.version != "0.8.5":
        settings["engine"] = "0"
    if shape.kv_size_tokens:
        tokens = item.num_gpu_blocks * item.block_size
        settings["kv_cache_size_tokens"] = str(tokens)
        settings["kv_cache_max_concurrency"] = f"{tokens / item.max_model_len:.2f}"
    return ["# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
            "# TYPE vllm:cache_config_info gauge", f"vllm:cache_config_info{labels(settings)} 1.0"]


def http_requests(served: list[Served], rounds: int) -> list[str]:
    ok = sum(len(s.requests) for s in served) * rounds
    refused = sum(s.refused_per_round for s in served) * rounds
    lines = ["# HELP http_requests_total Total number of requests by method, status and handler.",
             "# TYPE http_requests_total counter",
             'http_requests_total{handler="/v1/models",method="GET",status="2xx"} 2.0',
             f'http_requests_total{{handler="/v1/chat/completions",method="POST",status="2xx"}} {number(ok)}']
    if refused:
        lines.append(f'http_requests_total{{handler="/v1/chat/completions",method="POST",status="4xx"}} {number(refused)}')
    return lines


def models_json(served: list[Served]) -> dict:
    """GET /v1/models as vLLM answers it (0.5.0+: max_model_len on each base-model card)."""
    cards = [{"id": s.model, "object": "model", "created": 1700000000, "owned_by": "vllm", "root": s.model,
              "parent": None, "max_model_len": s.max_model_len, "permission": []} for s in served]
    return {"object": "list", "data": cards}


def upper_bound(values: list[int], percent: int, bounds: list[float], window: int | None = None) -> float | None:
    """By hand, from the raw values: the nearest-rank percentile, then the bucket bound above it
    (the window when it is above every finite bound and the window is known; else None)."""
    ordered = sorted(values)
    value = ordered[max(1, math.ceil(percent * len(ordered) / 100)) - 1]
    above = [b for b in bounds if b >= value]
    if above:
        return above[0]
    return float(window) if window is not None else None
