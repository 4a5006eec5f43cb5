"""Plan and budget arithmetic: exact bytes, TP/PP splits, block rounding, and vLLM's own figures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triage.plan import gpus
from triage.plan import kvcache
from triage.plan import modelconfig
from triage.plan import planner as plan
from triage.diagnose.diagnoser import diagnose
from triage.rules.expr import Expression
from triage.plan.kvcache import GIB
from triage.match.matcher import Matcher
from triage.plan.planner import PlanError, PlanInputs
from triage.rules.ruleset import load_rules
from conftest import scan_events

MODELS = Path(__file__).resolve().parents[2] / "fixtures" / "models"
MIB = 2**20


def load(name: str) -> modelconfig.ModelConfig:
    return modelconfig.load(MODELS / name)


# --- the shared arithmetic ------------------------------------------------------------


def test_sixteen_llama_tokens_are_one_block_of_two_mib():
    assert kvcache.bytes_for_tokens(16, 131_072) == 2 * MIB
    assert kvcache.bytes_for_tokens(17, 131_072) == 4 * MIB  # a started block is a whole block
    assert kvcache.bytes_for_tokens(1, 131_072, block_size=32) == 4 * MIB


def test_gib_printed_like_vllm():
    assert kvcache.format_gib(16 * GIB) == "16.0"
    assert kvcache.format_gib(9.666 * GIB) == "9.67"
    assert kvcache.format_gib(0.5 * GIB) == "0.5"


@given(
    kv_bytes=st.integers(min_value=1, max_value=200 * GIB),
    bytes_per_token=st.integers(min_value=1, max_value=2 * MIB),
    block_size=st.sampled_from([1, 8, 16, 32, 128]),
    upper=st.integers(min_value=1, max_value=2_000_000),
)
def test_vllm_binary_search_equals_whole_blocks_for_full_attention(kv_bytes, bytes_per_token, block_size, upper):
    def fits(length: int) -> bool:
        return kvcache.bytes_for_tokens(length, bytes_per_token, block_size) <= kv_bytes

    expected = min(upper, kvcache.tokens_that_fit(kv_bytes, bytes_per_token, block_size))
    assert kvcache.estimate_max_model_len(fits, upper) == expected


def test_sliding_window_holds_window_plus_a_step_and_one_block():
    # window 4096: 4095 + 2048 step tokens = 6143 -> 384 blocks, +1 for the misaligned start
    assert kvcache.sliding_window_bytes(4096, 131_072, 8192, 16, 2048) == 385 * 16 * 8192
    # a short max_model_len caps it
    assert kvcache.sliding_window_bytes(4096, 1000, 8192, 16, 2048) == (63 + 1) * 16 * 8192


# --- bytes per token ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("llama-3.1-8b-instruct", 131_072),
        ("qwen2.5-7b-instruct", 57_344),
        ("opt-6.7b", 524_288),
        ("gemma-2-9b-it", 172_032),  # the 21 full layers; the 21 sliding ones are per sequence
        ("gemma-3-27b-it", 81_920),
        ("deepseek-v3", 70_272),
        ("qwen3-next-80b-a3b", 24_576),
        ("tiny-llama", 128),
    ],
)
def test_bytes_per_token_and_fp8_halves_it(name, expected):
    model = load(name)
    assert plan.bytes_per_token(model) == expected
    assert plan.bytes_per_token(model, kv_cache_dtype="fp8") == expected // 2
    assert plan.bytes_per_token(model, kv_cache_dtype="fp8_e5m2") == expected // 2


def test_float32_model_is_served_in_16_bits_unless_asked():
    model = load("gemma-2-9b-it")  # torch_dtype float32
    assert plan.serving_dtype(model.dtype) == "bfloat16"
    assert plan.bytes_per_token(model, dtype="float32") == 2 * 172_032


def test_tensor_parallel_splits_kv_heads_but_never_below_one():
    llama = load("llama-3.1-8b-instruct")
    assert plan.bytes_per_token(llama, tensor_parallel_size=2) == 65_536
    assert plan.bytes_per_token(llama, tensor_parallel_size=8) == 16_384
    assert plan.bytes_per_token(llama, tensor_parallel_size=16) == 16_384  # 8 KV heads: replicated past TP 8
    qwen = load("qwen2.5-7b-instruct")
    assert plan.bytes_per_token(qwen, tensor_parallel_size=4) == 14_336
    assert plan.bytes_per_token(qwen, tensor_parallel_size=7) == 14_336  # 4 KV heads: one per GPU


def test_mla_is_not_split_by_tensor_parallel():
    model = load("deepseek-v3")
    assert plan.bytes_per_token(model, tensor_parallel_size=8) == 70_272
    assert plan.bytes_per_token(model, kv_cache_dtype="fp8", tensor_parallel_size=8) == 35_136


def test_pipeline_parallel_splits_layers_like_vllm():
    assert [len(r) for r in plan.pipeline_layers(61, 4)] == [15, 15, 16, 15]
    assert [len(r) for r in plan.pipeline_layers(32, 2)] == [16, 16]
    result = plan.plan(load("deepseek-v3"), PlanInputs(kv_cache_memory_bytes=40 * GIB, tensor_parallel_size=8, pipeline_parallel_size=4))
    assert result.scenarios[0].bytes_per_token == 16 * 1152  # the rank with 16 layers decides


# --- the plan -------------------------------------------------------------------------


def llama_on(gpu: str, **options) -> plan.PlanResult:
    card = gpus.find(gpu)
    return plan.plan(load("llama-3.1-8b-instruct"), PlanInputs(gpu_memory_bytes=card.memory_bytes, gpu_name=card.name, **options))


def test_memory_left_for_kv_is_utilization_minus_weights_minus_allowance():
    result = llama_on("H100")
    first = result.scenarios[0]
    expected = int(81559 * MIB * 0.9) - 16_060_522_496 - 2 * GIB
    assert first.kv_memory_per_gpu == expected
    assert first.kv_tokens == kvcache.tokens_that_fit(expected, 131_072, 16)
    assert first.kv_tokens % 16 == 0
    assert first.would_start and first.max_model_len_that_fits == 131_072
    assert first.concurrency == pytest.approx(kvcache.round_down(expected, 2 * MIB) / (16 * GIB))


def test_levers_side_by_side_fp8_and_one_more_gpu():
    result = llama_on("H100")
    labels = [s.label for s in result.scenarios]
    assert labels == ["as given", "fp8 KV cache", "TP 2 (one more GPU)"]
    as_given, fp8, tp2 = result.scenarios
    assert fp8.bytes_per_token * 2 == as_given.bytes_per_token
    assert fp8.kv_tokens == kvcache.tokens_that_fit(as_given.kv_memory_per_gpu, 65_536, 16)
    assert tp2.tensor_parallel_size == 2 and tp2.weights_per_gpu == 16_060_522_496 // 2
    assert tp2.kv_memory_per_gpu > as_given.kv_memory_per_gpu


def test_one_more_gpu_means_the_next_tp_size_vllm_accepts():
    model = load("deepseek-v3")
    assert plan.next_tensor_parallel_size(model, 8) == 16
    assert plan.next_tensor_parallel_size(load("qwen2.5-7b-instruct"), 4) == 7  # 28 heads
    with pytest.raises(PlanError, match="does not divide"):
        plan.plan(load("llama-3.1-8b-instruct"), PlanInputs(gpu_memory_bytes=80 * GIB, tensor_parallel_size=3))


def test_kv_cache_memory_given_skips_the_utilization_arithmetic():
    result = plan.plan(load("llama-3.1-8b-instruct"), PlanInputs(kv_cache_memory_bytes=10 * GIB, max_model_len=32768))
    first = result.scenarios[0]
    assert first.kv_memory_per_gpu == 10 * GIB
    assert first.kv_tokens == 81_920  # 10 GiB / 2 MiB per block = 5120 blocks of 16
    assert first.concurrency == pytest.approx(2.5)
    assert result.kv_memory_given


def test_would_not_start_prints_vllms_message_with_its_estimate():
    result = llama_on("L4", max_model_len=131_072)
    first = result.scenarios[0]
    assert not first.would_start
    available = int(23034 * MIB * 0.9) - 16_060_522_496 - 2 * GIB
    expected_len = kvcache.tokens_that_fit(available, 131_072, 16)
    assert first.max_model_len_that_fits == expected_len
    assert first.startup_error == (
        "To serve at least one request with the model's max seq len (131072), (16.0 GiB KV cache is needed, "
        f"which is larger than the available KV cache memory ({round(available / GIB, 2)} GiB). Based on the "
        f"available memory, the estimated maximum model length is {expected_len}. Try increasing "
        "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing "
        "`max_model_len` when initializing the engine. See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    )


def test_no_memory_left_at_all():
    result = plan.plan(load("gemma-3-27b-it"), PlanInputs(gpu_memory_bytes=gpus.find("L4").memory_bytes))
    first = result.scenarios[0]
    assert first.kv_memory_per_gpu < 0 and first.kv_tokens == 0 and first.max_model_len_that_fits == 0
    assert first.startup_error.startswith("No available memory for the cache blocks.")


def test_longer_than_the_models_context_is_refused():
    result = llama_on("H200", max_model_len=200_000)
    assert "greater than the derived max_model_len (max_position_embeddings=131072" in result.scenarios[0].startup_error
    assert result.scenarios[0].max_model_len_that_fits == 131_072


def test_sliding_window_sequence_memory_gemma_2():
    model = load("gemma-2-9b-it")
    result = plan.plan(model, PlanInputs(kv_cache_memory_bytes=8 * GIB))
    first = result.scenarios[0]
    full = 172_032 * 8192
    sliding = 21 * 385 * 16 * 8192  # min(4095 + 2048, 8192) = 6143 tokens -> 384 blocks + 1
    assert first.sequence_bytes == full + sliding
    assert first.fixed_bytes_per_sequence == sliding
    # vLLM's search over the same sum decides the longest length
    short = plan.plan(model, PlanInputs(kv_cache_memory_bytes=1 * GIB))
    length = short.scenarios[0].max_model_len_that_fits
    def need(n: int) -> int:
        return kvcache.bytes_for_tokens(n, 172_032) + 21 * kvcache.sliding_window_bytes(4096, n, 8192)
    assert need(length) <= GIB < need(length + 1)


def test_hybrid_state_is_per_sequence_and_counted():
    model = load("qwen3-next-80b-a3b")
    first = plan.plan(model, PlanInputs(kv_cache_memory_bytes=20 * GIB, max_model_len=65_536)).scenarios[0]
    state = 36 * (3 * (2 * 16 * 128 + 32 * 128) + 32 * 128 * 128) * 2
    assert first.fixed_bytes_per_sequence == state
    assert first.sequence_bytes == 24_576 * 65_536 + state


def test_weights_override_and_estimate_note():
    result = plan.plan(load("qwen2.5-7b-instruct"), PlanInputs(gpu_memory_bytes=80 * GIB, weights_bytes=15 * GIB))
    assert result.weights_bytes == 15 * GIB and result.weights_exact
    estimated = plan.plan(load("qwen2.5-7b-instruct"), PlanInputs(gpu_memory_bytes=80 * GIB))
    assert not estimated.weights_exact and any("estimate" in note for note in estimated.notes)


def test_plan_needs_memory_and_sane_figures():
    model = load("tiny-llama")
    with pytest.raises(PlanError, match="--gpu"):
        plan.plan(model, PlanInputs())
    with pytest.raises(PlanError, match="utilization"):
        plan.plan(model, PlanInputs(gpu_memory_bytes=GIB, gpu_memory_utilization=1.5))


@pytest.mark.parametrize(
    ("text", "expected"),
    [("80GiB", 80 * GIB), ("80 GiB", 80 * GIB), ("80GB", 80 * 10**9), ("81559MiB", 81559 * MIB), ("80", 80 * GIB), ("1.5gib", int(1.5 * GIB))],
)
def test_parse_size(text, expected):
    assert plan.parse_size(text) == expected


def test_parse_size_refuses_what_it_cannot_read():
    with pytest.raises(PlanError, match="GiB"):
        plan.parse_size("80 parsecs")


def test_parallel_sizes_from_gpus():
    assert plan.parallel_sizes(4, None, None) == (4, 1)
    assert plan.parallel_sizes(8, None, 2) == (4, 2)
    assert plan.parallel_sizes(None, 2, None) == (2, 1)
    with pytest.raises(PlanError, match="--gpus 4"):
        plan.parallel_sizes(4, 2, 1)


def test_gpu_names_are_forgiving_and_unknown_ones_listed():
    assert gpus.find("h100").name == "H100 80GB"
    assert gpus.find("NVIDIA H100 80GB HBM3").name == "H100 80GB"
    assert gpus.find("a100-40gb").name == "A100 40GB"
    assert gpus.find("rtx4090").name == "RTX 4090"
    # as vllm collect-env and nvidia-smi / rocm-smi print them
    assert gpus.find("NVIDIA A100 80GB PCIe").name == "A100 80GB"
    assert gpus.find("NVIDIA A100-SXM4-40GB").name == "A100 40GB"
    assert gpus.find("AMD Instinct MI300X").name == "MI300X"
    assert gpus.find("MI300x").memory_bytes == 196288 * MIB
    with pytest.raises(gpus.UnknownGpu) as info:
        gpus.find("TPU v5")
    assert "H200" in str(info.value) and "MI300X" in str(info.value)


# --- agreement with the startup diagnosis ----------------------------------------------


def test_planner_capacity_agrees_with_the_startup_rule_arithmetic():
    """The startup rule's fit_max_model_len, fed the planner's exact figures, gives the planner's answer."""
    rule = next(r for r in load_rules(()).rules if r.code == "VT201")
    expression: Expression = rule.derived["fit_max_model_len"]
    for name in ("llama-3.1-8b-instruct", "qwen2.5-7b-instruct", "opt-6.7b", "deepseek-v3"):
        for kv_gib in (3.3, 10, 41.7):
            first = plan.plan(load(name), PlanInputs(kv_cache_memory_bytes=int(kv_gib * GIB))).scenarios[0]
            names = {
                "kv_gib_available": first.kv_memory_per_gpu / GIB,
                "bytes_per_token": first.bytes_per_token,
                "block_size": 16,
            }
            assert expression.evaluate(names) == first.kv_tokens
            assert first.max_model_len_that_fits == min(first.kv_tokens, load(name).max_model_len)


