"""A model as the planner needs it: layers and what each holds in the KV cache, the weights' size.

Reads a local ``config.json`` (or a model folder holding one) and nothing else: no
download, no ``transformers``. The weights' size comes from
``model.safetensors.index.json`` (``metadata.total_size``), else from the headers of the
``*.safetensors`` files, else it is estimated from the architecture and marked so.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triage.plan import kvcache

FULL, SLIDING, MLA, LINEAR, MAMBA = "full", "sliding", "mla", "linear", "mamba"
STATE_KINDS = (LINEAR, MAMBA)
# Keys vLLM reads for the model's own context length (vllm/config/model.py, _get_and_verify_max_len).
MAX_LEN_KEYS = (
    "max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
    "model_max_length", "max_sequence_length", "max_seq_length", "seq_len",
)
NESTED_TEXT_KEYS = ("text_config", "llm_config", "language_config")
SAFETENSORS_DTYPE_BYTES = {
    "F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2,
    "U16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1,
}
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors format's own limit
# transformers' defaults for keys that hub configs often leave out.
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"max_position_embeddings": 131072, "sliding_window_pattern": 6, "sliding_window": 4096},
    "gemma2": {"max_position_embeddings": 8192, "sliding_window": 4096},
}


class ModelConfigError(ValueError):
    """The config or the weights cannot be read; the message is one line for the user."""


@dataclass(frozen=True, slots=True)
class LayerSpec:
    """What one decoder layer keeps per sequence. Sizes are per model, before tensor parallelism."""

    kind: str
    kv_heads: int = 0
    head_dim: int = 0
    sliding_window: int = 0
    latent_dim: int = 0  # MLA: kv_lora_rank + qk_rope_head_dim
    # Constant-size state of Mamba / linear-attention layers, in elements:
    # (conv elements, recurrent elements) and how many heads each splits into across TP.
    conv_elements: int = 0
    state_elements: int = 0

    def bytes_per_token(self, kv_dtype_bytes: int, tensor_parallel_size: int = 1) -> int:
        """Bytes per token this layer stores on one GPU (0 for state layers)."""
        if self.kind in (FULL, SLIDING):
            return kvcache.attention_bytes_per_token(self.kv_heads, self.head_dim, kv_dtype_bytes, tensor_parallel_size)
        if self.kind == MLA:
            return kvcache.mla_bytes_per_token(self.latent_dim, 0, kv_dtype_bytes)
        return 0

    def state_bytes(self, state_dtype_bytes: int, tensor_parallel_size: int = 1) -> int:
        """Bytes of constant state one sequence holds in this layer on one GPU."""
        if self.kind not in STATE_KINDS:
            return 0
        return (self.conv_elements + self.state_elements) * state_dtype_bytes // tensor_parallel_size


@dataclass(frozen=True, slots=True)
class Weights:
    bytes: int  # on disk when exact; at the config's dtype when estimated
    source: str  # where the figure comes from, said to the user
    exact: bool
    parameters: int = 0  # estimates only: the parameter count behind the bytes
    bytes_per_parameter: float = 0.0  # estimates only: fixed by quantization, else 0 (the serving dtype decides)

    def at_dtype_bytes(self, dtype_bytes: int) -> int:
        """The weights in GPU memory when served at a dtype of this many bytes (estimates follow it)."""
        if self.exact or self.bytes_per_parameter:
            return self.bytes
        return self.parameters * dtype_bytes


@dataclass(slots=True)
class ModelConfig:
    name: str
    path: str
    model_type: str
    architecture: str
    dtype: str  # the config's torch_dtype / dtype
    layers: list[LayerSpec]
    num_attention_heads: int
    hidden_size: int
    max_model_len: int  # the context length vLLM derives from the config
    max_len_key: str
    weights: Weights
    quantization: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def kinds(self) -> set[str]:
        return {layer.kind for layer in self.layers}


def load(path: str | Path) -> ModelConfig:
    """A model from a config.json file or a folder holding one (and perhaps its weights)."""
    path = Path(path)
    if path.is_dir():
        folder, config_path = path, path / "config.json"
        if not config_path.is_file():
            raise ModelConfigError(f"{path}: no config.json in this folder")
    elif path.is_file():
        folder, config_path = None, path
    else:
        raise ModelConfigError(_not_found(str(path)))
    try:
        raw = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelConfigError(f"{config_path}: not a readable JSON config ({exc})") from None
    if not isinstance(raw, dict):
        raise ModelConfigError(f"{config_path}: a config.json holds a JSON object")
    name = (folder or config_path.parent).resolve().name
    return from_dict(raw, name=name, path=str(path), folder=folder)


# A Hugging Face model id: org/name, no path of its own (not ./x, /x or x.json).
MODEL_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def _not_found(path: str) -> str:
    """No such file; a model id gets how to fetch its config (plan reads files, never the network)."""
    if MODEL_ID.fullmatch(path) and not path.endswith(".json"):
        folder = path.rsplit("/", 1)[1]
        return (
            f"{path}: looks like a model id, and plan reads a local config.json: "
            f"huggingface-cli download {path} config.json model.safetensors.index.json --local-dir {folder}, "
            f"then vllm-triage plan {folder}"
        )
    return f"{path}: no such file or folder"


def text_config(raw: dict[str, Any]) -> dict[str, Any]:
    """The language model's settings: multimodal configs nest them (Gemma 3, Llava, Mistral 3...)."""
    for key in NESTED_TEXT_KEYS:
        nested = raw.get(key)
        if isinstance(nested, dict) and (nested.get("num_hidden_layers") or "num_hidden_layers" not in raw):
            merged = {k: v for k, v in raw.items() if k not in NESTED_TEXT_KEYS and k != "vision_config"}
            merged.update(nested)
            return merged
    return raw


