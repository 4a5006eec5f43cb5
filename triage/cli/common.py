"""What every command shares: the exit codes, the one-line error, the rules loading, the
choice of report format and where the report goes."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import click

from triage.report import ScanResult, format_for_suffix, render, summary_line, write
from triage.rules.ruleset import RuleError, RuleSet, load_rules
from triage.model import SEVERITIES, severity_rank

FAIL_ON = [*SEVERITIES, "never"]
FORMAT_HELP = (
    "auto: GitHub annotations when GITHUB_ACTIONS=true, rich on a terminal, plain text otherwise "
    "(with --output, the format the file suffix names)."
)
OUTPUT_HELP = "Write the report to FILE; stderr gets the one-line summary."
EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports after Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports when the reader went away


def fail(message: str) -> NoReturn:
    """A one-line error and exit code 2: usage, input or rule-file problems."""
    click.echo(f"vllm-triage: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


def load_ruleset(rule_paths: tuple[str, ...]) -> RuleSet:
    """The built-in rules plus rule_paths, or the one-line error. Every command loads its rules
    here, called as common.load_ruleset so that tests replace it in this one place."""
    try:
        return load_rules(rule_paths)
    except RuleError as exc:
        fail(str(exc))
        raise  # unreachable


def pick_format(requested: str) -> str:
    if requested != "auto":
        return requested
    if sys.stdout.isatty() and not os.environ.get("NO_COLOR"):
        return "rich"
    return "text"


def pick_report_format(requested: str, output: str | None) -> str:
    """auto: GitHub annotations in GitHub Actions, rich on a terminal, plain text otherwise."""
    if requested != "auto":
        return requested
    if output is not None:
        return format_for_suffix(os.path.splitext(output)[1]) or "text"  # else plain text
    if os.environ.get("GITHUB_ACTIONS") == "true":
        return "github"
    return pick_format(requested)


def emit(result: ScanResult, format_name: str, output: str | None, to_stderr: bool = False) -> None:
    """The report to stdout (stderr with --tee), or to --output with the one-line summary on stderr."""
    if output is None:
        write(result, format_name, lambda piece: click.echo(piece, nl=False, err=to_stderr))
    else:
        try:
            with open(output, "w", encoding="utf-8") as handle:
                write(result, format_name, handle.write)
        except OSError as exc:
            fail(f"cannot write {output}: {exc.strerror or exc}")
        click.echo(f"vllm-triage: {summary_line(result)}; {format_name} report written to {output}", err=True)
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if format_name == "github" and step_summary:
        try:
            with open(step_summary, "a", encoding="utf-8") as handle:
                handle.write(render(result, "markdown"))
        except OSError as exc:
            click.echo(f"vllm-triage: warning: cannot write the step summary: {exc.strerror or exc}", err=True)


def exit_code(result: ScanResult, fail_on: str, had_input_error: bool) -> int:
    if had_input_error:
        return EXIT_ERROR
    if fail_on == "never":
        return EXIT_CLEAN
    threshold = severity_rank(fail_on)
    if any(severity_rank(f.severity) >= threshold for f in result.findings):
        return EXIT_FINDINGS
    return EXIT_CLEAN


def silence_stdout() -> None:
    """Point stdout at /dev/null, so the flush at exit cannot fail on the closed pipe
    (the recipe in Python's documentation of SIGPIPE)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)

