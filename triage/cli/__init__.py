"""The command line: parses options and wires the stages together; it computes nothing."""

from __future__ import annotations

import sys
from typing import Any

import click

from triage import __version__
from triage.cli import common
from triage.cli.common import (
    EXIT_BROKEN_PIPE, EXIT_CLEAN, EXIT_FINDINGS, EXIT_INTERRUPTED, FAIL_ON, FORMAT_HELP, OUTPUT_HELP,
    emit, exit_code, fail, pick_format, pick_report_format, silence_stdout,
)
from triage.input.follow import stdin_is_a_pipe
from triage.match.anchors import EngineError
from triage.pipeline import ScanInterrupted, ScanOptions
from triage.pipeline import scan as scan_inputs
from triage.report import format_names, live_formats
from triage.rules.ruleset import RuleError, RuleSet, select_rules


def echo_flushed(text: str, to_stderr: bool) -> None:
    """Text out at once (a live stream is read as it is written)."""
    click.echo(text, nl=False, err=to_stderr)
    (sys.stderr if to_stderr else sys.stdout).flush()


def paste_hint(inputs: list[str], stdin_is_terminal: bool) -> str | None:
    """The one-line hint for a user who ran scan with nothing piped in: stdin is their keyboard."""
    if inputs == ["-"] and stdin_is_terminal:
        return "vllm-triage: paste the log, then Ctrl-D"
    return None


