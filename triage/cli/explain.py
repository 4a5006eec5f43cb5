"""`vllm-triage explain`: the length knobs, side by side or one at a time."""

from __future__ import annotations

import click

from triage.cli import common, main
from triage.cli.common import fail, pick_format
from triage.rules.ruleset import RuleSet


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
