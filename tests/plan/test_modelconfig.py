"""Reading model configs: layer kinds, KV bytes per token, context length, weights."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest

from triage.plan import modelconfig
from triage.plan.modelconfig import FULL, LINEAR, MLA, SLIDING, ModelConfigError

MODELS = Path(__file__).resolve().parents[2] / "fixtures" / "models"
BF16 = 2


def load(name: str) -> modelconfig.ModelConfig:
    return modelconfig.load(MODELS / name)


def per_token(model: modelconfig.ModelConfig, kind: str, dtype_bytes: int = BF16, tp: int = 1) -> int:
    return sum(layer.bytes_per_token(dtype_bytes, tp) for layer in model.layers if layer.kind == kind)


def test_llama_3_1_8b_gqa_bytes_per_token():
    model = load("llama-3.1-8b-instruct")
    assert [layer.kind for layer in model.layers] == [FULL] * 32
    assert per_token(model, FULL) == 131_072  # 2 * 8 heads * 128 * 2 bytes * 32 layers
    assert model.max_model_len == 131_072  # llama3 rope scaling does not multiply the length


def test_qwen2_5_sliding_window_off_means_full_attention():
    model = load("qwen2.5-7b-instruct")
    assert {layer.kind for layer in model.layers} == {FULL}
    assert per_token(model, FULL) == 57_344  # 2 * 4 * 128 * 2 * 28


def test_qwen2_with_the_window_on_slides_from_max_window_layers():
    raw = json.loads((MODELS / "qwen2.5-7b-instruct" / "config.json").read_text())
    raw.update(use_sliding_window=True, max_window_layers=14, sliding_window=4096)
    kinds = [layer.kind for layer in modelconfig.from_dict(raw).layers]
    assert kinds == [FULL] * 14 + [SLIDING] * 14


def test_mha_without_kv_heads_or_head_dim_defaults_to_attention_heads():
    model = load("opt-6.7b")
    assert per_token(model, FULL) == 524_288  # 2 * 32 * (4096 // 32) * 2 * 32
    assert model.layers[0].kv_heads == 32 and model.layers[0].head_dim == 128


def test_null_head_dim_and_null_kv_heads_phi2_shape():
    raw = {
        "architectures": ["PhiForCausalLM"], "model_type": "phi", "hidden_size": 2560,
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": None,
        "head_dim": None, "max_position_embeddings": 2048, "torch_dtype": "float16",
    }
    model = modelconfig.from_dict(raw)
    assert per_token(model, FULL) == 2 * 32 * 80 * 2 * 32


def test_gemma_2_alternates_sliding_and_full():
    model = load("gemma-2-9b-it")
    kinds = [layer.kind for layer in model.layers]
    assert kinds[:4] == [SLIDING, FULL, SLIDING, FULL] and kinds.count(SLIDING) == 21
    assert per_token(model, FULL) == 21 * 2 * 8 * 256 * 2  # 172,032
    assert {layer.sliding_window for layer in model.layers if layer.kind == SLIDING} == {4096}


def test_gemma_3_nested_text_config_and_pattern_of_six():
    model = load("gemma-3-27b-it")
    assert len(model.layers) == 62 and model.hidden_size == 5376
    kinds = [layer.kind for layer in model.layers]
    assert [i for i, kind in enumerate(kinds) if kind == FULL] == [5, 11, 17, 23, 29, 35, 41, 47, 53, 59]
    assert per_token(model, FULL) == 10 * 2 * 16 * 128 * 2  # 81,920
    assert per_token(model, SLIDING) == 52 * 8192
    assert model.max_model_len == 131_072  # vLLM does not scale Gemma 3's length by its rope factor


def test_nested_llava_style_config_reads_the_text_model():
    raw = {
        "architectures": ["LlavaForConditionalGeneration"], "model_type": "llava",
        "text_config": {"model_type": "mistral", "hidden_size": 5120, "num_attention_heads": 32,
                        "num_hidden_layers": 40, "num_key_value_heads": 8, "head_dim": 128,
                        "max_position_embeddings": 131072, "sliding_window": None},
        "vision_config": {"hidden_size": 1024, "num_attention_heads": 16, "num_hidden_layers": 24},
        "torch_dtype": "bfloat16",
    }
    model = modelconfig.from_dict(raw)
    assert per_token(model, FULL) == 40 * 2 * 8 * 128 * 2
    assert model.dtype == "bfloat16"


def test_deepseek_v3_mla_latent_not_split_by_tensor_parallel():
    model = load("deepseek-v3")
    assert {layer.kind for layer in model.layers} == {MLA}
    assert per_token(model, MLA) == 61 * (512 + 64) * 2  # 70,272: no factor 2, no heads
    assert per_token(model, MLA, tp=8) == 70_272
    assert model.max_model_len == 163_840  # yarn: 4096 * 40


def test_hybrid_linear_attention_counts_constant_state():
    model = load("qwen3-next-80b-a3b")
    kinds = [layer.kind for layer in model.layers]
    assert kinds.count(LINEAR) == 36 and kinds.count(FULL) == 12
    assert per_token(model, FULL) == 12 * 2 * 2 * 256 * 2  # 24,576
    layer = next(layer for layer in model.layers if layer.kind == LINEAR)
    conv = 3 * (2 * 16 * 128 + 32 * 128)
    recurrent = 32 * 128 * 128
    assert layer.state_bytes(BF16) == (conv + recurrent) * 2
    assert layer.state_bytes(BF16, 2) == (conv + recurrent)
    assert layer.bytes_per_token(BF16) == 0
    assert any("approximate" in note for note in model.notes)


def test_mamba_layers_from_layer_types():
    raw = {
        "model_type": "granitemoehybrid", "hidden_size": 1536, "num_attention_heads": 12,
        "num_key_value_heads": 4, "num_hidden_layers": 4, "max_position_embeddings": 131072,
        "layer_types": ["mamba", "mamba", "mamba", "attention"], "mamba_d_state": 128,
        "mamba_d_conv": 4, "mamba_expand": 2, "mamba_n_groups": 1, "mamba_n_heads": 48, "mamba_d_head": 64,
    }
    model = modelconfig.from_dict(raw)
    mamba = model.layers[0]
    assert mamba.kind == "mamba"
    assert mamba.state_bytes(BF16) == (3 * (3072 + 2 * 128) + 48 * 64 * 128) * 2
    assert per_token(model, FULL) == 2 * 4 * 128 * 2


def test_unknown_layer_type_is_an_error():
    raw = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1, "layer_types": ["teleport"]}
    with pytest.raises(ModelConfigError, match="teleport"):
        modelconfig.from_dict(raw)


def test_rope_scaling_factor_multiplies_the_derived_length():
    cfg = {"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 4.0}}
    assert modelconfig.derived_max_model_len(cfg) == (16384, "max_position_embeddings")
    assert modelconfig.derived_max_model_len({"seq_length": 8192, "max_position_embeddings": 32768})[0] == 8192


def test_weights_from_index_total_size():
    weights = load("llama-3.1-8b-instruct").weights
    assert weights.exact and weights.bytes == 16_060_522_496
    assert "index" in weights.source


def test_weights_from_safetensors_header():
    path = MODELS / "tiny-llama" / "model.safetensors"
    (length,) = struct.unpack("<Q", path.read_bytes()[:8])
    header = json.loads(path.read_bytes()[8 : 8 + length])
    expected = max(info["data_offsets"][1] for name, info in header.items() if name != "__metadata__")
    weights = load("tiny-llama").weights
    assert weights.exact and weights.bytes == expected == 45_376
    assert "safetensors headers" in weights.source


def test_weights_estimated_from_a_bare_config_are_marked_and_close():
    weights = modelconfig.load(MODELS / "llama-3.1-8b-instruct" / "config.json").weights
    assert not weights.exact and "estimate" in weights.source
    assert abs(weights.bytes - 16_060_522_496) / 16_060_522_496 < 0.01
    tiny = modelconfig.load(MODELS / "tiny-llama" / "config.json").weights
    assert abs(tiny.bytes - 45_376) / 45_376 < 0.02  # only the norms are left out


def test_weights_estimate_for_fp8_moe_uses_one_byte_per_parameter():
    weights = load("deepseek-v3").weights
    assert not weights.exact and weights.bytes_per_parameter == 1.0
    assert 660e9 < weights.parameters < 690e9  # DeepSeek-V3 has 671B parameters
    assert weights.at_dtype_bytes(2) == weights.bytes


def test_broken_safetensors_header_is_a_one_line_error(tmp_path):
    (tmp_path / "config.json").write_text((MODELS / "tiny-llama" / "config.json").read_text())
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 10) + b"{not json}")
    with pytest.raises(ModelConfigError, match="not valid JSON"):
        modelconfig.load(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x01\x02")
    with pytest.raises(ModelConfigError, match="too short"):
        modelconfig.load(tmp_path)


def test_missing_or_unusable_config(tmp_path):
    with pytest.raises(ModelConfigError, match="no config.json"):
        modelconfig.load(tmp_path)
    with pytest.raises(ModelConfigError, match="no such file"):
        modelconfig.load(tmp_path / "nope.json")
    (tmp_path / "config.json").write_text('{"model_type": "bert-ish"}')
    with pytest.raises(ModelConfigError, match="num_hidden_layers"):
        modelconfig.load(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2")
    with pytest.raises(ModelConfigError, match="JSON"):
        modelconfig.load(tmp_path)


def test_count_prompt_tokens_with_a_local_tokenizer():
    pytest.importorskip("tokenizers")
    folder = MODELS / "tiny-llama"
    assert modelconfig.count_prompt_tokens(folder / "prompt.txt", folder / "tokenizer.json") == 15
    assert modelconfig.count_prompt_tokens(folder / "prompt.txt", folder) == 15


def test_count_prompt_tokens_without_tokenizers_says_what_to_do(monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import now raises ImportError
    folder = MODELS / "tiny-llama"
    with pytest.raises(ModelConfigError, match="--prompt-tokens") as info:
        modelconfig.count_prompt_tokens(folder / "prompt.txt", folder)
    assert "tokenizers" in str(info.value) and "\n" not in str(info.value)
