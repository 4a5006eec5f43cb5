"""Common GPUs by name, with the memory the planner assumes for each.

Each figure is the card's total as ``nvidia-smi --query-gpu=memory.total`` prints it (MiB;
``rocm-smi`` for the MI300X), so anyone can check it on their own card. The CUDA runtime,
which is what vLLM reads, reports about 0.5% less (an H100 80GB shows 81559 MiB = 79.65 GiB
in nvidia-smi and about 79.19 GiB in torch): that difference is part of the overhead
allowance, and ``--gpu-memory`` takes your own figure when you want it exact.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MIB = 1024**2


@dataclass(frozen=True, slots=True)
class Gpu:
    """A GPU model of the table: its name, memory and the names it goes by."""

    name: str
    memory_mib: int
    aliases: tuple[str, ...] = ()

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB


GPUS: tuple[Gpu, ...] = (
    Gpu("B200", 183359, ("b200 180gb", "b200 sxm", "hgx b200", "dgx b200")),
    Gpu("H200", 143771, ("h200 141gb", "h200 sxm", "h200 nvl")),
    Gpu("H100 80GB", 81559, ("h100", "h100 sxm", "h100 pcie", "h100 sxm5", "h100 80gb hbm3", "h800")),
    Gpu("H100 NVL", 95830, ("h100 94gb", "h100nvl")),
    Gpu("A100 80GB", 81920, ("a100", "a100 sxm4 80gb", "a100 pcie 80gb")),
    Gpu("A100 40GB", 40960, ("a100 sxm4 40gb", "a100 pcie 40gb")),
    Gpu("L40S", 46068, ("l40s 48gb",)),
    Gpu("L4", 23034, ("l4 24gb",)),
    Gpu("A10G", 23028, ("a10g 24gb",)),
    Gpu("RTX 4090", 24564, ("4090", "geforce rtx 4090")),
    Gpu("RTX 3090", 24576, ("3090", "geforce rtx 3090")),
    Gpu("MI300X", 196288, ("mi300", "instinct mi300x", "amd mi300x")),
)


class UnknownGpu(ValueError):
    pass


# Vendor, product-line and form-factor words that collect-env and nvidia-smi add to a name
# ("NVIDIA A100 80GB PCIe", "AMD Instinct MI300X", "NVIDIA H100 80GB HBM3").
NOISE_WORDS = re.compile(r"\b(?:nvidia|amd|instinct|geforce|tesla|pcie|sxm\d?|hbm\d?e?)\b")


def _key(name: str) -> str:
    text = name.lower().replace("-", " ").replace("_", " ")
    return re.sub(r"\s+", "", NOISE_WORDS.sub(" ", text))


_BY_KEY = {_key(alias): gpu for gpu in GPUS for alias in (gpu.name, *gpu.aliases)}


def find(name: str) -> Gpu:
    """The GPU for a name, forgiving about case, spaces, dashes and an "NVIDIA" prefix."""
    gpu = _BY_KEY.get(_key(name))
    if gpu is None:
        known = ", ".join(g.name for g in GPUS)
        raise UnknownGpu(f"unknown GPU {name!r}; known: {known} (or give --gpu-memory, e.g. 80GiB)")
    return gpu
