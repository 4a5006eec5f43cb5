"""Facts come from the run's own lines, in every era's wording, and stay within their run."""

import re
import textwrap
from pathlib import Path

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from triage.diagnose.diagnoser import diagnose
from triage.diagnose.facts import process_name
from triage.rules.ruleset import RuleError, load_rules
from conftest import scan_events

RUNS = Path(__file__).resolve().parents[2] / "fixtures" / "runs"

COLLECT_ENV = """\
==============================
        CUDA / GPU Info
==============================
Is CUDA available            : True
CUDA runtime version         : 12.8.93
GPU models and configuration :
GPU 0: NVIDIA H100 80GB HBM3
GPU 1: NVIDIA H100 80GB HBM3
Nvidia driver version        : 570.133.20
==============================
         vLLM Info
==============================
vLLM Version                 : 0.11.0
"""


def facts_of(matcher, text):
    return diagnose(scan_events(matcher, "log", text)).facts


def test_engine_config_args_and_capacity_lines_give_the_run_facts(matcher):
    result = diagnose(matcher.scan(str(RUNS / "restart-after-kv-shortfall-v0110.log"), _chunks("restart-after-kv-shortfall-v0110.log")))
    second = result.runs[1].facts
    assert second["version"] == "0.11.0"
    assert second["model"] == "Qwen/Qwen2.5-14B-Instruct"
    assert (second["max_model_len"], second["user_max_model_len"], second["max_model_len_set"]) == (40960, 40960, True)
    assert (second["tensor_parallel_size"], second["pipeline_parallel_size"], second["data_parallel_size"]) == (2, 1, 1)
    assert second["gpu_memory_utilization"] == 0.88
    assert second["kv_cache_dtype"] == "auto"
    assert second["chunked_prefill"] is True
    assert second["max_num_batched_tokens"] == 8192
    assert second["kv_gib_available"] == 4.12
    assert second["kv_tokens"] == 45008
    assert (second["concurrency"], second["concurrency_tokens"]) == (1.1, 40960)
    assert round(second["bytes_per_token"]) == round(4.12 * 2**30 / 45008)


def test_a_window_nobody_set_is_marked_derived(matcher):
    facts = facts_of(matcher, (
        "(APIServer pid=7) INFO 09-30 08:00:02 [utils.py:328] non-default args: {'model_tag': 'm', 'max_num_seqs': 64, 'block_size': 32}\n"
        "(APIServer pid=7) INFO 09-30 08:00:05 [model.py:1510] Using max model len 8192\n"
    ))
    assert facts["max_model_len_set"] is False
    assert (facts["max_model_len"], facts["max_num_seqs"], facts["block_size"]) == (8192, 64, 32)


def test_older_engine_line_namespace_args_and_v0_capacity(matcher):
    facts = facts_of(matcher, (
        "INFO 05-06 17:38:30 api_server.py:912] args: Namespace(host=None, model='Qwen/Qwen2.5-7B-Instruct', max_model_len=None, gpu_memory_utilization=0.85)\n"
        "INFO 05-06 17:38:41 [llm_engine.py:240] Initializing a V0 LLM engine (v0.8.5) with config: model='Qwen/Qwen2.5-7B-Instruct', dtype=torch.bfloat16, max_seq_len=32768, tensor_parallel_size=1, pipeline_parallel_size=1, kv_cache_dtype=auto,  device_config=cuda, chunked_prefill_enabled=False, use_cached_outputs=True, \n"
        "INFO 05-06 17:39:20 [worker.py:287] model weights take 14.99GiB; non_torch_memory takes 0.08GiB; PyTorch activation peak memory takes 1.40GiB; the rest of the memory reserved for KV Cache is 4.74GiB.\n"
        "INFO 05-06 17:39:21 [executor_base.py:112] # cuda blocks: 5548, # CPU blocks: 4681\n"
    ))
    assert (facts["version"], facts["max_model_len"], facts["max_model_len_set"]) == ("0.8.5", 32768, False)
    assert facts["chunked_prefill"] is False
    assert (facts["gpu_blocks"], facts["kv_tokens"]) == (5548, 5548 * 16)
    assert facts["bytes_per_token"] == 4.74 * 2**30 / (5548 * 16)


def test_collect_env_gives_version_gpus_and_driver(matcher):
    facts = facts_of(matcher, COLLECT_ENV)
    assert facts["version"] == "0.11.0"
    assert (facts["gpu_name"], facts["gpu_count"]) == ("NVIDIA H100 80GB HBM3", 2)
    assert (facts["driver_version"], facts["cuda_version"]) == ("570.133.20", "12.8.93")


def test_auto_fit_and_model_window_facts(matcher):
    facts = facts_of(matcher, (
        "(EngineCore_DP0 pid=2210) WARNING 01-09 13:43:10 [phi3_long_rope_scaled_rope.py:57] Using LongRoPE scaling factors. This enables longer contexts (131072 tokens vs original 4096 tokens) at the cost of some performance degradation for shorter sequences.\n"
        "(EngineCore_DP0 pid=2210) INFO 01-09 13:44:02 [kv_cache_utils.py:1442] Auto-fit max_model_len: reduced from 131072 to 79216 to fit in available GPU memory (9.67 GiB available for KV cache)\n"
    ))
    assert (facts["max_position_embeddings"], facts["auto_fit_from"], facts["max_model_len"]) == (131072, 131072, 79216)


