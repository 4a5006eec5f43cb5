"""The five length knobs of vLLM, and the KV cache that decides them all, as data.

`vllm-triage explain` prints this table; report/rules_format.py does the formatting. The
text is ours; version numbers are the releases where a behaviour starts or ends.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Knob:
    topic: str  # what `vllm-triage explain TOPIC` accepts
    title: str
    aliases: tuple[str, ...]
    set_where: str
    limits: str
    when_exceeded: str
    notes: str
    rules: tuple[str, ...]  # related rule codes


KNOBS: tuple[Knob, ...] = (
    Knob(
        topic="context-window",
        title="context window (max_position_embeddings, rope scaling)",
        aliases=("window", "max_position_embeddings", "rope", "rope_scaling", "derived_max_model_len"),
        set_where=(
            "The model's config.json: max_position_embeddings (or n_positions, seq_length, ...), "
            "times the rope_scaling factor when the model extends its context. vLLM calls the "
            "result the derived max_model_len."
        ),
        limits="The longest sequence the model was trained or scaled for; the ceiling for --max-model-len.",
        when_exceeded=(
            "A larger --max-model-len is refused at startup, unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 "
            "is set; then positions past the window give NaNs (RoPE) or CUDA index errors "
            "(absolute positions)."
        ),
        notes=(
            "No length key in config.json: vLLM assumes 2048. Older backends capped models with "
            "interleaved sliding window at the window size. LongRoPE models default to their "
            "original length from vLLM 0.11.1."
        ),
        rules=("VT401", "VT406", "VT407", "VT408", "VT409"),
    ),
    Knob(
        topic="max-model-len",
        title="max_model_len (--max-model-len)",
        aliases=("max_model_len", "--max-model-len", "max_seq_len", "window-size"),
        set_where=(
            "Engine flag --max-model-len (max_model_len in LLM(...)); by default the context "
            "window. From vLLM 0.14, --max-model-len auto (or -1) picks the longest window the KV "
            "cache can hold. A shorter speculative draft model lowers it (0.33+)."
        ),
        limits="Prompt plus completion of one request: the length any one sequence may reach.",
        when_exceeded=(
            "The request is refused before generation with HTTP 400 (requests that reached the "
            "V0 scheduler were ignored instead, with an empty output). A larger value needs a "
            "restart and KV-cache room for one full-length sequence, or the engine refuses to start."
        ),
        notes=(
            "The number in the error is the served window, which may be smaller than the model "
            "card says: set by the flag, derived from config.json, or cut at startup."
        ),
        rules=("VT101", "VT102", "VT103", "VT104", "VT105", "VT107", "VT108", "VT110", "VT201", "VT305", "VT403", "VT410"),
    ),
    Knob(
        topic="max-tokens",
        title="max_tokens / max_completion_tokens",
        aliases=("max_tokens", "max_completion_tokens", "completion", "output-tokens"),
        set_where=(
            "The request body. For chat, max_completion_tokens (vLLM 0.6.4+) replaces the "
            "deprecated max_tokens and wins when both are sent; completions keep max_tokens. "
            "Omitted: whatever the window leaves after the prompt."
        ),
        limits="New tokens generated for that request.",
        when_exceeded=(
            "Counted together with the prompt against max_model_len. Up to vLLM 0.31, "
            "prompt + max_tokens over the window is refused (HTTP 400). From 0.32 an over-large "
            "value is clamped to what the window leaves; only a value larger than the whole "
            "window, or a prompt that fills it alone, is refused. Below 1 is always refused."
        ),
        notes="Compute it per request as max_model_len minus the prompt's tokens (`vllm-triage budget`).",
        rules=("VT101", "VT103", "VT106", "VT109"),
    ),
    Knob(
        topic="max-num-batched-tokens",
        title="max_num_batched_tokens (--max-num-batched-tokens)",
        aliases=("max_num_batched_tokens", "--max-num-batched-tokens", "batched-tokens", "chunked-prefill"),
        set_where=(
            "Engine flag --max-num-batched-tokens. The config class default is 2048; servers "
            "with chunked prefill pick larger defaults that depend on the version and GPU."
        ),
        limits="Tokens processed in one scheduler step, summed over every sequence in the batch.",
        when_exceeded=(
            "Never fails a request: work past the budget waits for the next step, and long "
            "prompts are prefilled in chunks. With chunked prefill off it must be at least "
            "max_model_len or the engine refuses to start (on V0, longer prompts were ignored)."
        ),
        notes="It also sizes the activation peak profiled at startup, which comes out of the KV cache.",
        rules=("VT402", "VT110", "VT411", "VT304"),
    ),
    Knob(
        topic="max-num-seqs",
        title="max_num_seqs (--max-num-seqs)",
        aliases=("max_num_seqs", "--max-num-seqs", "concurrency", "batch-size"),
        set_where="Engine flag --max-num-seqs; the default depends on the version and GPU.",
        limits="Sequences running in one scheduler step.",
        when_exceeded=(
            "Never fails a request: the rest wait in the queue. More running sequences need more "
            "KV blocks at once, so a high value on a small cache means preemption."
        ),
        notes="At startup the sampler is warmed up with this many dummy requests; too many can run out of memory.",
        rules=("VT301", "VT303", "VT304"),
    ),
)

KV_CACHE = Knob(
    topic="kv-cache",
    title="KV-cache memory (decides them all)",
    aliases=("kv", "kv_cache", "gpu-memory-utilization", "gpu_memory_utilization", "memory"),
    set_where=(
        "At startup vLLM takes --gpu-memory-utilization of each GPU (default 0.9), subtracts the "
        "weights, the profiled activation peak and (from 0.21) CUDA graphs, and turns the rest "
        "into KV blocks. --kv-cache-memory-bytes (0.10.2+) sets the size directly; "
        "--kv-cache-dtype fp8 halves the bytes per token; tensor parallel spreads it over GPUs."
    ),
    limits="The tokens that all running sequences may hold at the same time.",
    when_exceeded=(
        "At startup: when one max_model_len sequence does not fit, the engine refuses to start "
        "(newer versions print the longest window that would). While serving: sequences are "
        "preempted and requests queue."
    ),
    notes=(
        "Every other knob is bounded by it: the window must fit in it once, max_num_seqs "
        "sequences share it, and the batch budget's activations come out of the same memory."
    ),
    rules=("VT201", "VT202", "VT203", "VT204", "VT205", "VT206", "VT301", "VT302", "VT303", "VT111"),
)

TOPICS: tuple[Knob, ...] = (*KNOBS, KV_CACHE)


def find_topic(name: str) -> Knob | None:
    wanted = name.strip().lower().replace("_", "-")
    for knob in TOPICS:
        names = (knob.topic, *knob.aliases)
        if wanted in {n.lower().replace("_", "-") for n in names}:
            return knob
    return None


def topic_names() -> list[str]:
    return [knob.topic for knob in TOPICS]