class TriageGroup(click.Group):
    """Ends quietly when the reader of stdout goes away (`| head`) and on Ctrl-C.

    Every command writes through QuietStdout, so a closed pipe drops the rest of the output
    and the command still runs to its end: its exit code (a gate's verdict, a rules test's
    outcome) is the one it would have had."""

    def invoke(self, ctx: click.Context) -> None:
        original = sys.stdout
        if original is not None:
            sys.stdout = QuietStdout(original)
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # a write that did not go through sys.stdout
            silence_stdout()
            ctx.exit(EXIT_BROKEN_PIPE)
        except KeyboardInterrupt:
            click.echo("vllm-triage: interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)
        except EngineError as exc:  # VLLM_TRIAGE_ENGINE names one that cannot run here
            fail(str(exc))
        finally:
            if original is not None:
                sys.stdout.flush()  # still quiet: what is buffered may meet the closed pipe
                sys.stdout = original


class QuietStdout:
    """stdout (text, or its .buffer) whose write or flush on a closed pipe points stdout at
    /dev/null instead of raising BrokenPipeError."""

    def __init__(self, stream: Any):
        self._stream = stream

    def write(self, data: Any) -> int:
        try:
            return self._stream.write(data)
        except BrokenPipeError:
            silence_stdout()
            return len(data)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            silence_stdout()
            self._stream.flush()  # what was buffered now goes to /dev/null

    @property
    def buffer(self) -> QuietStdout:
        return QuietStdout(self._stream.buffer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@click.group(cls=TriageGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="vllm-triage")
def main() -> None:
    """Diagnose vLLM context-length and KV-cache failures from logs, tracebacks and client errors."""


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(dir_okay=True, allow_dash=True))
@click.option(
    "--format", "format_name", default="auto", show_default=True,
    type=click.Choice(["auto", *format_names()]),
    help=FORMAT_HELP,
)
@click.option(
    "--fail-on", default="error", show_default=True, type=click.Choice(FAIL_ON),
    help="Exit 1 when a finding of this severity or above is found.",
)
@click.option("--rules", "rule_paths", multiple=True, type=click.Path(), help="Extra rule file or folder (repeatable).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), help=OUTPUT_HELP)
@click.option("--show-text", is_flag=True, help="Include each finding's whole log record (off: vLLM's lines can quote prompts).")
@click.option("--redact", is_flag=True, help="Mask API keys, tokens, e-mail and IP addresses in everything printed.")
@click.option("--select", "selected", multiple=True, help="Only these rules: code, code prefix (VT1, VT30) or name (repeatable).")
@click.option("--ignore", "ignored", multiple=True, help="Skip these rules: code, code prefix or name (repeatable).")
@click.option(
    "--follow", "-f", is_flag=True,
    help="Keep reading FILE as it grows, like tail -f (survives rotation and truncation); Ctrl-C ends with the summary.",
)
@click.option("--tee", "tee_log", is_flag=True, help="Pass the log through to stdout unchanged; findings go to stderr.")
@click.option(
    "--live/--no-live", default=None,
    help="Print each finding as soon as its line is read, then what the end adds "
    "(default: on for --follow, --tee and a pipe that stays open; text and jsonl).",
)
@click.option(
    "--jobs", "-j", default=1, show_default=True, type=click.IntRange(min=1),
    help="Scan each file with N processes (a plain file on disk; pipes and .gz are read by one).",
)
def scan(
    paths: tuple[str, ...], format_name: str, fail_on: str, rule_paths: tuple[str, ...], output: str | None,
    show_text: bool, redact: bool, selected: tuple[str, ...], ignored: tuple[str, ...], follow: bool = False,
    tee_log: bool = False, live: bool | None = None, jobs: int = 1,
) -> None:
    """Scan vLLM logs, tracebacks or client errors (files, .gz, or - for stdin)."""
    ruleset = common.load_ruleset(rule_paths)
    try:
        chosen = select_rules(ruleset.rules, selected, ignored)
    except RuleError as exc:
        fail(str(exc))
    inputs = list(paths) or ["-"]
    hint = paste_hint(inputs, sys.stdin.isatty())
    if hint:
        click.echo(hint, err=True)
    if follow and (len(inputs) != 1 or inputs == ["-"]):
        fail("--follow reads one file (a pipe is followed anyway: vllm serve ... | vllm-triage scan)")
    if follow:  # otherwise nothing shows that it runs until the log says something
        click.echo(f"vllm-triage: following {inputs[0]}; findings print as they are read, Ctrl-C ends with the summary", err=True)
    report_format = pick_report_format(format_name, output)
    from triage.report.live import LiveReport

    # A pipe may hold a finished file or paste (one report at the end) or a running server:
    # its findings are held until it goes quiet while still open.
    hold = live is None and not (follow or tee_log)
    if live is None:
        live = follow or tee_log or (inputs == ["-"] and stdin_is_a_pipe())
    live = live and report_format in live_formats()  # json, sarif...: one document
    live_report = None
    if live:
        live_report = LiveReport(report_format, lambda text: echo_flushed(text, tee_log), hold=hold, redact=redact)
    interrupted = False
    try:
        result = scan_inputs(inputs, ScanOptions(
            ruleset, chosen, keep_text=show_text, on_finding=live_report, follow=follow, live=live,
            on_wait=live_report.release if live_report is not None and hold else None,
            tee_to=sys.stdout.buffer if tee_log else None, progress=not follow and sys.stderr.isatty(), jobs=jobs,
        ))
    except ScanInterrupted as stop:
        result, interrupted = stop.result, True
    if redact:  # the one place: every format, and the messages below, get the masked result
        from triage.report.redact import redact_result  # imported only when asked for

        result = redact_result(result)
    unreadable = len(inputs) - len(result.inputs) - len(result.skipped)
    input_error = unreadable > 0 or not result.inputs  # binary inputs alone only warn, unless nothing was read
    for error in result.errors:
        click.echo(f"vllm-triage: {'error' if input_error else 'warning'}: {error}", err=True)
    # Ctrl-C is how --follow ends: the exit code then says what was found, as at the end of a file.
    stopped = interrupted and not follow
    code = EXIT_INTERRUPTED if stopped else exit_code(result, fail_on, had_input_error=input_error)
    rest = live_report.rest(result) if live_report is not None and output is None else None
    try:
        if rest is not None:  # findings were printed as they came: the end adds what is new
            echo_flushed(rest, tee_log)
        else:
            emit(result, report_format, output, to_stderr=tee_log)
        sys.stdout.flush()
    except BrokenPipeError:  # `| head` read what it wanted: the scan itself is complete
        silence_stdout()
    sys.exit(code)


@main.command()
@click.argument("startup_log", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--min-max-model-len", type=click.IntRange(min=1), help="Fail when the served window is below N tokens.")
@click.option("--min-concurrency", type=click.FloatRange(min=0), help="Fail when fewer than X full-length requests fit in the KV cache.")
@click.option(
    "--max-kv-usage-at-start", type=click.FloatRange(0, 100),
    help="Fail when the first metrics line shows more than P% of the KV cache in use.",
)
@click.option("--require-ready", is_flag=True, help="Fail unless the log shows the server ready and no startup error.")
@click.option(
    "--fail-on", default="error", show_default=True, type=click.Choice(FAIL_ON),
    help="Also exit 1 when a finding of this severity or above is found.",
)
@click.option("--format", "format_name", default="auto", show_default=True, type=click.Choice(["auto", *format_names()]), help=FORMAT_HELP)
@click.option("--output", "-o", type=click.Path(dir_okay=False), help=OUTPUT_HELP)
@click.option("--rules", "rule_paths", multiple=True, type=click.Path(), help="Extra rule file or folder (repeatable).")
def gate(startup_log: str, min_max_model_len: int | None, min_concurrency: float | None, max_kv_usage_at_start: float | None,
         require_ready: bool, fail_on: str, format_name: str, output: str | None, rule_paths: tuple[str, ...]) -> None:
    """Assert a startup log shows the capacity you planned for (exit 1 when it does not)."""
    from triage.diagnose.gate import Thresholds, assertions_of, checks_run, evaluate

    thresholds = Thresholds(min_max_model_len, min_concurrency, max_kv_usage_at_start, require_ready)
    ruleset = common.load_ruleset(rule_paths)
    assertions = assertions_of(ruleset.rules) or None  # None: the built-in ones (a set loaded without them)
    # --min-concurrency asserts what the advisory capacity warning says; without it the gate
    # reports that warning as scan does on the same log.
    advisory = thresholds.min_concurrency is None
    result = scan_inputs([startup_log], ScanOptions(ruleset, standalone_checks=advisory))
    if not result.inputs:
        fail(result.errors[0])
    for error in result.errors:
        click.echo(f"vllm-triage: warning: {error}", err=True)
    name = result.inputs[0]
    failed = evaluate(name, result.facts.get(name, {}), result.findings, thresholds, assertions=assertions)
    result.findings.extend(failed)
    result.rules.extend(checks_run(thresholds, assertions))
    emit(result, pick_report_format(format_name, output), output)
    sys.exit(EXIT_FINDINGS if failed else exit_code(result, fail_on, had_input_error=False))


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


@main.group()
def rules() -> None:
    """List, explain and test the rules (built-in, plus --rules files)."""


@rules.command("list")
@click.option("--rules", "rule_paths", multiple=True, type=click.Path(), help="Extra rule file or folder (repeatable).")
@click.option("--format", "format_name", default="text", show_default=True, type=click.Choice(["text", "json"]))
def rules_list(rule_paths: tuple[str, ...], format_name: str) -> None:
    """Every rule: code, name, stage, severity, title."""
    from triage.report.rules_format import rules_list as render_list

    click.echo(render_list(common.load_ruleset(rule_paths).rules, format_name), nl=False)


@rules.command("show")
@click.argument("code_or_name")
@click.option("--rules", "rule_paths", multiple=True, type=click.Path(), help="Extra rule file or folder (repeatable).")
@click.option("--format", "format_name", default="text", show_default=True, type=click.Choice(["text", "json"]))
def rules_show(code_or_name: str, rule_paths: tuple[str, ...], format_name: str) -> None:
    """What a rule means, why it fires, how to fix it, an example and the vLLM versions it covers."""
    from triage.report.rules_format import rule_show

    rule = find_rule(common.load_ruleset(rule_paths), code_or_name)
    if rule is None:
        fail(no_rule_message(code_or_name))
    click.echo(rule_show(rule, format_name), nl=False)


def find_rule(ruleset: RuleSet, code_or_name: str) -> Any:
    """A rule by code or name, the code in any case (vt201 is VT201)."""
    wanted = code_or_name.strip()
    return ruleset.by_code(wanted) or ruleset.by_code(wanted.upper())


def no_rule_message(code_or_name: str) -> str:
    return f"no rule {code_or_name!r} (vllm-triage rules list shows them all)"


@rules.command("test")
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--rules", "rule_paths", multiple=True, type=click.Path(), help="Extra rule file or folder (repeatable).")
def rules_test(paths: tuple[str, ...], rule_paths: tuple[str, ...]) -> None:
    """Run every rule's examples, and the markers of annotated fixture logs in PATHS (files or folders)."""
    from triage.rules import ruletest
    from triage.report.rules_format import test_outcome

    outcome = ruletest.run(common.load_ruleset(rule_paths), paths)
    click.echo(test_outcome(outcome), nl=False)
    sys.exit(EXIT_CLEAN if outcome.passed else EXIT_FINDINGS)


@main.command()
@click.argument("topic", required=False)
@click.option("--format", "format_name", default="auto", show_default=True, type=click.Choice(["auto", "text", "rich", "json"]))
def explain(topic: str | None, format_name: str) -> None:
    """The five length knobs side by side, or one TOPIC (e.g. max-model-len, max-tokens, kv-cache)."""
    from triage.plan.explain import find_topic
    from triage.report.rules_format import explain_all, explain_topic

    titles = rule_titles(common.load_ruleset(()))
    format_name = pick_format(format_name)
    if topic is None:
        click.echo(explain_all(titles, format_name), nl=False)
        return
    knob = find_topic(topic)
    if knob is None:
        fail(no_topic_message(topic))
    click.echo(explain_topic(knob, titles, format_name), nl=False)


def no_topic_message(topic: str) -> str:
    from triage.plan.explain import topic_names

    return f"no topic {topic!r}; choose one of: {', '.join(topic_names())}"


def rule_titles(ruleset: RuleSet) -> dict[str, str]:
    """Each rule's title by code: what explain cites."""
    return {rule.code: rule.title for rule in ruleset.rules}


MCP_MISSING = "vllm-triage mcp needs the MCP SDK, an optional extra: pip install 'vllm-triage[mcp]'"


@main.command("mcp")
def mcp_command() -> None:
    """Serve scan, plan, budget, explain and rules show to a coding agent: an MCP server on stdio."""
    import importlib.util

    if importlib.util.find_spec("mcp") is None:
        fail(MCP_MISSING)
    from triage.cli.mcp_server import serve  # the SDK: imported only by this command

    serve()


# Command groups kept in their own modules register themselves on `main` when imported.
from triage.cli import probe as _probe  # noqa: E402,F401
from triage.cli import export as _export  # noqa: E402,F401