def test_the_message_plan_predicts_is_diagnosed_with_the_same_numbers():
    """Scan the startup error the planner predicts: the diagnosis reads back the same length."""
    first = llama_on("A10G", max_model_len=131_072).scenarios[0]
    log = f"(EngineCore pid=40112) ERROR 06-02 21:07:13 [core.py:1584] ValueError: {first.startup_error}\n"
    result = diagnose(scan_events(Matcher(load_rules(())), "predicted.log", log))
    finding = next(f for f in result.findings if f.code == "VT201")
    assert finding.fields["estimated_max_model_len"] == first.max_model_len_that_fits
    assert finding.derived["fit_max_model_len"] == first.max_model_len_that_fits
    assert finding.fields["kv_gib_needed"] == 16.0
    assert re.search(r"max seq len \(131072\)", first.startup_error)


# --- budget ---------------------------------------------------------------------------


def test_budget_room_for_the_answer():
    result = plan.budget(8192, 7000)
    assert result.max_tokens == 1192 and result.cut_tokens == 0
    assert plan.budget(8192, 7000, margin=100).max_tokens == 1092


def test_budget_prompt_too_long_says_how_much_to_cut():
    result = plan.budget(8192, 9000)
    assert result.max_tokens == 0 and result.cut_tokens == 809  # 9000 - 8192 + 1 new token
    assert plan.budget(8192, 8192).cut_tokens == 1  # vLLM needs room for one token
    assert plan.budget(8192, 8191).max_tokens == 1


def test_budget_refuses_nonsense():
    with pytest.raises(PlanError):
        plan.budget(0, 10)
    with pytest.raises(PlanError):
        plan.budget(100, -1)


def test_concurrency_at_another_length():
    inputs = PlanInputs(kv_cache_memory_bytes=10 * GIB, max_model_len=32768, concurrency_length=4096)
    first = plan.plan(load("llama-3.1-8b-instruct"), inputs).scenarios[0]
    assert first.concurrency == pytest.approx(2.5)
    assert first.concurrency_length == 4096 and first.concurrency_at_length == pytest.approx(20.0)
    odd = plan.plan(load("llama-3.1-8b-instruct"), PlanInputs(kv_cache_memory_bytes=10 * GIB, concurrency_length=4097))
    assert odd.scenarios[0].concurrency_at_length == pytest.approx(5120 / 257)  # 4097 tokens take 257 blocks
