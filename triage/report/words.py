"""The figures a finding took from elsewhere in its log, named in words a person reads.

Fact names are the rules' own (``kv_tokens``, ``max_model_len_set``); a report names each
as vLLM's flag or log wording where there is one, else in plain words. A fact of a custom
rule that has no entry here reads as its name with spaces.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from triage.rules.expr import format_value

# fact name -> words around its value ({} is the value as format_value writes it);
# None: a flag that says how the others were found, never printed.
FACT_WORDS: dict[str, str | None] = {
    "assumed_model_len": "a window of {} tokens assumed",
    "auto_fit_from": "auto-fit from {} tokens",
    "auto_fit_full": None,
    "block_size": "block size {}",
    "budget_gib": "{} GiB for vLLM per GPU",
    "bytes_per_token": "{} bytes of KV cache per token",
    "chunked_prefill": "chunked prefill {}",
    "concurrency": "maximum concurrency {}x",
    "concurrency_tokens": "at {} tokens per request",
    "cpu_blocks": "{} CPU blocks",
    "cuda_version": "CUDA {}",
    "data_parallel_size": "data parallel {}",
    "derived_max_model_len": "a window of {} tokens from config.json",
    "device": "device {}",
    "draft_cap_from": "cut by the draft model from {} tokens",
    "draft_max_model_len": "a draft model window of {} tokens",
    "driver_version": "driver {}",
    "dtype": "dtype {}",
    "free_gib": "{} GiB free at startup",
    "gpu_blocks": "{} GPU blocks",
    "gpu_count": "{} GPUs",
    "gpu_line": None,
    "gpu_memory_utilization": "--gpu-memory-utilization {}",
    "gpu_name": "{}",
    "kv_cache_dtype": "--kv-cache-dtype {}",
    "kv_device": "KV cache on {}",
    "kv_gib_available": "{} GiB available for the KV cache",
    "kv_tokens": "a KV cache of {} tokens",
    "kv_usage_at_start_pct": "{}% of the KV cache in use at the first metrics line",
    "kv_usage_pct": "{}% of the KV cache in use",
    "max_len_key": None,
    "max_model_len": "max_model_len {}",
    "max_model_len_set": None,  # said by user_max_model_len, which comes with it
    "max_num_batched_tokens": "--max-num-batched-tokens {}",
    "max_num_seqs": "--max-num-seqs {}",
    "max_position_embeddings": "max_position_embeddings {}",
    "model": "model {}",
    "original_max_position_embeddings": "an original window of {} tokens",
    "other_gib": "{} GiB taken by neither weights nor KV cache",
    "pipeline_parallel_size": "pipeline parallel {}",
    "ready": None,
    "requested_gib": "{} GiB asked of each GPU",
    "sliding_window_cap": "capped to the sliding window of {} tokens",
    "tensor_parallel_size": "tensor parallel {}",
    "torch_version": "torch {}",
    "total_gib": "{} GiB per GPU",
    "total_gib_from": None,  # the fixes that use the table's figure say so
    "user_max_model_len": "started with --max-model-len {}",
    "version": "vLLM {}",
    "weights_gib": "weights {} GiB",
}
ROUNDED = {"bytes_per_token": ",.0f"}  # a derived ratio: whole bytes, as a person would say it


def fact_words(facts: Mapping[str, Any]) -> str:
    """'name value, ...' in words: "started with --max-model-len 16,384, a KV cache of 47,024 tokens"."""
    said = []
    for name, value in facts.items():
        words = FACT_WORDS.get(name, name.replace("_", " ") + " {}")
        if words is not None:
            said.append(words.format(format_value(value, ROUNDED.get(name))))
    return ", ".join(said)