def from_dict(raw: dict[str, Any], name: str = "model", path: str = "", folder: Path | None = None) -> ModelConfig:
    cfg = text_config(raw)
    cfg = {**FAMILY_DEFAULTS.get(str(cfg.get("model_type", "")), {}), **cfg}
    notes: list[str] = []
    layers_count = _int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    heads = _int(cfg, "num_attention_heads", "n_head")
    hidden = _int(cfg, "hidden_size", "n_embd", "d_model")
    if not layers_count or not heads or not hidden:
        raise ModelConfigError(
            f"{path or name}: not a decoder config vLLM can size "
            "(needs num_hidden_layers, num_attention_heads and hidden_size)"
        )
    layers = layer_specs(cfg, layers_count, heads, hidden, notes)
    max_len, max_len_key = derived_max_model_len(cfg)
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or raw.get("torch_dtype") or raw.get("dtype") or "bfloat16")
    quant = raw.get("quantization_config") or cfg.get("quantization_config")
    quantization = quant.get("quant_method") if isinstance(quant, dict) else None
    model = ModelConfig(
        name=name,
        path=path,
        model_type=str(raw.get("model_type") or cfg.get("model_type") or "unknown"),
        architecture=str((raw.get("architectures") or cfg.get("architectures") or ["unknown"])[0]),
        dtype=dtype,
        layers=layers,
        num_attention_heads=heads,
        hidden_size=hidden,
        max_model_len=max_len,
        max_len_key=max_len_key,
        weights=Weights(0, "", False),
        quantization=quantization,
        notes=notes,
    )
    found = weights_from_folder(folder) if folder else None
    model.weights = found or estimate_weights(cfg, model, quant)
    return model


def _int(cfg: dict[str, Any], *keys: str, default: int = 0) -> int:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value)
    return default


def head_dim(cfg: dict[str, Any], heads: int, hidden: int) -> int:
    # head_dim may be absent or null (Phi-2, Llama 2): then hidden_size // num_attention_heads.
    return _int(cfg, "head_dim") or hidden // heads


