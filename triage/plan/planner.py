"""Plan ahead: what --max-model-len, concurrency and max_tokens a model and GPU allow.

Pure functions from figures to dataclasses; reading the model is modelconfig's job, the
KV arithmetic is kvcache's, and formatting is report.plan_format's.

Memory on one GPU, the way vLLM's V1 engine divides it at startup:

    kv_memory = gpu_memory * gpu_memory_utilization - weights_per_gpu - overhead

where overhead stands for what vLLM measures by profiling (activation peak, CUDA graphs,
non-torch memory such as NCCL buffers). We cannot profile, so it is an allowance the user
can replace with the figure from their own log. ``--kv-cache-memory`` skips all of it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from triage.plan import kvcache
from triage.plan.kvcache import GIB
from triage.plan.modelconfig import FULL, MLA, SLIDING, STATE_KINDS, ModelConfig

DEFAULT_OVERHEAD_BYTES = 2 * GIB
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
DEFAULT_MAX_NUM_SEQS = 256  # vLLM's default for the OpenAI server on a GPU (the engine class says 128)
NO_MEMORY_MESSAGE = (
    "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
    "initializing the engine (this flag also controls CPU memory reservation on the CPU backend, "
    "despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
)
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {
    "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}


class PlanError(ValueError):
    """Figures that do not make a plan; the message is one line for the user."""


def parse_size(text: str) -> int:
    """Bytes in a size: "80GiB", "80 GiB", "81559MiB"; GB/MB are decimal (1e9), a bare number is GiB."""
    match = _SIZE.match(str(text))
    unit = (match.group(2) or "gib").lower() if match else ""
    if not match or unit not in _UNITS:
        raise PlanError(f"cannot read size {text!r}: write e.g. 80GiB, 81559MiB or 85GB (GB = 1e9 bytes, GiB = 2**30)")
    return int(float(match.group(1)) * _UNITS[unit])


@dataclass(frozen=True, slots=True)
class PlanInputs:
    gpu_memory_bytes: int | None = None  # one GPU's total; None only with kv_cache_memory_bytes
    gpu_name: str | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    kv_cache_dtype: str = "auto"
    dtype: str = "auto"
    block_size: int = kvcache.DEFAULT_BLOCK_SIZE
    max_model_len: int | None = None  # None: the length vLLM derives from the config
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
    weights_bytes: int | None = None  # overrides what the model folder says
    kv_cache_memory_bytes: int | None = None  # like vLLM's --kv-cache-memory-bytes: per GPU, no utilization arithmetic
    overhead_bytes: int = DEFAULT_OVERHEAD_BYTES
    concurrency_length: int | None = None  # also say how many sequences of this length fit at once


@dataclass(frozen=True, slots=True)
class Scenario:
    """One configuration worked out on the GPU that has the least room (pipeline ranks differ)."""

    label: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    kv_cache_dtype: str
    kv_dtype_bytes: int
    weights_per_gpu: int
    kv_memory_per_gpu: int
    bytes_per_token: int  # per GPU, layers whose memory grows with the sequence (full attention, MLA)
    bytes_per_block: int
    fixed_bytes_per_sequence: int  # per GPU at max_model_len: sliding windows and Mamba/linear state
    kv_tokens: int  # tokens of growing KV that fit (what vLLM logs as "GPU KV cache size")
    max_model_len: int
    sequence_bytes: int  # one max_model_len sequence; vLLM's "KV cache is needed"
    max_model_len_that_fits: int  # vLLM's estimate, capped at the model's own context length
    concurrency: float  # max_model_len sequences at once; vLLM's "Maximum concurrency"
    concurrency_length: int  # the length the next figure is for (max_model_len unless asked)
    concurrency_at_length: float  # sequences of concurrency_length at once
    would_start: bool
    startup_error: str | None = None


@dataclass(slots=True)
class PlanResult:
    model: str
    architecture: str
    layers: dict[str, int]  # layer kind -> count
    kv_heads: int
    head_dim: int
    context_length: int  # the length vLLM derives from the config
    context_key: str
    weights_bytes: int
    weights_source: str
    weights_exact: bool
    gpu_name: str | None
    gpu_memory_bytes: int | None
    gpu_memory_utilization: float
    overhead_bytes: int
    kv_memory_given: bool
    dtype: str
    block_size: int
    max_num_seqs: int
    scenarios: list[Scenario]
    notes: list[str] = field(default_factory=list)


def serving_dtype(config_dtype: str, requested: str = "auto") -> str:
    """vLLM's --dtype auto: the config's dtype, except float32 models are served in 16 bits."""
    if requested != "auto":
        return requested
    name = config_dtype.lower().replace("torch.", "")
    if name not in kvcache.DTYPE_BYTES or kvcache.DTYPE_BYTES[name] != 2:
        return "bfloat16"
    return name


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype: str) -> int:
    return kvcache.dtype_bytes(model_dtype if kv_cache_dtype == "auto" else kv_cache_dtype)


def pipeline_layers(num_layers: int, pipeline_parallel_size: int) -> list[range]:
    """Layers per pipeline rank as vLLM splits them: evenly, the remainder to the ranks before the last."""
    sizes = [num_layers // pipeline_parallel_size] * pipeline_parallel_size
    for offset in range(2, num_layers % pipeline_parallel_size + 2):
        sizes[-offset] += 1
    ranges, start = [], 0
    for size in sizes:
        ranges.append(range(start, start + size))
        start += size
    return ranges


@dataclass(frozen=True, slots=True)
class RankKV:
    """What one sequence costs on one GPU: the part that grows per token, and the rest."""

    bytes_per_token: int
    sliding: tuple[tuple[int, int], ...]  # (window, bytes per token) per sliding layer
    state_bytes: int

    def sequence_bytes(self, length: int, block_size: int, max_num_batched_tokens: int) -> int:
        """vLLM's max_memory_usage_bytes summed over this GPU's layers, for one sequence of `length`."""
        total = kvcache.bytes_for_tokens(length, self.bytes_per_token, block_size)
        for window, per_token in self.sliding:
            total += kvcache.sliding_window_bytes(window, length, per_token, block_size, max_num_batched_tokens)
        return total + self.state_bytes


def rank_kv(model: ModelConfig, layers: range, tp: int, kv_bytes: int, state_dtype_bytes: int) -> RankKV:
    growing, sliding, state = 0, [], 0
    for spec in (model.layers[i] for i in layers):
        if spec.kind in (FULL, MLA):
            growing += spec.bytes_per_token(kv_bytes, tp)
        elif spec.kind == SLIDING:
            sliding.append((spec.sliding_window, spec.bytes_per_token(kv_bytes, tp)))
        elif spec.kind in STATE_KINDS:
            state += spec.state_bytes(state_dtype_bytes, tp)
    return RankKV(growing, tuple(sliding), state)


def bytes_per_token(model: ModelConfig, kv_cache_dtype: str = "auto", dtype: str = "auto", tensor_parallel_size: int = 1) -> int:
    """KV bytes per token per GPU over full-attention and MLA layers (sliding and state layers excluded)."""
    served = serving_dtype(model.dtype, dtype)
    kv = kv_dtype_bytes(kv_cache_dtype, served)
    layers = range(len(model.layers))
    return rank_kv(model, layers, tensor_parallel_size, kv, kvcache.dtype_bytes(served)).bytes_per_token


def check_parallel(model: ModelConfig, tp: int, pp: int) -> None:
    if tp < 1 or pp < 1:
        raise PlanError("--tensor-parallel-size and --pipeline-parallel-size must be at least 1")
    if model.num_attention_heads % tp:
        raise PlanError(
            f"--tensor-parallel-size {tp} does not divide the model's {model.num_attention_heads} attention heads; "
            f"vLLM refuses it (try {next_tensor_parallel_size(model, tp - 1)})"
        )
    if pp > len(model.layers):
        raise PlanError(f"--pipeline-parallel-size {pp} is more than the model's {len(model.layers)} layers")


def next_tensor_parallel_size(model: ModelConfig, tp: int) -> int:
    """The smallest TP size above tp that divides the attention heads: 'one more GPU' vLLM accepts."""
    candidate = tp + 1
    while model.num_attention_heads % candidate:
        candidate += 1
    return candidate


def plan(model: ModelConfig, inputs: PlanInputs) -> PlanResult:
    tp, pp = inputs.tensor_parallel_size, inputs.pipeline_parallel_size
    check_parallel(model, tp, pp)
    if inputs.kv_cache_memory_bytes is None and inputs.gpu_memory_bytes is None:
        raise PlanError("say how much memory a GPU has: --gpu NAME, --gpu-memory SIZE, or --kv-cache-memory SIZE")
    if not 0 < inputs.gpu_memory_utilization <= 1:
        raise PlanError("--gpu-memory-utilization must be above 0 and at most 1")
    if min(inputs.block_size, inputs.max_num_seqs, inputs.max_num_batched_tokens, inputs.concurrency_length or 1) < 1:
        raise PlanError("--block-size, --max-num-seqs, --max-num-batched-tokens and --concurrency-at must be at least 1")
    served = serving_dtype(model.dtype, inputs.dtype)
    weights = inputs.weights_bytes
    notes = list(model.notes)
    if weights is None:
        weights = model.weights.at_dtype_bytes(kvcache.dtype_bytes(served))
        if not model.weights.exact:
            notes.append(f"weights are an {model.weights.source}; give --weights-gib or a folder with the weights for the real figure")
        elif kvcache.DTYPE_BYTES.get(model.dtype.lower(), 2) != kvcache.dtype_bytes(served):
            notes.append(f"weights are the size on disk ({model.dtype}); served as {served} they take a different amount")
    if model.kinds - {FULL, MLA}:
        notes.append(
            "KV tokens count the layers that grow with the sequence; the sliding-window and state memory per sequence "
            "comes on top, and the length and concurrency figures include it"
        )
    if pp > 1:
        notes.append("with pipeline parallelism weights are split evenly here; the first and last ranks also hold the embeddings")
    if MLA in model.kinds:
        notes.append("fp8 MLA cache: some MLA backends store extra scale bytes per token; the figure is the plain latent size")
    scenarios = [scenario(model, inputs, weights, served, "as given")]
    if inputs.kv_cache_dtype == "auto":
        scenarios.append(scenario(model, replace(inputs, kv_cache_dtype="fp8"), weights, served, "fp8 KV cache"))
    more = next_tensor_parallel_size(model, tp)
    reason = "one more GPU" if more == tp + 1 else f"next size dividing {model.num_attention_heads} heads"
    scenarios.append(scenario(model, replace(inputs, tensor_parallel_size=more), weights, served, f"TP {more} ({reason})"))
    counts: dict[str, int] = {}
    for spec in model.layers:
        counts[spec.kind] = counts.get(spec.kind, 0) + 1
    attention = next((s for s in model.layers if s.kind in (FULL, SLIDING)), None)
    return PlanResult(
        model=model.name,
        architecture=model.architecture,
        layers=counts,
        kv_heads=attention.kv_heads if attention else 0,
        head_dim=attention.head_dim if attention else 0,
        context_length=model.max_model_len,
        context_key=model.max_len_key,
        weights_bytes=weights,
        weights_source="--weights-gib" if inputs.weights_bytes is not None else model.weights.source,
        weights_exact=inputs.weights_bytes is not None or model.weights.exact,
        gpu_name=inputs.gpu_name,
        gpu_memory_bytes=inputs.gpu_memory_bytes,
        gpu_memory_utilization=inputs.gpu_memory_utilization,
        overhead_bytes=inputs.overhead_bytes,
        kv_memory_given=inputs.kv_cache_memory_bytes is not None,
        dtype=served,
        block_size=inputs.block_size,
        max_num_seqs=inputs.max_num_seqs,
        scenarios=scenarios,
        notes=notes,
    )


def kv_memory_per_gpu(inputs: PlanInputs, weights_per_gpu: int) -> int:
    if inputs.kv_cache_memory_bytes is not None:
        return inputs.kv_cache_memory_bytes
    assert inputs.gpu_memory_bytes is not None
    requested = int(inputs.gpu_memory_bytes * inputs.gpu_memory_utilization)
    return requested - weights_per_gpu - inputs.overhead_bytes


def scenario(model: ModelConfig, inputs: PlanInputs, weights: int, served: str, label: str) -> Scenario:
    tp, pp, block = inputs.tensor_parallel_size, inputs.pipeline_parallel_size, inputs.block_size
    kv_bytes = kv_dtype_bytes(inputs.kv_cache_dtype, served)
    weights_per_gpu = math.ceil(weights / (tp * pp))
    available = kv_memory_per_gpu(inputs, weights_per_gpu)
    length = inputs.max_model_len or model.max_model_len
    batched = inputs.max_num_batched_tokens
    ranks = [rank_kv(model, layers, tp, kv_bytes, kvcache.dtype_bytes(served)) for layers in pipeline_layers(len(model.layers), pp)]
    worst = max(ranks, key=lambda r: (r.sequence_bytes(length, block, batched), r.bytes_per_token))
    needed = worst.sequence_bytes(length, block, batched)
    per_block = worst.bytes_per_token * block

    def fits(candidate: int) -> bool:
        return all(r.sequence_bytes(candidate, block, batched) <= available for r in ranks)

    upper = max(length, model.max_model_len)
    estimate = kvcache.estimate_max_model_len(fits, upper) if available > 0 else 0
    fits_model = min(estimate, model.max_model_len)
    if available <= 0:
        usable = 0
    elif per_block:
        usable = kvcache.round_down(available, per_block)
    else:
        usable = available
    kv_tokens = kvcache.tokens_that_fit(available, worst.bytes_per_token, block)
    concurrency = usable / needed if needed else 0.0
    at_length = inputs.concurrency_length or length
    at_bytes = worst.sequence_bytes(at_length, block, batched)
    error = None
    if available <= 0:
        error = NO_MEMORY_MESSAGE
    elif length > model.max_model_len:
        error = (
            f"User-specified max_model_len ({length}) is greater than the derived max_model_len "
            f"({model.max_len_key}={model.max_model_len} or model_max_length=None in model's config.json). "
            "To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. ..."
        )
    elif needed > available:
        error = startup_message(length, needed, available, estimate)
    return Scenario(
        label=label,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        kv_cache_dtype=inputs.kv_cache_dtype if inputs.kv_cache_dtype != "auto" else f"auto ({served})",
        kv_dtype_bytes=kv_bytes,
        weights_per_gpu=weights_per_gpu,
        kv_memory_per_gpu=available,
        bytes_per_token=worst.bytes_per_token,
        bytes_per_block=per_block,
        fixed_bytes_per_sequence=needed - kvcache.bytes_for_tokens(length, worst.bytes_per_token, block),
        kv_tokens=kv_tokens,
        max_model_len=length,
        sequence_bytes=needed,
        max_model_len_that_fits=fits_model,
        concurrency=concurrency,
        concurrency_length=at_length,
        concurrency_at_length=usable / at_bytes if at_bytes else 0.0,
        would_start=error is None,
        startup_error=error,
    )


def startup_message(max_model_len: int, needed_bytes: int, available_bytes: int, estimated_max_len: int) -> str:
    """The ValueError vLLM >= 0.22 raises when one max_model_len sequence does not fit."""
    estimated = (
        f"Based on the available memory, the estimated maximum model length is {estimated_max_len}. "
        if estimated_max_len > 0 else ""
    )
    return (
        f"To serve at least one request with the model's max seq len ({max_model_len}), "
        f"({kvcache.format_gib(needed_bytes)} GiB KV cache is needed, which is larger than the available "
        f"KV cache memory ({kvcache.format_gib(available_bytes)} GiB). {estimated}"
        "Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or "
        "decreasing `max_model_len` when initializing the engine. "
        "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    )


# --- budget ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BudgetResult:
    max_model_len: int
    prompt_tokens: int
    margin: int
    max_tokens: int  # largest max_tokens to send; 0 when the prompt must be cut
    cut_tokens: int  # tokens to remove from the prompt to get even one new token; 0 when it fits
    counted_by: str  # "--prompt-tokens" or the tokenizer file


def budget(max_model_len: int, prompt_tokens: int, margin: int = 0, counted_by: str = "--prompt-tokens") -> BudgetResult:
    """vLLM rejects a request when prompt + max_tokens > max_model_len; it needs max_tokens >= 1."""
    if max_model_len < 1 or prompt_tokens < 0 or margin < 0:
        raise PlanError("--max-model-len must be at least 1; --prompt-tokens and --margin cannot be negative")
    room = max_model_len - prompt_tokens - margin
    if room >= 1:
        return BudgetResult(max_model_len, prompt_tokens, margin, room, 0, counted_by)
    return BudgetResult(max_model_len, prompt_tokens, margin, 0, 1 - room, counted_by)


def parallel_sizes(gpus: int | None, tensor_parallel_size: int | None, pipeline_parallel_size: int | None) -> tuple[int, int]:
    """TP and PP from --gpus and the sizes given: --gpus alone means tensor parallel over all of them."""
    pp = pipeline_parallel_size or 1
    tp = tensor_parallel_size or (gpus // pp if gpus else 1)
    if gpus is not None and tp * pp != gpus:
        raise PlanError(f"--gpus {gpus} is not --tensor-parallel-size {tp} x --pipeline-parallel-size {pp}")
    if tp < 1 or pp < 1:
        raise PlanError("--gpus, --tensor-parallel-size and --pipeline-parallel-size must be at least 1")
    return tp, pp
