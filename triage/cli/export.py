"""`vllm-triage rules export`: the rules as alerting rules for Prometheus or Loki."""

from __future__ import annotations

import click

from triage.cli import common
from triage.cli.rules import rules
from triage.cli.common import fail


@rules.command("export")
@click.option("--format", "format_name", required=True, type=click.Choice(["prometheus", "loki"]),
              help="prometheus: alerts on vLLM's metrics; loki: LogQL alerts on its logs.")
@click.option("--selector", default=None,
              help="Label matchers for the series or log streams (default: none for prometheus, '{job=\"vllm\"}' for loki).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write the rule file to FILE.")
@click.option("--rules", "rule_paths", multiple=True, type=click.Path(), help="Extra rule file or folder (repeatable).")
def rules_export(format_name: str, selector: str | None, output: str | None, rule_paths: tuple[str, ...]) -> None:
    """Alerting rules (YAML as Prometheus or Loki's ruler loads it), each with its rule's code, title and fix."""
    from triage.probe import alerts, queries
    from triage.report.alerts_format import render_rules_file

    ruleset = common.load_ruleset(rule_paths)
    try:
        if format_name == "prometheus":
            selector = selector or ""
            queries.matchers(selector)
            made = alerts.prometheus_rules(ruleset, selector)
        else:
            selector = selector or alerts.DEFAULT_LOKI_SELECTOR
            if not queries.matchers(selector):
                raise queries.QueryError("a LogQL stream selector needs a label matcher, e.g. '{job=\"vllm\"}'")
            made = alerts.loki_rules(ruleset, selector)
    except queries.QueryError as error:
        fail(str(error))
        raise  # unreachable
    text = render_rules_file(format_name, selector, made)
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        with open(output, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as error:
        fail(f"cannot write {output}: {error.strerror or error}")
    click.echo(f"vllm-triage: {len(made)} {format_name} alerting rules written to {output}", err=True)
