"""Alerting rule files, as Prometheus and Loki's ruler load them (a `groups:` YAML document)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from triage import __version__

HEADERS = {
    "prometheus": "Prometheus alerting rules for vLLM's metrics (rule_files: in prometheus.yml).",
    "loki": "Loki ruler alerting rules: LogQL over vLLM's logs, one per log signature with literal anchors.",
}


def render_rules_file(kind: str, selector: str, rules: Sequence[dict[str, Any]]) -> str:
    header = (
        f"# {HEADERS[kind]}\n"
        f"# Made by vllm-triage {__version__} (rules export --format {kind}"
        f"{f' --selector {selector!r}' if selector else ''}); each alert's code is a rule of vllm-triage rules show.\n"
    )
    document = {"groups": [{"name": f"vllm-triage-{kind}", "rules": list(rules)}]}
    return header + yaml.safe_dump(document, sort_keys=False, width=10_000, allow_unicode=True)
