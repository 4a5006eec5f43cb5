"""`vllm-triage plan` and `vllm-triage budget` end to end through click."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from triage.cli import main

MODELS = Path(__file__).resolve().parents[2] / "fixtures" / "models"
LLAMA = str(MODELS / "llama-3.1-8b-instruct")
TINY = MODELS / "tiny-llama"


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_plan_json_has_the_numbers():
    result = run("plan", LLAMA, "--gpu", "H100", "--format", "json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    scenarios = document["plan"]["scenarios"]
    assert [s["label"] for s in scenarios] == ["as given", "fp8 KV cache", "TP 2 (one more GPU)"]
    assert [s["bytes_per_token"] for s in scenarios] == [131_072, 65_536, 65_536]
    assert document["plan"]["gpu_name"] == "H100 80GB"
    assert document["plan"]["weights_bytes"] == 16_060_522_496


def test_plan_text_table_shows_the_levers_side_by_side():
    result = run("plan", LLAMA, "--gpu", "h100", "--format", "text")
    assert result.exit_code == 0, result.output
    assert "KV bytes per token per GPU" in result.output
    assert "131,072" in result.output and "65,536" in result.output
    assert "2.00 GiB allowance" in result.output
    assert "model.safetensors.index.json" in result.output


def test_plan_predicts_the_startup_refusal_and_exits_1():
    result = run("plan", LLAMA, "--gpu", "L4", "--max-model-len", "131072", "--format", "text")
    assert result.exit_code == 1  # a script branches on "would it start" (README, plan --help)
    assert "as given: vLLM would refuse to start" in result.output
    assert "the estimated maximum model length is 26928" in result.output


@pytest.mark.parametrize("format_name", ["text", "json", "rich"])
def test_plan_exit_code_follows_the_as_given_column(format_name):
    """0 when the configuration as given starts, 1 when vLLM would refuse it, in every format;
    another column (fp8, more GPUs) that would start does not change it."""
    refused = run("plan", LLAMA, "--gpu", "L4", "--max-model-len", "40000", "--format", format_name)
    assert refused.exit_code == 1, refused.output
    starts = run("plan", LLAMA, "--gpu", "L4", "--max-model-len", "20000", "--format", format_name)
    assert starts.exit_code == 0, starts.output


def test_plan_knows_b200():
    result = run("plan", LLAMA, "--gpu", "B200", "--format", "json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)["plan"]
    assert plan["gpu_name"] == "B200" and plan["gpu_memory_bytes"] == 183_359 * 2**20


def test_plan_of_a_model_id_says_how_to_get_its_config():
    result = run("plan", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, lines
    assert "looks like a model id" in lines[0]
    assert "huggingface-cli download meta-llama/Llama-3.1-8B-Instruct config.json" in lines[0]
    assert lines[0].endswith("then vllm-triage plan Llama-3.1-8B-Instruct")


def test_plan_rich_renders_a_table():
    result = run("plan", str(MODELS / "deepseek-v3"), "--gpu", "H200", "--gpus", "8", "--format", "rich")
    assert result.exit_code == 0, result.output
    assert "70,272" in result.output and "TP 16" in result.output and "│" in result.output  # a rich table, not the plain one


def test_plan_kv_cache_memory_and_options():
    result = run("plan", LLAMA, "--kv-cache-memory", "10GiB", "--max-model-len", "32768", "--format", "json")
    first = json.loads(result.output)["plan"]["scenarios"][0]
    assert first["kv_tokens"] == 81_920 and first["concurrency"] == 2.5
    result = run("plan", LLAMA, "--gpu-memory", "80GiB", "--overhead", "1GiB", "--weights-gib", "15",
                 "--kv-cache-dtype", "fp8", "--format", "json")
    plan = json.loads(result.output)["plan"]
    assert plan["scenarios"][0]["kv_memory_per_gpu"] == int(80 * 2**30 * 0.9) - 15 * 2**30 - 2**30
    assert [s["label"] for s in plan["scenarios"]] == ["as given", "TP 2 (one more GPU)"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--gpu", "TPU v5"), "known: B200, H200, H100 80GB"),
        (("--gpu", "H100", "--gpu-memory", "80GiB"), "not both"),
        (("--gpu-memory", "eighty"), "cannot read size"),
        (("--gpu", "H100", "--tensor-parallel-size", "3"), "does not divide"),
        (("--gpu", "H100", "--gpus", "4", "--tensor-parallel-size", "2"), "--gpus 4"),
        ((), "--gpu NAME"),
    ],
)
def test_plan_usage_errors_are_one_line_exit_2(args, words):
    result = run("plan", LLAMA, *args)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and lines[0].startswith("vllm-triage: error:")


def test_plan_of_a_missing_model_is_exit_2():
    result = run("plan", str(MODELS / "no-such-model"), "--gpu", "H100")
    assert result.exit_code == 2 and "no such file" in result.output and "model id" not in result.output


def test_budget_with_prompt_tokens():
    result = run("budget", "--max-model-len", "8192", "--prompt-tokens", "7000", "--format", "text")
    assert result.exit_code == 0
    assert "max_tokens (or max_completion_tokens) <= 1,192" in result.output
    result = run("budget", "--max-model-len", "8192", "--prompt-tokens", "9000", "--format", "json")
    assert result.exit_code == 1  # the prompt must be cut: scripts branch on it
    assert json.loads(result.output)["budget"]["cut_tokens"] == 809


@pytest.mark.parametrize(
    ("prompt", "code", "answer"),
    [
        (8191, 0, "send max_tokens (or max_completion_tokens) <= 1\n"),
        (8192, 1, "cut at least 1 token to get even one new token"),
        (8193, 1, "cut at least 2 tokens to get even one new token"),
    ],
)
def test_budget_at_the_edge_of_the_window(prompt, code, answer):
    result = run("budget", "--max-model-len", "8192", "--prompt-tokens", str(prompt), "--format", "text")
    assert result.exit_code == code
    assert answer in result.output


def test_budget_counts_a_prompt_file_with_a_local_tokenizer():
    pytest.importorskip("tokenizers")
    result = run("budget", "--max-model-len", "20", "--prompt-file", str(TINY / "prompt.txt"),
                 "--tokenizer", str(TINY / "tokenizer.json"), "--margin", "2", "--format", "json")
    assert result.exit_code == 0, result.output
    budget = json.loads(result.output)["budget"]
    assert budget["prompt_tokens"] == 15 and budget["max_tokens"] == 3
    assert "kv cache holds" not in result.output  # the prompt is never echoed


def test_budget_without_tokenizers_package_asks_for_prompt_tokens(monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    result = run("budget", "--max-model-len", "20", "--prompt-file", str(TINY / "prompt.txt"), "--tokenizer", str(TINY))
    assert result.exit_code == 2
    assert "tokenizers" in result.output and "--prompt-tokens" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_budget_needs_one_way_to_know_the_prompt():
    assert run("budget", "--max-model-len", "20").exit_code == 2
    result = run("budget", "--max-model-len", "20", "--prompt-file", str(TINY / "prompt.txt"))
    assert result.exit_code == 2 and "--tokenizer" in result.output


def test_plan_concurrency_at_adds_a_row():
    result = run("plan", LLAMA, "--kv-cache-memory", "10GiB", "--max-model-len", "32768",
                 "--concurrency-at", "4096", "--format", "text")
    assert result.exit_code == 0
    assert "concurrency at 32,768 tokens" in result.output
    assert "concurrency at 4,096 tokens" in result.output and "20.00x" in result.output
