"""The fixture annotation scheme: markers, what they prove, and how a miss reads."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from triage.rules.ruleset import RELIED_ON, RuleError, load_rules
from triage.rules.ruletest import check_fixture, fixture_files, has_markers, parse_value, read_markers, run

from conftest import FIXTURES

RULES = load_rules()
ANNOTATED = [p for p in fixture_files([FIXTURES]) if has_markers(p)]

KV_LINE = (
    "(EngineCore_DP0 pid=7) ERROR 08-12 10:15:40 [core.py:700] ValueError: To serve at least one request with "
    "the model's max seq len (65536), (8.0 GiB KV cache is needed, which is larger than the available KV cache "
    "memory (5.31 GiB). Based on the available memory, the estimated maximum model length is 43488. Try "
    "increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing "
    "`max_model_len` when initializing the engine."
)
NOISE = "(APIServer pid=6) INFO 08-12 10:15:41 [launcher.py:29] Route: /v1/models, Methods: GET"


def fixture(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "case.log"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("path", ANNOTATED, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_annotated_fixture_holds_what_its_markers_say(path):
    failures, markers = check_fixture(RULES, path)
    assert markers > 0
    assert not failures, "\n".join(f"{f}\n  expected: {f.expected}\n  got: {f.got}" for f in failures)


def test_our_rule_fixtures_are_annotated():
    assert {p.name for p in ANNOTATED} >= {
        "request-length-forms.log", "runtime-v0-preemption.log", "runtime-v1-kv-pressure.log", "startup-config-sizing.log",
    }


def test_expect_with_the_right_numbers_passes(tmp_path):
    path = fixture(tmp_path, NOISE, "#! expect VT201 max_model_len=65536 estimated_max_model_len=43,488", KV_LINE)
    assert check_fixture(RULES, path) == ([], 1)


def test_expect_with_a_wrong_number_fails_with_expected_and_got(tmp_path):
    path = fixture(tmp_path, "#! expect VT201 max_model_len=32768", KV_LINE)
    failures, _ = check_fixture(RULES, path)
    assert len(failures) == 1
    failure = failures[0]
    assert failure.rule == "VT201" and failure.where.endswith("case.log:2")
    assert "expected 32768, got 65536" in failure.problem
    assert failure.expected == "VT201 max_model_len=32768" and failure.got == "VT201 max_model_len=65536"


def test_derived_numbers_can_be_expected_too(tmp_path):
    path = fixture(tmp_path, "#! expect VT201 fit_max_model_len=43488 shortfall_gib=2.69", KV_LINE)
    assert check_fixture(RULES, path)[0] == []


def test_a_rule_that_does_not_fire_where_expected_is_a_miss(tmp_path):
    path = fixture(tmp_path, "#! expect VT201", NOISE)
    failures, _ = check_fixture(RULES, path)
    assert [(f.rule, f.problem, f.got) for f in failures] == [("VT201", "expected to fire here, did not", "nothing")]


def test_ok_markers_catch_false_hits(tmp_path):
    path = fixture(tmp_path, "#! ok VT201", KV_LINE, "#! ok", KV_LINE, "#! ok VT101", KV_LINE)
    failures, _ = check_fixture(RULES, path)
    assert [(f.where.split(":")[-1], f.problem) for f in failures] == [("2", "must not fire here"), ("4", "no rule may fire here")]


def test_an_unexpected_extra_finding_on_an_expected_line_fails(tmp_path):
    line = "ERROR 01-02 03:04:05 core.py:1] Input prompt (6100 tokens) is too long and exceeds limit of 4096"
    path = fixture(tmp_path, "#! expect VT111", line)
    problems = sorted(f.problem for f in check_fixture(RULES, path)[0])
    assert problems == ["expected to fire here, did not", "fired here but no marker expects it"]


def test_a_marker_naming_an_unknown_rule_is_an_error(tmp_path):
    path = fixture(tmp_path, "#! expect VT999 max_model_len=1", KV_LINE)
    failures, _ = check_fixture(RULES, path)
    assert [(f.rule, f.problem) for f in failures] == [("VT999", "marker names an unknown rule")]


@pytest.mark.parametrize(
    ("lines", "counted"),
    [
        (("#! expect VT201 max_model_len=65536", KV_LINE), 1),
        (("#! expect VT201 max_model_len=65536", "#! expect VT999", KV_LINE), 2),  # the unknown one was checked too
        (("#! expect VT999", "#! ok VT998", KV_LINE), 2),
        (("#! expects VT201", "#! expect VT201 max_model_len=65536", KV_LINE), 2),
    ],
)
def test_every_marker_read_is_counted_known_or_not(tmp_path, lines, counted):
    _, markers = check_fixture(RULES, fixture(tmp_path, *lines))
    assert markers == counted


def test_the_summary_line_counts_in_words(tmp_path):
    from triage.report.rules_format import test_outcome

    fixture(tmp_path, "#! expect VT201 max_model_len=65536", "#! expect VT999", KV_LINE)
    line = test_outcome(run(RULES, [tmp_path])).splitlines()[-1]
    assert line.endswith(", 2 markers in 1 fixture)") and line.startswith("rules test: 1 failure (")
    tmp_path.joinpath("case.log").write_text("#! expect VT201 max_model_len=65536\n" + KV_LINE + "\n")
    assert test_outcome(run(RULES, [tmp_path])).endswith(", 1 marker in 1 fixture)\n")


@pytest.mark.parametrize("marker", ["#! expects VT201", "#! expect", "#! ok VT201 VT202", "#! expect VT201 max_model_len"])
def test_a_marker_we_cannot_read_is_an_error(tmp_path, marker):
    failures, _ = check_fixture(RULES, fixture(tmp_path, marker, KV_LINE))
    assert len(failures) == 1 and failures[0].where.endswith(":1")


def test_a_marker_at_the_end_of_the_file_has_no_line_to_check(tmp_path):
    path = tmp_path / "end.log"
    path.write_text(KV_LINE + "\n#! expect VT201")
    failures, _ = check_fixture(RULES, path)
    assert [f.problem for f in failures] == ["marker has no log line after it"]


def test_markers_are_blanked_so_line_numbers_stay_those_of_the_file():
    blanked, markers, failures = read_markers(b"a\n#! ok\n#! expect VT201 x=1\nb\n", "x")
    assert blanked == b"a\n\n\nb\n"
    assert [(m.verb, m.code, m.values, m.target_line) for m in markers] == [("ok", None, {}, 4), ("expect", "VT201", {"x": 1}, 4)]
    assert failures == []


@pytest.mark.parametrize("text, value", [("8192", 8192), ("131,072", 131072), ("-3", -3), ("0.95", 0.95), ("true", True), ("RECOMPUTE", "RECOMPUTE")])
def test_marker_values_are_typed(text, value):
    assert parse_value(text) == value


def test_run_counts_what_it_checked_and_skips_logs_without_markers(tmp_path):
    fixture(tmp_path, NOISE)  # no markers: not a test fixture
    outcome = run(RULES, [tmp_path, FIXTURES / "rules"])
    assert outcome.passed, outcome.failures
    assert outcome.fixtures == 4 and outcome.markers > 40
    assert outcome.rules == len(RULES.rules)


TWO_RUNS_RULES = """
stage: runtime
rules:
  - code: VT390
    name: test-limit
    kind: fact
    title: The limit a later line is held to
    severity: info
    keywords: ["test limit is "]
    patterns:
      - id: limit
        regex: 'test limit is {limit:int}'
    examples:
      match:
        - text: "INFO test limit is 5"
          fields: {limit: 5}
  - code: VT391
    name: test-over-limit
    title: A value over the run's limit
    severity: warning
    keywords: ["test value is "]
    patterns:
      - id: value
        regex: 'test value is {value:int}'
    require: value > first(limit, 0)
    derived:
      over_by: value - first(limit, 0)
    examples:
      match:
        - text: "INFO test value is 9"
          derived: {over_by: 9}
