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
