"""The rule tooling users see: rules list/show/test, --select/--ignore, user rule files, the schema."""

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from triage.cli import main
from triage.rules.ruleset import builtin_rule_files, load_rules

from conftest import FIXTURES, ROOT

RULES = load_rules()
PRESSURE = FIXTURES / "rules" / "runtime-v1-kv-pressure.log"
SCHEMA = json.loads((ROOT / "rules" / "schema.json").read_text())


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


def codes(result) -> list[str]:
    return sorted(f["code"] for f in json.loads(result.stdout)["findings"])


# --- rules list / show ----------------------------------------------------------------


def test_rules_list_is_a_table_of_every_rule():
    result = cli("rules", "list")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["CODE", "NAME", "STAGE", "SEVERITY", "TITLE"]
    row = next(line for line in lines if line.startswith("VT303"))
    assert row.split()[:4] == ["VT303", "kv-cache-saturated", "runtime", "info"]
    assert lines[-1] == f"{len(RULES.rules)} rules"


def test_rules_list_json_has_the_columns_for_each_rule_in_code_order():
    rows = json.loads(cli("rules", "list", "--format", "json").stdout)
    assert [r["code"] for r in rows] == sorted(r.code for r in RULES.rules)
    assert {"code", "name", "stage", "severity", "title"} <= set(rows[0])


def test_rules_show_explains_a_rule_from_its_file():
    result = cli("rules", "show", "VT203")
    assert result.exit_code == 0
    out = result.stdout
    for section in ("What it means:", "Why it happens:", "How to fix:", "Example:", "vLLM versions (0.9.1 - current):"):
        assert section in out
    assert "--gpu-memory-utilization {utilization_fit}" in out  # templates shown as written
    assert "free-memory: 0.9.1 - current" in out and "cpu-node-memory: 0.20.0 - 0.32.0" in out
    assert "Free memory on device cuda:0 (30.4/79.19 GiB)" in out


def test_rules_show_finds_a_rule_by_name_and_prints_json():
    detail = json.loads(cli("rules", "show", "kv-cache-saturated", "--format", "json").stdout)
    assert detail["code"] == "VT303"
    assert detail["require"] == "(waiting > 0 or first(swapped, 0) > 0) and kv_usage_pct >= 95"
    assert [p["id"] for p in detail["patterns"]] == ["v0-stats", "v1-stats"]
    assert detail["fixes"][0]["text"].startswith("Add KV memory")
    assert "Pending: 13 reqs" in detail["example"]


def test_rules_show_an_unknown_rule_is_a_usage_error():
    result = cli("rules", "show", "VT999")
    assert result.exit_code == 2
    assert "no rule 'VT999'" in result.stderr


# --- rules test -------------------------------------------------------------------------


def test_rules_test_passes_on_the_built_in_rules_and_our_fixtures():
    result = cli("rules", "test", str(FIXTURES))
    assert result.exit_code == 0, result.stdout
    assert result.stdout.startswith("rules test: all passed (")
    assert f"{len(RULES.rules)} rules" in result.stdout


def test_rules_test_fails_with_a_readable_diff(tmp_path):
    log = tmp_path / "wrong.log"
    log.write_text(
        "#! expect VT305 max_model_len=4096\n"
        "AssertionError: Sampled token IDs exceed the max model length. Total number of tokens: 8194 > max_model_len: 8192\n"
    )
    result = cli("rules", "test", str(log))
    assert result.exit_code == 1
    assert f"FAIL {log}:2  VT305: field max_model_len: expected 4096, got 8192" in result.stdout
    assert "  - expected: VT305 max_model_len=4096" in result.stdout
    assert "  + got:      VT305 max_model_len=8192" in result.stdout
    assert result.stdout.rstrip().endswith("fixture)")


def test_rules_test_runs_a_user_rule_files_examples(tmp_path):
    rules = tmp_path / "mine.yaml"
    rules.write_text(yaml.safe_dump({"stage": "runtime", "rules": [{
        "code": "VT391", "name": "my-rule", "title": "t", "keywords": ["hello"],
        "patterns": [r"hello {count_value:int}"],
        "examples": {"match": [{"text": "hello 5", "fields": {"count_value": 6}}]},
    }]}))
    result = cli("rules", "test", "--rules", str(rules))
    assert result.exit_code == 1
    assert "VT391: field count_value: expected 6, got 5" in result.stdout


# --- --select / --ignore ----------------------------------------------------------------


def test_select_by_prefix_keeps_only_those_rules():
    result = cli("scan", "--format", "json", "--select", "VT30", str(PRESSURE))
    assert codes(result) == ["VT301", "VT303", "VT304", "VT305"]


