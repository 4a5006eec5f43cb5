"""`vllm-triage scan`: the report on logs, tracebacks or client errors, at the end or as they are read."""

from __future__ import annotations

import gc
import sys

import click

from triage.cli import common, main
from triage.cli.common import (
    EXIT_INTERRUPTED, FAIL_ON, FORMAT_HELP, OUTPUT_HELP, emit, exit_code, fail, pick_report_format, silence_stdout,
)
from triage.input.follow import stdin_is_a_pipe
from triage.pipeline import ScanInterrupted, ScanOptions
from triage.pipeline import scan as scan_inputs
from triage.report import format_names, live_formats
from triage.rules.ruleset import RuleError, select_rules


def echo_flushed(text: str, to_stderr: bool) -> None:
    """Text out at once (a live stream is read as it is written)."""
    click.echo(text, nl=False, err=to_stderr)
    (sys.stderr if to_stderr else sys.stdout).flush()


def paste_hint(inputs: list[str], stdin_is_terminal: bool) -> str | None:
    """The one-line hint for a user who ran scan with nothing piped in: stdin is their keyboard."""
    if inputs == ["-"] and stdin_is_terminal:
        return "vllm-triage: paste the log, then Ctrl-D"
    return None


GC_YOUNG = 10_000  # allocations between young collections (Python's default: 700)


def settle_collector() -> None:
    """The rules, their compiled patterns and the modules live as long as the process: frozen,
    the cycle collector no longer walks them each time a scan's short-lived objects (a line's
    events, nearly all freed by their count) set it off, and it is set off less often. A scan
    is a loop of such objects; what it keeps (findings, facts) is small. Once a process (a
    program that calls the command again, tests, is not frozen again and again)."""
    young, *older = gc.get_threshold()
    if young < GC_YOUNG:
        gc.freeze()
        gc.set_threshold(GC_YOUNG, *older)


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
    # A pipe may hold a finished file or paste (one report at the end) or a running server:
    # its findings are held until it goes quiet while still open.
    hold = live is None and not (follow or tee_log)
    if live is None:
        live = follow or tee_log or (inputs == ["-"] and stdin_is_a_pipe())
    live = live and report_format in live_formats()  # json, sarif...: one document
    live_report = None
    if live:
        from triage.report.live import LiveReport  # a live report's code only for one

        live_report = LiveReport(report_format, lambda text: echo_flushed(text, tee_log), hold=hold, redact=redact)
    interrupted = False
    settle_collector()
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
