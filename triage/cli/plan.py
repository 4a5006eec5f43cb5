"""`vllm-triage plan` and `budget`: the KV-cache and length arithmetic, before a server starts."""

from __future__ import annotations

import sys
from typing import Any

import click

from triage.cli import main
from triage.cli.common import EXIT_CLEAN, EXIT_FINDINGS, fail, pick_format


@main.command()
@click.argument("model", type=click.Path())
@click.option("--gpu", "gpu_name", help="GPU by name (H100, A100 40GB, L4, ...); sets the memory per GPU.")
@click.option("--gpu-memory", help="Memory of one GPU, e.g. 80GiB or 85GB (GB = 1e9 bytes); a bare number is GiB.")
@click.option("--gpus", type=int, help="GPUs in all; tensor parallel over them unless sizes are given.")
@click.option("--tensor-parallel-size", "-tp", type=int, help="Tensor-parallel size (default: --gpus or 1).")
@click.option("--pipeline-parallel-size", "-pp", type=int, help="Pipeline-parallel size (default 1).")
@click.option("--gpu-memory-utilization", default=0.9, show_default=True, type=float)
@click.option("--kv-cache-dtype", default="auto", show_default=True, type=click.Choice(["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]))
@click.option("--dtype", default="auto", show_default=True, type=click.Choice(["auto", "bfloat16", "float16", "float32"]))
@click.option("--block-size", default=16, show_default=True, type=int)
@click.option("--max-model-len", type=int, help="Length to check (default: what vLLM derives from config.json).")
@click.option("--max-num-seqs", default=256, show_default=True, type=int)
@click.option(
    "--max-num-batched-tokens", default=2048, show_default=True, type=int,
    help="Tokens per step (sliding windows hold this many extra).",
)
@click.option("--weights-gib", type=float, help="Weights in GiB in all, instead of reading or estimating them.")
@click.option(
    "--kv-cache-memory",
    help="KV memory per GPU, e.g. 10GiB (like vLLM's --kv-cache-memory-bytes): skips the utilization arithmetic.",
)
@click.option("--overhead", default="2GiB", show_default=True, help="Allowance per GPU for activations, CUDA graphs and non-torch memory.")
@click.option("--concurrency-at", type=int, help="Also show how many sequences of this many tokens fit at once.")
@click.option("--format", "format_name", default="auto", show_default=True, type=click.Choice(["auto", "text", "rich", "json"]))
def plan(model, gpu_name, gpu_memory, gpus, tensor_parallel_size, pipeline_parallel_size, gpu_memory_utilization,
         kv_cache_dtype, dtype, block_size, max_model_len, max_num_seqs, max_num_batched_tokens, weights_gib,
         kv_cache_memory, overhead, concurrency_at, format_name) -> None:
    """What --max-model-len and concurrency fit: KV-cache arithmetic from a model's config.json or folder.

    Exit 0 when vLLM would start as given, 1 when it would refuse to, 2 on bad input."""
    from triage.report.plan_format import render_plan

    try:
        result = make_plan(
            model, gpu_name=gpu_name, gpu_memory=gpu_memory, gpus=gpus, tensor_parallel_size=tensor_parallel_size,
            pipeline_parallel_size=pipeline_parallel_size, gpu_memory_utilization=gpu_memory_utilization,
            kv_cache_dtype=kv_cache_dtype, dtype=dtype, block_size=block_size, max_model_len=max_model_len,
            max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens, weights_gib=weights_gib,
            kv_cache_memory=kv_cache_memory, overhead=overhead, concurrency_at=concurrency_at,
        )
    except plan_errors() as exc:  # evaluated only when something was raised
        fail(str(exc))
    click.echo(render_plan(result, pick_format(format_name)), nl=False)
    sys.exit(EXIT_CLEAN if result.scenarios[0].would_start else EXIT_FINDINGS)  # scripts branch on "would it start"


def plan_errors() -> tuple[type[Exception], ...]:
    """What make_plan and make_budget raise for a bad option or model (a one-line message)."""
    from triage.plan import gpus as gpu_table
    from triage.plan import modelconfig
    from triage.plan import planner

    return gpu_table.UnknownGpu, planner.PlanError, modelconfig.ModelConfigError


def make_plan(
    model: str, *, gpu_name: str | None = None, gpu_memory: str | None = None, gpus: int | None = None,
    tensor_parallel_size: int | None = None, pipeline_parallel_size: int | None = None,
    gpu_memory_utilization: float = 0.9, kv_cache_dtype: str = "auto", dtype: str = "auto", block_size: int = 16,
    max_model_len: int | None = None, max_num_seqs: int = 256, max_num_batched_tokens: int = 2048,
    weights_gib: float | None = None, kv_cache_memory: str | None = None, overhead: str = "2GiB",
    concurrency_at: int | None = None,
) -> Any:
    """The plan for a model and the options as `plan` takes them (the CLI's and the MCP tool's)."""
    from triage.plan import gpus as gpu_table
    from triage.plan import modelconfig
    from triage.plan import planner

    if gpu_name and gpu_memory:
        raise planner.PlanError("give --gpu or --gpu-memory, not both")
    gpu = gpu_table.find(gpu_name) if gpu_name else None
    memory = planner.parse_size(gpu_memory) if gpu_memory else (gpu.memory_bytes if gpu else None)
    tp, pp = planner.parallel_sizes(gpus, tensor_parallel_size, pipeline_parallel_size)
    inputs = planner.PlanInputs(
        gpu_memory_bytes=memory, gpu_name=gpu.name if gpu else None,
        tensor_parallel_size=tp, pipeline_parallel_size=pp, gpu_memory_utilization=gpu_memory_utilization,
        kv_cache_dtype=kv_cache_dtype, dtype=dtype, block_size=block_size, max_model_len=max_model_len,
        max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
        weights_bytes=int(weights_gib * planner.GIB) if weights_gib is not None else None,
        kv_cache_memory_bytes=planner.parse_size(kv_cache_memory) if kv_cache_memory else None,
        overhead_bytes=planner.parse_size(overhead), concurrency_length=concurrency_at,
    )
    return planner.plan(modelconfig.load(model), inputs)


@main.command()
@click.option("--max-model-len", required=True, type=int, help="The server's max_model_len.")
@click.option("--prompt-tokens", type=int, help="Tokens in the prompt, as the server counts them.")
@click.option("--prompt-file", type=click.Path(), help="The prompt text, counted with --tokenizer.")
@click.option("--tokenizer", type=click.Path(), help="A local tokenizer.json (or a model folder holding one).")
@click.option("--margin", default=0, show_default=True, type=int, help="Tokens to hold back (chat template, counting differences).")
@click.option("--format", "format_name", default="auto", show_default=True, type=click.Choice(["auto", "text", "rich", "json"]))
def budget(max_model_len, prompt_tokens, prompt_file, tokenizer, margin, format_name) -> None:
    """The largest max_tokens to send for a prompt, or how much to cut.

    Exit 0 when the prompt leaves room for an answer, 1 when it must be cut, 2 on bad input."""
    from triage.report.plan_format import render_budget

    try:
        result = make_budget(max_model_len, prompt_tokens, prompt_file, tokenizer, margin)
    except plan_errors() as exc:  # evaluated only when something was raised
        fail(str(exc))
    click.echo(render_budget(result, pick_format(format_name)), nl=False)
    sys.exit(EXIT_CLEAN if result.max_tokens else EXIT_FINDINGS)  # 1: the prompt must be cut first


def make_budget(
    max_model_len: int, prompt_tokens: int | None = None, prompt_file: str | None = None,
    tokenizer: str | None = None, margin: int = 0,
) -> Any:
    """The budget as `budget` takes its options (the CLI's and the MCP tool's)."""
    from triage.plan import modelconfig
    from triage.plan import planner

    if (prompt_tokens is None) == (prompt_file is None):
        raise planner.PlanError("give --prompt-tokens, or --prompt-file with --tokenizer")
    counted_by = "--prompt-tokens"
    if prompt_file is not None:
        if tokenizer is None:
            raise planner.PlanError("--prompt-file needs --tokenizer tokenizer.json (or give --prompt-tokens)")
        prompt_tokens, counted_by = modelconfig.count_prompt_tokens(prompt_file, tokenizer), tokenizer
    assert prompt_tokens is not None
    return planner.budget(max_model_len, prompt_tokens, margin, counted_by)