def layer_kinds(cfg: dict[str, Any], count: int) -> list[str]:
    """Which kind each layer is, from layer_types or from the older per-family patterns."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        return [_kind_of(str(t)) for t in types[:count]] + [FULL] * max(0, count - len(types))
    if cfg.get("kv_lora_rank"):
        return [MLA] * count
    if cfg.get("full_attention_interval"):  # Qwen3-Next without layer_types
        interval = int(cfg["full_attention_interval"])
        return [FULL if (i + 1) % interval == 0 else LINEAR for i in range(count)]
    window = cfg.get("sliding_window")
    if not window or cfg.get("use_sliding_window") is False:
        # Qwen2/2.5 carry sliding_window but use_sliding_window: false: full attention.
        return [FULL] * count
    model_type = str(cfg.get("model_type", ""))
    pattern = cfg.get("sliding_window_pattern")
    if model_type.startswith("gemma2") and not pattern:
        pattern = 2  # Gemma 2 alternates: even layers slide, odd layers see everything
    if model_type.startswith("gemma3") and not pattern:
        pattern = 6
    if pattern:
        return [FULL if (i + 1) % int(pattern) == 0 else SLIDING for i in range(count)]
    if cfg.get("use_sliding_window") and "max_window_layers" in cfg:  # Qwen2 with the window on
        first = int(cfg["max_window_layers"])
        return [SLIDING if i >= first else FULL for i in range(count)]
    return [SLIDING] * count  # Mistral 7B v0.1: every layer slides


def _kind_of(layer_type: str) -> str:
    name = layer_type.lower()
    if name in ("sliding_attention", "sliding", "local", "local_attention", "chunked_attention"):
        return SLIDING
    if name in ("linear_attention", "linear"):
        return LINEAR
    if name in ("mamba", "mamba2", "ssm"):
        return MAMBA
    if name in ("full_attention", "attention", "global", "global_attention", "full"):
        return FULL
    raise ModelConfigError(f"unknown layer type {layer_type!r} in layer_types")


def layer_specs(cfg: dict[str, Any], count: int, heads: int, hidden: int, notes: list[str]) -> list[LayerSpec]:
    kinds = layer_kinds(cfg, count)
    kv_heads = _int(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv") or heads
    dim = head_dim(cfg, heads, hidden)
    window = _int(cfg, "sliding_window") or _int(cfg, "attention_chunk_size")
    specs = []
    for kind in kinds:
        if kind == FULL:
            specs.append(LayerSpec(FULL, kv_heads=kv_heads, head_dim=dim))
        elif kind == SLIDING:
            if not window:
                raise ModelConfigError("layer_types has sliding layers but the config has no sliding_window")
            specs.append(LayerSpec(SLIDING, kv_heads=kv_heads, head_dim=dim, sliding_window=window))
        elif kind == MLA:
            latent = int(cfg["kv_lora_rank"]) + _int(cfg, "qk_rope_head_dim", default=64)
            specs.append(LayerSpec(MLA, latent_dim=latent))
        elif kind == LINEAR:
            specs.append(_linear_attention_spec(cfg, hidden))
        else:
            specs.append(_mamba_spec(cfg, hidden))
    if SLIDING in kinds:
        notes.append(
            "sliding-window layers hold at most the window plus one step's tokens per sequence; "
            "that is how vLLM's hybrid KV-cache manager counts them (with it disabled they count as full attention)"
        )
    if LINEAR in kinds or MAMBA in kinds:
        notes.append(
            "Mamba / linear-attention layers hold a constant state per sequence, counted here; "
            "vLLM pads their pages to the attention page size and may change the block size, "
            "so the state figures and token counts are approximate"
        )
    return specs


def _linear_attention_spec(cfg: dict[str, Any], hidden: int) -> LayerSpec:
    """Gated DeltaNet (Qwen3-Next): conv state over q, k, v channels and a per-head k x v matrix."""
    key_heads = _int(cfg, "linear_num_key_heads", default=16)
    value_heads = _int(cfg, "linear_num_value_heads", default=32)
    key_dim = _int(cfg, "linear_key_head_dim", default=128)
    value_dim = _int(cfg, "linear_value_head_dim", default=128)
    kernel = _int(cfg, "linear_conv_kernel_dim", default=4)
    conv = (kernel - 1) * (2 * key_heads * key_dim + value_heads * value_dim)
    return LayerSpec(LINEAR, conv_elements=conv, state_elements=value_heads * key_dim * value_dim)


def _mamba_spec(cfg: dict[str, Any], hidden: int) -> LayerSpec:
    """Mamba2 (Granite 4, Bamba, Nemotron-H): conv state plus heads x head_dim x state_size."""
    state = _int(cfg, "mamba_d_state", "ssm_state_size", "state_size", default=128)
    kernel = _int(cfg, "mamba_d_conv", "conv_kernel", default=4)
    expand = _int(cfg, "mamba_expand", "expand", default=2)
    groups = _int(cfg, "mamba_n_groups", "n_groups", default=1)
    intermediate = expand * hidden
    head_dim_ = _int(cfg, "mamba_d_head", "mamba_head_dim", default=64)
    heads = _int(cfg, "mamba_n_heads", "mamba_num_heads", default=intermediate // head_dim_)
    conv = (kernel - 1) * (intermediate + 2 * groups * state)
    return LayerSpec(MAMBA, conv_elements=conv, state_elements=heads * head_dim_ * state)


def derived_max_model_len(cfg: dict[str, Any]) -> tuple[int, str]:
    """The context length vLLM derives from the config: the smallest length key, times rope scaling."""
    found = [(int(cfg[k]), k) for k in MAX_LEN_KEYS if isinstance(cfg.get(k), int | float) and cfg[k] > 0]
    if not found:
        return 2048, "default"  # vLLM's fallback when the config names no length
    length, key = min(found)
    scaling = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    # vLLM leaves Gemma 3's rope scaling out of the derived length.
    if isinstance(scaling, dict) and "gemma3" not in str(cfg.get("model_type", "")):
        rope_type = scaling.get("rope_type") or scaling.get("type")
        factor = scaling.get("factor")
        if factor and rope_type not in ("su", "longrope", "llama3", "default", None):
            if rope_type == "yarn":
                length = int(scaling.get("original_max_position_embeddings", length))
            length = int(length * factor)
    return length, key


# --- weights --------------------------------------------------------------------------


def weights_from_folder(folder: Path) -> Weights | None:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            total = json.loads(index.read_text(encoding="utf-8"))["metadata"]["total_size"]
            return Weights(int(total), "model.safetensors.index.json (metadata.total_size)", True)
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a broken index: fall back to the headers
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = sum(safetensors_data_bytes(f) for f in files)
    plural = "s" if len(files) != 1 else ""
    return Weights(total, f"safetensors headers ({len(files)} file{plural})", True)


def safetensors_data_bytes(path: Path) -> int:
    """Bytes of tensor data in one .safetensors file, read from its header alone.

    The file starts with an 8-byte little-endian header length, then a JSON header that
    maps each tensor name to its dtype, shape and data offsets.
    """
    try:
        with open(path, "rb") as stream:
            prefix = stream.read(8)
            if len(prefix) != 8:
                raise ModelConfigError(f"{path}: too short to be a safetensors file")
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER_BYTES:
                raise ModelConfigError(f"{path}: safetensors header length {length} is not plausible")
            header = json.loads(stream.read(length).decode("utf-8"))
    except OSError as exc:
        raise ModelConfigError(f"{path}: cannot read ({exc.strerror})") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ModelConfigError(f"{path}: safetensors header is not valid JSON") from None
    total = 0
    for tensor_name, info in header.items():
        if tensor_name == "__metadata__":
            continue
        try:
            count = 1
            for size in info["shape"]:
                count *= int(size)
            total += count * SAFETENSORS_DTYPE_BYTES[info["dtype"]]
        except (KeyError, TypeError, ValueError):
            raise ModelConfigError(f"{path}: tensor {tensor_name!r} has no readable dtype/shape") from None
    return total


def estimate_weights(cfg: dict[str, Any], model: ModelConfig, quant: Any) -> Weights:
    """Parameter count from the architecture, times bytes per parameter: an estimate."""
    params = estimate_parameters(cfg, model)
    per_param = float(kvcache.DTYPE_BYTES.get(model.dtype.lower(), 2))
    fixed, label = 0.0, "at the serving dtype"
    if isinstance(quant, dict):
        bits = quant.get("bits") or quant.get("w_bit")
        method = str(quant.get("quant_method", ""))
        if bits:
            fixed, label = int(bits) / 8, f"{method or 'quantized'} {bits}-bit"
        elif method in ("fp8", "fbgemm_fp8", "compressed-tensors"):
            fixed, label = 1.0, f"{method}, 1 byte each"
    source = f"estimate from the architecture (~{params / 1e9:.2f}B parameters, {label})"
    return Weights(int(params * (fixed or per_param)), source, False, params, fixed)


def estimate_parameters(cfg: dict[str, Any], model: ModelConfig) -> int:
    hidden, heads = model.hidden_size, model.num_attention_heads
    vocab = _int(cfg, "vocab_size", default=32000)
    embeddings = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    dim = head_dim(cfg, heads, hidden)
    kv_heads = _int(cfg, "num_key_value_heads", "num_kv_heads") or heads
    intermediate = _int(cfg, "intermediate_size", "n_inner", "ffn_dim", default=4 * hidden)
    gated = str(cfg.get("model_type", "")) not in ("phi", "gpt2", "gpt_neox", "opt", "gptj", "bloom", "falcon")
    dense_mlp = (3 if gated else 2) * hidden * intermediate
    experts = _int(cfg, "n_routed_experts", "num_experts", "num_local_experts")
    expert_size = _int(cfg, "moe_intermediate_size", default=intermediate)
    shared = _int(cfg, "n_shared_experts") or (1 if _int(cfg, "shared_expert_intermediate_size") else 0)
    shared_size = _int(cfg, "shared_expert_intermediate_size", default=expert_size)
    first_dense = _int(cfg, "first_k_dense_replace")
    total = embeddings
    for index, layer in enumerate(model.layers):
        if layer.kind == MLA:
            q_rank = _int(cfg, "q_lora_rank")
            nope, rope = _int(cfg, "qk_nope_head_dim", default=128), _int(cfg, "qk_rope_head_dim", default=64)
            v_dim = _int(cfg, "v_head_dim", default=128)
            q = hidden * q_rank + q_rank * heads * (nope + rope) if q_rank else hidden * heads * (nope + rope)
            total += q + hidden * layer.latent_dim + (layer.latent_dim - rope) * heads * (nope + v_dim)
            total += heads * v_dim * hidden
        elif layer.kind == LINEAR:
            key = _int(cfg, "linear_num_key_heads", default=16) * _int(cfg, "linear_key_head_dim", default=128)
            value = _int(cfg, "linear_num_value_heads", default=32) * _int(cfg, "linear_value_head_dim", default=128)
            total += hidden * (2 * key + 2 * value) + value * hidden
        elif layer.kind == MAMBA:
            inner = _int(cfg, "mamba_expand", "expand", default=2) * hidden
            total += hidden * 2 * inner + inner * hidden
        else:
            total += hidden * heads * dim * 2 + hidden * kv_heads * dim * 2
        if experts and index >= first_dense:
            total += experts * 3 * hidden * expert_size + shared * 3 * hidden * shared_size + hidden * experts
        else:
            total += dense_mlp
    return total


# --- tokens ---------------------------------------------------------------------------


def count_prompt_tokens(prompt_file: str | Path, tokenizer: str | Path) -> int:
    """Tokens in a prompt file by a local tokenizer.json (a file, or a model folder holding one).

    Needs the optional `tokenizers` package; the prompt text is read, counted and never shown.
    """
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ModelConfigError(
            "counting --prompt-file needs the optional 'tokenizers' package "
            "(pip install 'vllm-triage[tokenizers]'); or give the count with --prompt-tokens"
        ) from None
    path = Path(tokenizer)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise ModelConfigError(f"{path}: no tokenizer.json there")
    try:
        loaded = Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust side raises its own exception type
        raise ModelConfigError(f"{path}: not a tokenizer.json the tokenizers package can load ({exc})") from None
    try:
        text = Path(prompt_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelConfigError(f"{prompt_file}: cannot read the prompt ({exc})") from None
    return len(loaded.encode(text).ids)
