"""Formatting of plan and budget results: a rich table on a terminal, plain text otherwise, or JSON.

Like the other formatters it never computes: every figure comes from triage.plan.planner.
"""

from __future__ import annotations

import io
import json
import shutil
from dataclasses import asdict

from rich.console import Console
from rich.table import Table

from triage import __version__
from triage.plan.kvcache import GIB
from triage.plan.planner import BudgetResult, PlanResult
from triage.report.pictures import MAX_WIDTH, plain_lines, plan_scenarios, rich_text, terminal_width

SCHEMA_VERSION = 1
KIND_NAMES = {
    "full": "full attention", "sliding": "sliding window", "mla": "MLA",
    "linear": "linear attention", "mamba": "Mamba",
}


def gib(num_bytes: float) -> str:
    return f"{num_bytes / GIB:,.2f} GiB"


def _header(result: PlanResult) -> list[str]:
    layers = ", ".join(f"{count} {KIND_NAMES.get(kind, kind)}" for kind, count in result.layers.items())
    shape = f"; {result.kv_heads} KV heads x head_dim {result.head_dim}" if result.kv_heads else ""
    lines = [
        f"model: {result.model} ({result.architecture}): {layers} layers{shape}; "
        f"context {result.context_length:,} ({result.context_key}); served as {result.dtype}",
        f"weights: {gib(result.weights_bytes)} from {result.weights_source}",
    ]
    if result.kv_memory_given:
        lines.append("KV memory: given per GPU with --kv-cache-memory (no utilization arithmetic)")
    else:
        gpu = f"{result.gpu_name} " if result.gpu_name else ""
        lines.append(
            f"GPU: {gpu}{gib(result.gpu_memory_bytes or 0)} x utilization {result.gpu_memory_utilization:g}, "
            f"minus weights, minus {gib(result.overhead_bytes)} allowance per GPU for activations, "
            "CUDA graphs and non-torch memory (assumed: vLLM profiles it at startup; set --overhead from your log)"
        )
    lines.append(f"block size {result.block_size}, max_num_seqs {result.max_num_seqs}")
    return lines


def _rows(result: PlanResult) -> list[tuple[str, list[str]]]:
    scenarios = result.scenarios
    length = scenarios[0].max_model_len

    def row(title: str, value) -> tuple[str, list[str]]:
        return title, [value(s) for s in scenarios]

    def capped(value: float) -> str:
        cap = "" if int(value) < result.max_num_seqs else f" (max_num_seqs {result.max_num_seqs} caps it)"
        return f"{value:.2f}x{cap}"

    rows = [
        row("tensor x pipeline parallel", lambda s: f"{s.tensor_parallel_size} x {s.pipeline_parallel_size}"),
        row("KV cache dtype", lambda s: s.kv_cache_dtype),
        row("weights per GPU", lambda s: gib(s.weights_per_gpu)),
        row("KV memory per GPU", lambda s: gib(s.kv_memory_per_gpu)),
        row("KV bytes per token per GPU", lambda s: f"{s.bytes_per_token:,}"),
        row("KV tokens", lambda s: f"{s.kv_tokens:,}"),
        row(f"KV for one {length:,}-token sequence", lambda s: gib(s.sequence_bytes)),
        row("largest --max-model-len that fits", lambda s: f"{s.max_model_len_that_fits:,}"),
        row(f"concurrency at {length:,} tokens", lambda s: capped(s.concurrency)),
        row(f"starts with --max-model-len {length:,}", lambda s: "yes" if s.would_start else "NO"),
    ]
    at_length = scenarios[0].concurrency_length
    if at_length != length:
        rows.insert(-1, row(f"concurrency at {at_length:,} tokens", lambda s: capped(s.concurrency_at_length)))
    if any(s.fixed_bytes_per_sequence for s in scenarios):
        rows.insert(5, row("fixed KV per sequence (windows, state)", lambda s: gib(s.fixed_bytes_per_sequence)))
    return rows


def _footer(result: PlanResult) -> list[str]:
    lines = []
    for s in result.scenarios:
        if s.startup_error:
            lines.append(f"{s.label}: vLLM would refuse to start:\n  {s.startup_error}")
    lines.extend(f"note: {note}" for note in result.notes)
    return lines


def render_plan_text(result: PlanResult) -> str:
    rows = _rows(result)
    titles = ["", *(s.label for s in result.scenarios)]
    width0 = max(len(title) for title, _ in rows)
    widths = [max(len(titles[i + 1]), *(len(values[i]) for _, values in rows)) for i in range(len(result.scenarios))]
    table = ["  ".join([" " * width0, *(t.ljust(w) for t, w in zip(titles[1:], widths, strict=True))]).rstrip()]
    for title, values in rows:
        table.append("  ".join([title.ljust(width0), *(v.ljust(w) for v, w in zip(values, widths, strict=True))]).rstrip())
    picture = plan_scenarios(result)
    drawn = ["", *plain_lines(picture, terminal_width())] if picture else []
    return "\n".join([*_header(result), "", *table, *drawn, "", *_footer(result)]).rstrip() + "\n"


def render_plan_rich(result: PlanResult) -> str:
    table = Table(title=f"plan for {result.model}", title_justify="left")
    table.add_column("")
    for s in result.scenarios:
        table.add_column(s.label, justify="right")
    for title, values in _rows(result):
        styled = [f"[bold red]{v}[/]" if v == "NO" else (f"[green]{v}[/]" if v == "yes" else v) for v in values]
        table.add_row(title, *styled)
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=max(100, shutil.get_terminal_size().columns))
    for line in _header(result):
        console.print(line, highlight=False, markup=False)
    console.print(table)
    picture = plan_scenarios(result)
    if picture:
        console.print(rich_text(picture, min(console.width, MAX_WIDTH)))
    for line in _footer(result):
        console.print(line, highlight=False, markup=False, style="yellow" if line.startswith("note") else "red")
    return buffer.getvalue()


def render_plan_json(result: PlanResult) -> str:
    document = {"schema_version": SCHEMA_VERSION, "tool": {"name": "vllm-triage", "version": __version__}, "plan": asdict(result)}
    return json.dumps(document, indent=2) + "\n"


def render_plan(result: PlanResult, format_name: str) -> str:
    return {"text": render_plan_text, "rich": render_plan_rich, "json": render_plan_json}[format_name](result)


def _budget_lines(result: BudgetResult) -> list[str]:
    margin = f" - margin {result.margin:,}" if result.margin else ""
    head = f"max_model_len {result.max_model_len:,} - prompt {result.prompt_tokens:,} tokens (counted by {result.counted_by}){margin}"
    if result.max_tokens:
        return [head, f"send max_tokens (or max_completion_tokens) <= {result.max_tokens:,}"]
    return [
        head,
        f"the prompt alone is too long: cut at least {result.cut_tokens:,} token{'s' if result.cut_tokens != 1 else ''} "
        "to get even one new token, more to leave room for the answer",
    ]


def render_budget(result: BudgetResult, format_name: str) -> str:
    if format_name == "json":
        document = {"schema_version": SCHEMA_VERSION, "tool": {"name": "vllm-triage", "version": __version__}, "budget": asdict(result)}
        return json.dumps(document, indent=2) + "\n"
    lines = _budget_lines(result)
    if format_name == "rich":
        buffer = io.StringIO()
        console = Console(file=buffer, force_terminal=True)
        console.print(lines[0], highlight=False, markup=False)
        console.print(lines[1], highlight=False, markup=False, style="green" if result.max_tokens else "bold red")
        return buffer.getvalue()
    return "\n".join(lines) + "\n"
