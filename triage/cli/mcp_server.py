"""`vllm-triage mcp`: the scan, plan, budget, explain and rules tools for coding agents, over
the Model Context Protocol on stdio.

Each tool runs what the command of the same name runs (pipeline.scan, make_plan, make_budget,
find_rule, the explain topics) and answers with the JSON that command's `--format json`
prints, parsed: the server wires and formats nothing of its own. Imported only by the `mcp`
command: the `mcp` SDK is an optional extra (vllm-triage[mcp]).

What an agent may ask is bounded: files are opened read-only and must be regular files (never
a FIFO or /dev/stdin, which is the protocol's own pipe); pasted text is at most
MAX_TEXT_BYTES, a log is read up to MAX_LOG_BYTES (after gunzip) and the other files up to
MAX_FILE_BYTES. A bad path or input is a tool error with the one-line message the CLI would
print; the server goes on serving.
"""

from __future__ import annotations

import functools
import json
import os
import stat
import threading
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import ValidationError

from triage import __version__
from triage.cli.explain import no_topic_message, rule_titles
from triage.cli.plan import make_budget, make_plan, plan_errors
from triage.cli.rules import find_rule, no_rule_message
from triage.input.reader import size_text
from triage.pipeline import ScanOptions, Text, scan
from triage.report import render
from triage.rules.ruleset import RuleError, RuleSet, load_rules

MIB = 1 << 20
MAX_TEXT_BYTES = 4 * MIB  # pasted log text (UTF-8)
MAX_LOG_BYTES = 256 * MIB  # a log file as read (after gunzip): the report covers this much
MAX_FILE_BYTES = 64 * MIB  # config.json, a prompt file, tokenizer.json (large vocabularies reach 35 MB)
PASTED = "<pasted>"  # the input's name in the report

INSTRUCTIONS = (
    "Diagnoses vLLM context-length and KV-cache failures. Give scan_log a log path (or scan_text the "
    "pasted text): the findings carry the numbers read from the log and the fixes to apply. plan gives "
    "the max_model_len and concurrency a model's config.json fits on a GPU; budget the largest "
    "max_tokens for a prompt; explain_knob the length settings; show_rule what a finding's code means."
)