def test_ignore_by_code_and_select_by_name():
    assert "VT301" not in codes(cli("scan", "--format", "json", "--ignore", "VT301", str(PRESSURE)))
    assert codes(cli("scan", "--format", "json", "--select", "kv-cache-saturated", str(PRESSURE))) == ["VT303"]


def test_facts_still_feed_findings_when_their_rules_are_not_selected(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(
        "(APIServer pid=9) INFO 03-11 14:20:01 [utils.py:233] non-default args: {'model': 'm', 'max_num_seqs': 384}\n"
        + "".join(
            f"(APIServer pid=9) INFO 03-11 14:25:{second} [loggers.py:127] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
            f"Avg generation throughput: 5.0 tokens/s, Running: 90 reqs, Waiting: 3 reqs, Preemptions: {n}, "
            "GPU KV cache usage: 99.0%, Prefix cache hit rate: 1.0%\n"
            for second, n in (("10", 4), ("20", 7), ("30", 1))
        )
    )
    findings = json.loads(cli("scan", "--format", "json", "--select", "VT301", str(log)).stdout)["findings"]
    assert [(f["code"], f["count"], f["line"], f["last_line"]) for f in findings] == [("VT301", 3, 2, 4)]
    assert "lower --max-num-seqs (now 384)" in " ".join(findings[0]["fixes"])


def test_a_selector_that_matches_no_rule_is_a_usage_error():
    result = cli("scan", "--select", "VT7", str(PRESSURE))
    assert result.exit_code == 2
    assert "VT7: matches no rule" in result.stderr


# --- user rule files ------------------------------------------------------------------------


def user_rule(tmp_path: Path, code: str, regex: str, example: str) -> Path:
    path = tmp_path / "user.yaml"
    path.write_text(yaml.safe_dump({"stage": "runtime", "rules": [{
        "code": code, "name": f"user-{code.lower()}", "title": "A user rule", "keywords": ["BACKTRACK"],
        "patterns": [{"id": "slow", "regex": regex}], "examples": {"match": [example]},
    }]}))
    return path


def test_a_user_rule_may_not_reuse_a_built_in_code(tmp_path):
    rules = user_rule(tmp_path, "VT101", "BACKTRACK", "BACKTRACK")
    result = cli("scan", "--rules", str(rules), str(PRESSURE))
    assert result.exit_code == 2
    assert "VT101 is already defined at" in result.stderr and "user.yaml" in result.stderr


def test_a_catastrophically_backtracking_user_regex_does_not_hang_the_scan(tmp_path):
    rules = user_rule(tmp_path, "VT391", r"BACKTRACK (a|aa)+$", "BACKTRACK aa")
    log = tmp_path / "server.log"
    log.write_text("INFO 01-01 00:00:00 [x.py:1] fine\n" + "BACKTRACK " + "a" * 60 + "b\n")
    result = cli("scan", "--format", "json", "--rules", str(rules), str(log))
    assert result.exit_code == 0
    assert f"{log}:2: rule VT391 pattern slow took longer than" in result.stderr


# --- the JSON Schema ----------------------------------------------------------------------


def test_the_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("path", builtin_rule_files(), ids=lambda p: p.name)
def test_every_built_in_rule_file_validates_against_the_schema(path):
    jsonschema.validate(yaml.safe_load(path.read_text()), SCHEMA, cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize("mistake", [{"severity": "fatal"}, {"code": "X1"}, {"colour": "red"}, {"patterns": []}])
def test_the_schema_refuses_what_the_loader_refuses(mistake):
    rule = {"code": "VT391", "name": "ok-rule", "title": "t", "keywords": ["k"], "patterns": ["k"], "examples": {"match": ["k"]}}
    document = {"rules": [{**rule, **mistake}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, SCHEMA, cls=jsonschema.Draft202012Validator)


def test_the_guide_example_rule_loads_validates_and_passes_its_examples(tmp_path):
    guide = (ROOT / "docs" / "rule-authoring.md").read_text()
    rule_file = tmp_path / "example.yaml"
    rule_file.write_text(guide.split("```yaml\n", 1)[1].split("```", 1)[0])
    jsonschema.validate(yaml.safe_load(rule_file.read_text()), SCHEMA, cls=jsonschema.Draft202012Validator)
    result = cli("rules", "test", "--rules", str(rule_file))
    assert result.exit_code == 0, result.stdout
    assert f"{len(RULES.rules) + 1} rules" in result.stdout
