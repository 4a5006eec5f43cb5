"""`vllm-triage rules`: list, show and test the rules (export is in export.py)."""

from __future__ import annotations

import sys
from typing import Any

import click

from triage.cli import common, main
from triage.cli.common import EXIT_CLEAN, EXIT_FINDINGS, fail
from triage.rules.ruleset import RuleSet


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