class TriageServer(MCPServer):
    """The SDK's server, with arguments that fail the input schema told in one line."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if not isinstance(exc.__cause__, ValidationError):
                raise
            # field and reason only: pydantic's text spans lines and quotes the value sent
            reasons = "; ".join(
                f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}" for error in exc.__cause__.errors()
            )
            raise ToolError(f"bad arguments for {name}: {reasons}") from None


# WARNING: the SDK logs every failed call at INFO on stderr, which is the agent's log of this server
server = TriageServer("vllm-triage", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
_scan_lock = threading.Lock()  # tools run in worker threads: one scan at a time


@functools.cache
def _loaded_rules() -> RuleSet:
    return load_rules(())


def builtin_rules() -> RuleSet:
    """The built-in rules, loaded at the first call that needs them. Not the CLI's
    load_ruleset: its error exits the process, and a server answers with a tool error."""
    try:
        return _loaded_rules()
    except RuleError as exc:
        raise ToolError(str(exc)) from None


def regular_file(path: str, limit: int | None = None) -> str:
    """path, when it names a readable regular file (of at most limit bytes), else a ToolError."""
    if not isinstance(path, str) or not path.strip():
        raise ToolError("give a file path")
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ToolError(f"{path}: no such file") from None
    except OSError as exc:
        raise ToolError(f"{path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise ToolError(f"{path}: is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise ToolError(f"{path}: not a regular file")
    if limit is not None and info.st_size > limit:
        raise ToolError(f"{path}: {info.st_size / MIB:.1f} MiB, more than the {size_text(limit)} this tool reads")
    return path


def scan_report(inputs: list[str | Text], redact: bool) -> dict[str, Any]:
    """The JSON report of a scan, as `vllm-triage scan --format json [--redact]` prints it."""
    with _scan_lock:
        result = scan(inputs, ScanOptions(builtin_rules(), max_bytes=MAX_LOG_BYTES))
    if not result.inputs:  # nothing could be read: the CLI's exit 2
        raise ToolError(_redacted_text(result.errors[0]) if redact else result.errors[0])
    if redact:
        from triage.report.redact import redact_result

        result = redact_result(result)
    return _json(render(result, "json"))


def _redacted_text(text: str) -> str:
    from triage.report.redact import redact

    return redact(text)


def _json(text: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(text)
    return document


@server.tool()
def scan_log(path: str, redact: bool = True) -> dict[str, Any]:
    """Scan a vLLM server log, traceback or client error log (plain or .gz) for context-length
    and KV-cache failures. Returns the JSON report: `findings` (most severe first) with code,
    severity, source and line, `count` (the log lines merged into it), the numbers read from
    the log (`fields`: the first line's), worked out (`derived`: the totals over all the merged
    lines among them, as VT301's `preemptions`) and taken from elsewhere in the run (`facts`),
    `cause` and `fixes`; `errors`
    lists what could not be read. redact (on by default) masks API keys, tokens, e-mail and
    IP addresses. Prompt text is never returned. The file is read up to 256 MiB."""
    return scan_report([regular_file(path)], redact)


@server.tool()
def scan_text(text: str, redact: bool = True) -> dict[str, Any]:
    """Scan pasted log text (a traceback, an error message, a startup log) like scan_log; the
    input is named "<pasted>" in the report and its line numbers count from the text's first
    line. At most 4 MiB of text."""
    if len(text) > MAX_TEXT_BYTES or len(text.encode("utf-8", errors="replace")) > MAX_TEXT_BYTES:
        raise ToolError(f"the text is more than {size_text(MAX_TEXT_BYTES)}; write it to a file and use scan_log")
    return scan_report([Text(PASTED, text.encode("utf-8", errors="replace"))], redact)


@server.tool()
def plan(
    config_path: str, gpu: str | None = None, gpu_memory: str | None = None, gpus: int | None = None,
    tensor_parallel_size: int | None = None, pipeline_parallel_size: int | None = None,
    gpu_memory_utilization: float = 0.9, kv_cache_dtype: str = "auto", max_model_len: int | None = None,
    max_num_seqs: int = 256, concurrency_at: int | None = None,
) -> dict[str, Any]:
    """What --max-model-len and concurrency fit: KV-cache arithmetic from a model's config.json
    (or a model folder holding one) on a GPU given by name (gpu="H100", "A100 40GB", "L4", ...)
    or by memory (gpu_memory="80GiB"). Returns `vllm-triage plan --format json`: the KV bytes
    per token, the KV cache in GiB and tokens, the longest window that fits and how many
    full-length sequences fit at once."""
    from triage.report.plan_format import render_plan

    config = config_path if os.path.isdir(config_path) else regular_file(config_path, MAX_FILE_BYTES)
    if os.path.isdir(config):
        regular_file(os.path.join(config, "config.json"), MAX_FILE_BYTES)
    try:
        result = make_plan(
            config, gpu_name=gpu, gpu_memory=gpu_memory, gpus=gpus, tensor_parallel_size=tensor_parallel_size,
            pipeline_parallel_size=pipeline_parallel_size, gpu_memory_utilization=gpu_memory_utilization,
            kv_cache_dtype=kv_cache_dtype, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
            concurrency_at=concurrency_at,
        )
    except plan_errors() as exc:
        raise ToolError(str(exc)) from None
    return _json(render_plan(result, "json"))


@server.tool()
def budget(
    max_model_len: int, prompt_tokens: int | None = None, prompt_file: str | None = None,
    tokenizer: str | None = None, margin: int = 0,
) -> dict[str, Any]:
    """The largest max_tokens to send with a prompt on a server whose max_model_len is given,
    or how many tokens to cut: give prompt_tokens (as the server counts them), or prompt_file
    with tokenizer (a local tokenizer.json or a model folder holding one). The prompt is counted,
    never returned. Returns `vllm-triage budget --format json`."""
    from triage.report.plan_format import render_budget

    if prompt_file is not None:
        regular_file(prompt_file, MAX_FILE_BYTES)
    if tokenizer is not None and not os.path.isdir(tokenizer):
        regular_file(tokenizer, MAX_FILE_BYTES)
    try:
        result = make_budget(max_model_len, prompt_tokens, prompt_file, tokenizer, margin)
    except plan_errors() as exc:
        raise ToolError(str(exc)) from None
    return _json(render_budget(result, "json"))


@server.tool()
def explain_knob(topic: str | None = None) -> dict[str, Any]:
    """What one length setting means and how it interacts with the others: max-model-len,
    max-tokens, max-num-batched-tokens, max-num-seqs, kv-cache (and their aliases); without a
    topic, all of them side by side. Returns `vllm-triage explain --format json`."""
    from triage.plan.explain import find_topic
    from triage.report.rules_format import explain_all, explain_topic

    if topic is None or not topic.strip():
        return _json(explain_all(rule_titles(builtin_rules()), "json"))
    knob = find_topic(topic)
    if knob is None:
        raise ToolError(no_topic_message(topic))
    return _json(explain_topic(knob, rule_titles(builtin_rules()), "json"))


@server.tool()
def show_rule(code_or_name: str) -> dict[str, Any]:
    """What a finding's rule means, why it fires and how to fix it, with an example and the
    vLLM versions it covers: by code (VT201) or name (kv-cache-too-small). Returns
    `vllm-triage rules show --format json`."""
    from triage.report.rules_format import rule_show

    rule = find_rule(builtin_rules(), code_or_name)
    if rule is None:
        raise ToolError(no_rule_message(code_or_name))
    return _json(rule_show(rule, "json"))


def serve() -> None:
    server.run("stdio")
