"""`rules export`: Prometheus alerting rules that promtool accepts and that fire on the servers
that show the signal; Loki rules whose line filters find each rule's own examples."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.parse
import urllib.request

import fake_servers
import pytest
import yaml
from click.testing import CliRunner

from triage.cli import main
from triage.probe.alerts import logql_string
from triage.rules.ruleset import load_rules

prometheus = fake_servers.prometheus  # the fixture
servers = fake_servers.servers  # the fixture

FILTER = re.compile(r"\|= (`[^`]*`|\"(?:[^\"\\]|\\.)*\")")


def export(*args):
    return CliRunner().invoke(main, ["rules", "export", *map(str, args)])


def exported(*args) -> list[dict]:
    result = export(*args)
    assert result.exit_code == 0, result.output
    document = yaml.safe_load(result.stdout)
    (group,) = document["groups"]
    return group["rules"]


def check_annotations(rules: list[dict]) -> None:
    ruleset = load_rules()
    for alert in rules:
        rule = ruleset.by_code(alert["labels"]["code"])
        assert alert["annotations"]["code"] == rule.code and alert["annotations"]["title"] == rule.title
        assert alert["annotations"]["fix"] and "{" not in alert["annotations"]["fix"]  # no unfilled figures
        assert alert["labels"]["severity"] == rule.severity


@pytest.mark.parametrize("selector", [None, '{job="vllm",env=~"prod|staging"}'])
def test_promtool_accepts_the_prometheus_rules(tmp_path, selector):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    path = tmp_path / "vllm-alerts.yml"
    args = ["--format", "prometheus", "--output", path] + (["--selector", selector] if selector else [])
    result = export(*args)
    assert result.exit_code == 0 and "3 prometheus alerting rules written" in result.stderr
    check = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 3 rules found" in check.stdout
    rules = yaml.safe_load(path.read_text())["groups"][0]["rules"]
    assert {r["labels"]["code"] for r in rules} == {"VT301", "VT303", "VT101"}
    check_annotations(rules)
    if selector:
        assert all('job="vllm",env=~"prod|staging"' in r["expr"] for r in rules)


def instances_where(url: str, expression: str) -> set[str]:
    query = urllib.parse.urlencode({"query": expression})
    with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=5) as answer:  # noqa: S310 - loopback
        body = json.loads(answer.read())
    assert body["status"] == "success", body
    return {item["metric"]["instance"] for item in body["data"]["result"]}


def test_the_prometheus_alerts_fire_on_the_servers_that_show_the_signal(prometheus, servers):
    """B preempts and runs full with requests waiting; only A answers 4xx (0.8.5 has pfi's counter)."""
    alerts = {r["labels"]["code"]: r["expr"] for r in exported("--format", "prometheus", "--selector", '{job="vllm"}')}
    assert instances_where(prometheus, alerts["VT301"]) == {servers["b"].target}
    assert instances_where(prometheus, alerts["VT303"]) == {servers["b"].target}
    assert instances_where(prometheus, alerts["VT101"]) == {servers["a"].target}


def test_loki_filters_find_each_rules_own_examples():
    """Every exported alert: some clause's line filters all appear in one of the rule's match
    examples, and no clause's filters all appear in one of its counter-examples."""
    ruleset = load_rules()
    rules = exported("--format", "loki")
    assert {"VT201", "VT202", "VT101"} <= {r["labels"]["code"] for r in rules}
    check_annotations(rules)
    for alert in rules:
        rule = ruleset.by_code(alert["labels"]["code"])
        pieces = alert["expr"].split(" > 0 or sum by ")
        clauses = [[literal(f) for f in FILTER.findall(piece)] for piece in pieces]
        assert all(clauses) and alert["expr"].endswith("[5m])) > 0")
        assert all('(count_over_time({job="vllm"} |=' in piece for piece in pieces)
        assert any(all(f in example.text for f in clause) for clause in clauses for example in rule.examples), rule.code
        for text in rule.counter_examples:
            assert not any(all(f in text for f in clause) for clause in clauses), (rule.code, text)


def literal(token: str) -> str:
    if token.startswith("`"):
        return token[1:-1]
    return re.sub(r"\\(.)", r"\1", token[1:-1])


def test_logql_strings_round_trip():
    for text in ["plain", "with `backtick`", 'quote " and \\ backslash', "`"]:
        assert literal(logql_string(text)) == text


def test_bad_selectors():
    for args, words in ((["--format", "prometheus", "--selector", "job=vllm"], "label matchers in braces"),
                        (["--format", "loki", "--selector", "{}"], "needs a label matcher")):
        result = export(*args)
        assert result.exit_code == 2 and words in result.stderr, result.output