def test_process_name_drops_the_pid_only():
    assert process_name("EngineCore_DP0 pid=3117") == "EngineCore_DP0"
    assert process_name("VllmWorker rank=1 pid=42") == "VllmWorker rank=1"
    assert process_name("RayWorkerWrapper pid=5311, ip=10.0.3.17") == "RayWorkerWrapper ip=10.0.3.17"
    assert process_name(None) is None


def _chunks(name):
    from triage.input.reader import iter_chunks

    return iter_chunks(open(RUNS / name, "rb"))


def test_each_fact_keeps_the_line_that_gave_it_its_value(matcher):
    facts = facts_of(matcher, (RUNS.parent / "gate" / "low-concurrency.log").read_text())
    assert facts.lines["max_model_len"] == ("log", 2)  # "Using max model len"
    assert facts.lines["kv_tokens"] == ("log", 7)
    # the second metrics line (20.5%) re-derives the figure at start without changing it
    assert (facts["kv_usage_at_start_pct"], facts.lines["kv_usage_at_start_pct"]) == (81.3, ("log", 11))
    assert (facts["kv_usage_pct"], facts.lines["kv_usage_pct"]) == (20.5, ("log", 12))


def test_a_v1_shortfall_names_the_utilization_that_fits_from_the_gpu_collect_env_names(matcher):
    # V1 fails before it prints the card's memory; collect-env above the log names an A100 40GB
    result = diagnose(scan_events(matcher, "log", (RUNS / "collect-env-then-v1-kv-shortfall-a100.log").read_text()))
    [shortfall] = [f for f in result.findings if f.code == "VT201"]
    assert shortfall.derived["utilization_to_fit"] == 0.89  # 0.8 + (16 - 12.75) GiB / 40 GiB, rounded up
    assert shortfall.facts["total_gib"] == 40
    assert shortfall.facts["total_gib_from"] == "GPU table: A100 40GB, 40960 MiB"
    assert any(fix.startswith("Raise --gpu-memory-utilization to about 0.89 (now 0.80)") for fix in shortfall.fixes)


def test_a_line_that_prints_the_cards_memory_replaces_the_gpu_tables(matcher):
    memory = ("INFO 05-06 17:39:20 [worker.py:287] the current vLLM instance can use total_gpu_memory (39.39GiB) "
              "x gpu_memory_utilization (0.85) = 33.48GiB\n")
    for text in (COLLECT_ENV + memory, memory + COLLECT_ENV):
        facts = facts_of(matcher, text)
        assert facts["total_gib"] == 39.39 and "total_gib_from" not in facts


def test_the_gpu_table_gives_memory_only_for_one_known_kind_of_card(matcher):
    assert facts_of(matcher, COLLECT_ENV)["total_gib"] == 79.65  # H100 80GB: 81559 MiB
    mixed = COLLECT_ENV.replace("GPU 1: NVIDIA H100 80GB HBM3", "GPU 1: NVIDIA L4")
    assert "total_gib" not in facts_of(matcher, mixed)
    unknown = COLLECT_ENV.replace("H100 80GB HBM3", "T4")  # not in the GPU table
    assert "total_gib" not in facts_of(matcher, unknown)


RANK_LINE = "({process} pid={pid}) INFO 10-02 10:02:06 [gpu_worker.py:276] Available KV cache memory: {gib:.2f} GiB"
V0_RANK_LINE = ("(RayWorkerWrapper pid={pid}) INFO 05-06 17:39:20 [worker.py:287] model weights take 14.99GiB; "
                "non_torch_memory takes 0.08GiB; PyTorch activation peak memory takes 1.40GiB; the rest of the "
                "memory reserved for KV Cache is {gib:.2f}GiB.")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.integers(100, 9999)), min_size=1, max_size=12), st.booleans())
def test_the_kv_memory_each_rank_prints_gives_the_run_its_smallest(matcher, printed, v0):
    """Tensor-parallel workers each print their own KV memory, in any order, some twice (a
    rank's last line counts); vLLM sizes the cache by the smallest, so the run's figure is
    the smallest rank's, cited at a line that printed it. Ray's workers carry only a pid."""
    lines, last = [], {}
    for rank, hundredths in printed:
        gib = hundredths / 100
        template = V0_RANK_LINE if v0 else RANK_LINE
        lines.append(template.format(process=f"Worker_TP{rank}", pid=1190 + rank, gib=gib))
        last[rank] = gib
    result = diagnose(scan_events(matcher, "log", "\n".join(lines)))
    smallest = min(last.values())
    assert result.facts["kv_gib_available"] == smallest
    [run] = result.runs
    cited = run.facts.lines["kv_gib_available"][1]
    assert f"{smallest:.2f}" in lines[cited - 1]


@pytest.mark.parametrize(("kind", "across", "why"), [
    ("finding", "{gib: min}", "across_ranks is for kind: fact"),
    ("fact", "{gib: avg}", "across_ranks gib: must be one of min, max"),
    ("fact", "{name: min}", "across_ranks name: not a number a pattern captures"),
    ("fact", "[gib]", "across_ranks maps a field to min, max"),
])
def test_across_ranks_must_name_a_number_of_a_fact_rule(tmp_path, kind, across, why):
    rule_file = tmp_path / "mine.yaml"
    rule_file.write_text(textwrap.dedent(f"""\
        rules:
          - code: VT991
            name: my-rule
            title: Mine
            kind: {kind}
            stage: startup
            keywords: ["my marker"]
            patterns: ["my marker {{name:word}} {{gib:gib}} GiB"]
            across_ranks: {across}
            examples:
              match: ["my marker w 3.5 GiB"]
        """))
    with pytest.raises(RuleError, match=re.escape(why)):
        load_rules([rule_file])
