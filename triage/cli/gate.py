"""`vllm-triage gate`: a startup log against the capacity planned for, for CI."""

from __future__ import annotations

import sys

import click

from triage.cli import common, main
from triage.cli.common import EXIT_FINDINGS, FAIL_ON, FORMAT_HELP, OUTPUT_HELP, emit, exit_code, fail, pick_report_format
from triage.model import ScanResult
from triage.pipeline import ScanOptions
from triage.pipeline import scan as scan_inputs
from triage.report import format_names


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
    from triage.diagnose.gate import Thresholds, assertions_of, checks_run, gate_log

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
    failed, result.checks = gate_log(result, result.inputs[0], thresholds, assertions)
    result.findings.extend(failed)
    result.rules.extend(checks_run(thresholds, assertions))
    report_format = pick_report_format(format_name, output)
    emit(result, report_format, output)
    emit_checks(result, report_format, output)
    sys.exit(EXIT_FINDINGS if failed else exit_code(result, fail_on, had_input_error=False))


VERDICT_FORMATS = ("text", "rich", "concise")  # the formats a person reads: the others carry the checks themselves


def emit_checks(result: ScanResult, format_name: str, output: str | None) -> None:
    """After a report a person reads: the gate's verdict, and the figures of each assertion that held."""
    from triage.report.gate_checks import render_checks

    verdict = render_checks(result.checks)
    if not verdict or format_name not in VERDICT_FORMATS:
        return
    if output is None:
        click.echo("\n" + verdict, nl=False)
        return
    try:
        with open(output, "a", encoding="utf-8") as handle:
            handle.write("\n" + verdict)
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}")