"""
BANNER = "(APIServer pid={pid}) INFO 07-21 09:11:52 [api_server.py:1896] vLLM API server version 0.11.0"


def test_markers_are_judged_by_the_facts_of_their_own_run_as_scan_judges_them(tmp_path):
    """The second run's limit (the server restarted since) does not judge the first run's line."""
    rules_file = tmp_path / "limits.yaml"
    rules_file.write_text(TWO_RUNS_RULES)
    ruleset = load_rules([str(rules_file)])
    path = fixture(
        tmp_path, BANNER.format(pid=1), "INFO test limit is 5", "#! expect VT391 value=9 over_by=4", "INFO test value is 9",
        BANNER.format(pid=2), "INFO test limit is 20", "#! ok VT391", "INFO test value is 12",
    )
    assert check_fixture(ruleset, path) == ([], 2)
    assert run(ruleset).passed  # the rules' own examples
    scanned = subprocess.run(
        [sys.executable, "-m", "triage", "scan", "--format", "json", "--rules", str(rules_file), str(path)],
        capture_output=True, text=True,
    )
    assert [(f["code"], f["line"], f["run"]) for f in json.loads(scanned.stdout)["findings"]] == [("VT391", 4, 1)]


def test_the_gates_assertions_are_rules_a_user_rule_cannot_take_the_code_of(tmp_path):
    assertions = {rule.code: rule for rule in RULES.rules if rule.kind == "gate"}
    assert sorted(assertions) == ["VT801", "VT802", "VT803", "VT804"]
    assert all(rule.cause and rule.fixes for rule in assertions.values())
    taken = tmp_path / "taken.yaml"
    taken.write_text(TWO_RUNS_RULES.replace("VT391", "VT802"))
    with pytest.raises(RuleError, match=r"VT802 is already defined at .*gate\.yaml"):
        load_rules([str(taken)])


@pytest.mark.parametrize("key", sorted(RELIED_ON))
def test_a_rule_the_code_relies_on_is_checked_at_load(monkeypatch, key):
    kind, why = RELIED_ON[key]
    assert RULES.by_code(key).kind == kind
    monkeypatch.setitem(RELIED_ON, key, ("no-such-kind", why))
    with pytest.raises(RuleError, match=f"built-in rules: no no-such-kind rule {key} .*defines it as kind {kind}"):
        load_rules()
    monkeypatch.setitem(RELIED_ON, "no-such-rule", (kind, "a test needs it"))
    monkeypatch.delitem(RELIED_ON, key)
    with pytest.raises(RuleError, match="no-such-rule .a test needs it.; there is none"):
        load_rules()


@pytest.mark.parametrize("marker", [
    "#! outcome maybe", "#! fact kv_tokens", "#! fact kv_tokens=1 stray", "#! first-failure", "#! no-fact",
])
def test_a_run_marker_that_cannot_be_read_fails(tmp_path, marker):
    failures, read = check_fixture(RULES, fixture(tmp_path, marker, NOISE))
    assert read == 1 and len(failures) == 1 and "#!" in failures[0].problem
