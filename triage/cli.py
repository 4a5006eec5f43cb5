"""The command line: parses options and wires the stages together; it computes nothing."""

from __future__ import annotations

import os
import sys

import click

from triage import __version__
from triage.diagnose import diagnose
from triage.matcher import Matcher
from triage.reader import InputError, iter_chunks, open_input
from triage.report import ScanResult, format_names, render
from triage.ruleset import RuleError, RuleSet, load_rules
from triage.types import SEVERITIES, severity_rank

FAIL_ON = [*SEVERITIES, "never"]
EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def fail(message: str) -> None:
    """A one-line error and exit code 2: usage, input or rule-file problems."""
    click.echo(f"vllm-triage: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


def load_ruleset(rule_paths: tuple[str, ...]) -> RuleSet:
    try:
        return load_rules(rule_paths)
    except RuleError as exc:
        fail(str(exc))
        raise  # unreachable


def scan_paths(paths: list[str], matcher: Matcher) -> ScanResult:
    findings, inputs, errors = [], [], []
    for path in paths:
        try:
            name, stream = open_input(path)
        except InputError as exc:
            errors.append(str(exc))
            continue
        inputs.append(name)
        events = []
        try:
            events.extend(matcher.scan(name, iter_chunks(stream)))
        except InputError as exc:
            errors.append(f"{name}: {exc} (scanned what could be read)")
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()
        result = diagnose(events)
        findings.extend(result.findings)
    errors.extend(matcher.warnings)
    return ScanResult(findings, inputs, errors, matcher.rules)


def pick_format(requested: str) -> str:
    if requested != "auto":
        return requested
    if sys.stdout.isatty() and not os.environ.get("NO_COLOR"):
        return "rich"
    return "text"


def exit_code(result: ScanResult, fail_on: str, had_input_error: bool) -> int:
    if had_input_error:
        return EXIT_ERROR
    if fail_on == "never":
        return EXIT_CLEAN
    threshold = severity_rank(fail_on)
    if any(severity_rank(f.severity) >= threshold for f in result.findings):
        return EXIT_FINDINGS
    return EXIT_CLEAN


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="vllm-triage")
def main() -> None:
    """Diagnose vLLM context-length and KV-cache failures from logs, tracebacks and client errors."""


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(dir_okay=True, allow_dash=True))
@click.option(
    "--format", "format_name", default="auto", show_default=True,
    type=click.Choice(["auto", *format_names()]),
    help="Output format: rich panels on a terminal, plain text otherwise.",
)
@click.option(
    "--fail-on", default="error", show_default=True, type=click.Choice(FAIL_ON),
    help="Exit 1 when a finding of this severity or above is found.",
)
@click.option("--rules", "rule_paths", multiple=True, type=click.Path(), help="Extra rule file or folder (repeatable).")
def scan(paths: tuple[str, ...], format_name: str, fail_on: str, rule_paths: tuple[str, ...]) -> None:
    """Scan vLLM logs, tracebacks or client errors (files, .gz, or - for stdin)."""
    ruleset = load_ruleset(rule_paths)
    inputs = list(paths) or ["-"]
    if inputs == ["-"] and sys.stdin.isatty():
        click.echo("vllm-triage: paste the log, then Ctrl-D", err=True)
    result = scan_paths(inputs, Matcher(ruleset))
    read_errors = len(inputs) - len(result.inputs)
    for error in result.errors:
        click.echo(f"vllm-triage: {'error' if read_errors else 'warning'}: {error}", err=True)
    click.echo(render(result, pick_format(format_name)), nl=False)
    sys.exit(exit_code(result, fail_on, had_input_error=read_errors > 0))
