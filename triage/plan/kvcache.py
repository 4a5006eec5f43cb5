"""KV-cache arithmetic shared by the startup diagnosis and the planner.

vLLM hands the KV cache out in blocks of ``block_size`` tokens, so every capacity
is a whole number of blocks: the tokens that fit round down, the memory a
sequence needs rounds up.
"""

from __future__ import annotations

GIB = 1024**3
DEFAULT_BLOCK_SIZE = 16


def round_down(value: float, multiple: int) -> int:
    return int(value // multiple) * int(multiple)


def round_up(value: float, multiple: int) -> int:
    return -int(-value // multiple) * int(multiple)


def tokens_that_fit(kv_bytes: float, bytes_per_token: float, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """Token capacity of a KV pool: whole blocks of block_size tokens."""
    if kv_bytes <= 0 or bytes_per_token <= 0:
        return 0
    blocks = int(kv_bytes // (bytes_per_token * block_size))
    return blocks * block_size


def bytes_for_tokens(tokens: int, bytes_per_token: float, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """Memory one sequence of `tokens` occupies: rounded up to whole blocks."""
    return int(round_up(tokens, block_size) * bytes_per_token)


# ---------------------------------------------------------------------------------------
# What one sequence holds, the way vLLM's V1 KV-cache specs compute it
# (vllm/v1/kv_cache_interface.py: page_size_bytes, max_memory_usage_bytes).
# ---------------------------------------------------------------------------------------

DTYPE_BYTES = {
    "float32": 4, "float": 4, "fp32": 4,
    "bfloat16": 2, "float16": 2, "half": 2, "bf16": 2, "fp16": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
}


def dtype_bytes(name: str) -> int:
    try:
        return DTYPE_BYTES[name.lower()]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r} (known: {', '.join(sorted(DTYPE_BYTES))})") from None


def cdiv(value: int, divisor: int) -> int:
    return -(-int(value) // int(divisor))


def kv_heads_per_gpu(kv_heads: int, tensor_parallel_size: int) -> int:
    """KV heads split across tensor-parallel ranks, replicated (never below 1) when there are fewer."""
    return max(1, kv_heads // tensor_parallel_size)


def attention_bytes_per_token(kv_heads: int, head_dim: int, kv_dtype_bytes: int, tensor_parallel_size: int = 1) -> int:
    """One full- or sliding-attention layer: a key and a value vector per KV head on this GPU."""
    return 2 * kv_heads_per_gpu(kv_heads, tensor_parallel_size) * head_dim * kv_dtype_bytes


def mla_bytes_per_token(kv_lora_rank: int, qk_rope_head_dim: int, kv_dtype_bytes: int) -> int:
    """One MLA layer: the compressed latent plus the rope key, no factor 2, the same on every TP rank."""
    return (kv_lora_rank + qk_rope_head_dim) * kv_dtype_bytes


def sliding_window_bytes(
    sliding_window: int,
    max_model_len: int,
    bytes_per_token: int,
    block_size: int = DEFAULT_BLOCK_SIZE,
    max_num_batched_tokens: int = 2048,
) -> int:
    """Most memory one sequence holds in a sliding-window layer, whatever its length.

    The window minus one token plus one scheduler step's new tokens, never more than
    max_model_len, plus one block because the window need not start on a block boundary.
    """
    tokens = min(sliding_window - 1 + max_num_batched_tokens, max_model_len)
    return (cdiv(tokens, block_size) + 1) * block_size * bytes_per_token


def estimate_max_model_len(fits, upper: int) -> int:
    """Largest length in 1..upper for which fits(length) holds, 0 if none: vLLM's binary search."""
    if upper < 1 or not fits(1):
        return 0
    low, high, best = 1, upper, 1
    while low <= high:
        middle = (low + high) // 2
        if fits(middle):
            best, low = middle, middle + 1
        else:
            high = middle - 1
    return best


def format_gib(num_bytes: float) -> str:
    """GiB the way vLLM >= 0.22 prints them in startup errors: str(round(bytes / 2**30, 2))."""
    return str(round(num_bytes / GIB, 2))
