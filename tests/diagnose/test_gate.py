"""`vllm-triage gate`: each assertion both ways, its numbers, and the exit codes."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from triage import cli
from triage.diagnose.facts import Facts
from triage.diagnose.gate import Thresholds, concurrency_at_full_length, evaluate, served_window
from triage.model import Finding

ROOT = Path(__file__).resolve().parents[2]
HEALTHY = "fixtures/gate/healthy.log"
SHORT = "fixtures/gate/short-window.log"
LOW = "fixtures/gate/low-concurrency.log"
NEVER = "fixtures/gate/never-ready.log"
KV_TOO_SMALL = "fixtures/startup-kv-too-small-v1.log"


@pytest.fixture
def gate(monkeypatch):
    """Run `vllm-triage gate ... --format json`; the exit code and the findings by code."""
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)

    def run(log: str, *options: str):
        result = CliRunner().invoke(cli.main, ["gate", log, "--format", "json", *options], catch_exceptions=False)
        findings = json.loads(result.stdout)["findings"] if result.stdout else []
        return result.exit_code, {f["code"]: f for f in findings}

    return run


# --- each assertion both ways, through the command ------------------------------------


def test_a_healthy_startup_passes_every_assertion(gate):
    code, findings = gate(
        HEALTHY, "--require-ready", "--min-max-model-len", "32768", "--min-concurrency", "6.5",
        "--max-kv-usage-at-start", "1",
    )
    assert code == 0 and findings == {}


def test_ready_fails_when_the_log_never_got_ready(gate):
    code, findings = gate(NEVER, "--require-ready")
    assert code == 1
    assert findings["VT801"]["fields"] == {"startup_errors": 0}
    assert "no 'Starting vLLM API server'" in findings["VT801"]["cause"][0]


def test_ready_fails_on_a_startup_error_and_names_it(gate):
    code, findings = gate(KV_TOO_SMALL, "--require-ready", "--fail-on", "never")
    assert code == 1  # the assertion fails whatever --fail-on says
    ready = findings["VT801"]
    assert ready["fields"] == {"startup_errors": 1, "first_error_code": "VT201", "first_error_line": 24}
    assert ready["line"] == 24
    assert ready["fixes"][0].startswith("Fix VT201 first")


def test_without_require_ready_an_unready_log_passes(gate):
    assert gate(NEVER) == (0, {})


def test_window_below_the_minimum_fails_with_its_numbers(gate):
    code, findings = gate(SHORT, "--min-max-model-len", "65536")
    assert code == 1
    window = findings["VT802"]
    assert window["fields"]["served_max_model_len"] == 40960
    assert window["fields"]["auto_fit_from"] == 131072
    assert window["derived"] == {"shortfall_tokens": 24576}
    assert window["line"] == 9  # the auto-fit line
    assert any("holds only 40,960 tokens" in fix for fix in window["fixes"])


def test_window_at_the_minimum_passes(gate):
    code, findings = gate(SHORT, "--min-max-model-len", "40960")
    assert code == 0 and set(findings) == {"VT403", "VT211"}  # the warnings scan reports, no failure


def test_window_the_kv_cache_could_serve_says_to_set_it(gate):
    code, findings = gate(HEALTHY, "--min-max-model-len", "65536")
    assert code == 1
    assert findings["VT802"]["fields"]["served_max_model_len"] == 32768
    assert findings["VT802"]["fixes"][0].startswith("The KV cache holds 213,072 tokens, enough for one request of 65,536")


def test_concurrency_below_the_minimum_fails_with_what_would_fit(gate):
    code, findings = gate(LOW, "--min-concurrency", "4")
    assert code == 1
    low = findings["VT803"]
    assert low["fields"]["concurrency"] == 1.25
    assert low["fields"]["window_tokens"] == 131072
    assert low["derived"] == {"kv_tokens_needed": 524288, "window_for_min_concurrency": 40960}


def test_concurrency_at_the_minimum_passes(gate):
    assert gate(LOW, "--min-concurrency", "1.25") == (0, {})  # the assertion replaces the advisory VT211


@pytest.mark.parametrize("log", [HEALTHY, SHORT, LOW, NEVER, KV_TOO_SMALL])
def test_gate_keeps_every_finding_scan_reports_on_the_same_log(gate, log):
    """Without a threshold the gate is scan plus its assertions: it drops nothing scan says."""
    scanned = CliRunner().invoke(cli.main, ["scan", log, "--format", "json"], catch_exceptions=False)
    scan_codes = sorted(f["code"] for f in json.loads(scanned.stdout)["findings"])
    _, findings = gate(log, "--fail-on", "never")
    assert sorted(findings) == scan_codes


def test_kv_usage_title_does_not_call_a_nearly_empty_cache_full(gate):
    code, findings = gate(HEALTHY, "--max-kv-usage-at-start", "0.5")  # the first metrics line shows 0.6%
    assert code == 1
    usage = findings["VT804"]
    assert usage["title"] == "More of the KV cache is in use at the first metrics line than the gate allows"
    assert "full" not in usage["title"]
    assert usage["cause"] == ["The first metrics line shows 0.6% of the KV cache in use; the gate allows 0.5%."]


def test_kv_usage_uses_the_first_metrics_line(gate):
    # the first line shows 81.3%, a later one 20.5%: "at start" is the first
    code, findings = gate(LOW, "--max-kv-usage-at-start", "50")
    assert code == 1
    assert findings["VT804"]["fields"]["kv_usage_at_start_pct"] == 81.3
    code, findings = gate(LOW, "--max-kv-usage-at-start", "81.3")
    assert code == 0 and set(findings) == {"VT211"}  # scan's warning on this log, no failure
    # the healthy log's first line shows 0.6% and a later one 38.2%
    assert gate(HEALTHY, "--max-kv-usage-at-start", "5") == (0, {})


@pytest.mark.parametrize(
    ("option", "value", "code"),
    [("--min-max-model-len", "8192", "VT802"), ("--min-concurrency", "1", "VT803"), ("--max-kv-usage-at-start", "90", "VT804")],
)
def test_an_assertion_the_log_cannot_show_fails(gate, option, value, code):
    exit_code, findings = gate(NEVER, option, value)
    assert exit_code == 1
    assert "cannot show" in findings[code]["cause"][0]


def test_fail_on_still_applies_to_the_scan_findings(gate):
    assert gate(SHORT, "--min-max-model-len", "32768")[0] == 0  # VT403 is a warning
    assert gate(SHORT, "--min-max-model-len", "32768", "--fail-on", "warning")[0] == 1
    assert gate(KV_TOO_SMALL)[0] == 1


def test_an_unreadable_log_is_exit_2(gate):
    result = CliRunner().invoke(cli.main, ["gate", "fixtures/gate/missing.log", "--require-ready"])
    assert result.exit_code == 2
    assert result.stderr == "vllm-triage: error: fixtures/gate/missing.log: no such file\n"


def test_bad_thresholds_are_usage_errors():
    assert CliRunner().invoke(cli.main, ["gate", HEALTHY, "--max-kv-usage-at-start", "120"]).exit_code == 2
    assert CliRunner().invoke(cli.main, ["gate", HEALTHY, "--min-max-model-len", "0"]).exit_code == 2


def test_assertions_appear_in_sarif_rules_and_junit_cases(monkeypatch):
    monkeypatch.chdir(ROOT)
    args = ["gate", HEALTHY, "--require-ready", "--min-concurrency", "2"]
    sarif = json.loads(CliRunner().invoke(cli.main, [*args, "--format", "sarif"]).stdout)
    ids = [rule["id"] for rule in sarif["runs"][0]["tool"]["driver"]["rules"]]
    assert "VT801" in ids and "VT803" in ids and "VT802" not in ids  # only the assertions asked for
    junit = CliRunner().invoke(cli.main, [*args, "--format", "junit"]).stdout
    assert 'name="VT803 concurrency-too-low" time="0"/>' in junit  # passed: an empty testcase


# --- each finding points at the line that proves it -----------------------------------


@pytest.mark.parametrize(
    ("log", "option", "value", "code", "line"),
    [
        (HEALTHY, "--min-max-model-len", "65536", "VT802", 4),  # 'Using max model len'; the engine config repeats it
        (SHORT, "--min-max-model-len", "65536", "VT802", 9),  # auto-fit set the served window
        (HEALTHY, "--min-concurrency", "7", "VT803", 18),  # vLLM's 'Maximum concurrency' line
        (LOW, "--min-concurrency", "4", "VT803", 7),
        (LOW, "--max-kv-usage-at-start", "50", "VT804", 11),  # the first metrics line, not the later one
        (NEVER, "--min-max-model-len", "8192", "VT802", 1),  # no line states it: the log's start
    ],
)
def test_an_assertion_points_at_the_line_of_the_number_it_judged(gate, log, option, value, code, line):
    assert gate(log, option, value)[1][code]["line"] == line


def test_the_window_points_at_the_auto_fit_line_when_no_fact_line_set_the_served_window():
    facts = Facts({"max_model_len": 131072, "concurrency_tokens": 61440})
    facts.lines = {"max_model_len": ("s.log", 4), "concurrency_tokens": ("s.log", 11)}
    [short] = evaluate("s.log", facts, [_auto_fit(9)], Thresholds(min_max_model_len=65536))
    assert short.line == 9
    [short] = evaluate("s.log", facts, [], Thresholds(min_max_model_len=65536))
    assert short.line == 11  # the 'Maximum concurrency for 61,440 tokens' line


def test_concurrency_worked_out_from_the_cache_points_at_the_cache_size_line():
    facts = Facts({"max_model_len": 32768, "kv_tokens": 40960})
    facts.lines = {"max_model_len": ("s.log", 3), "kv_tokens": ("s.log", 12)}
    [low] = evaluate("s.log", facts, [], Thresholds(min_concurrency=2))
    assert (low.fields["concurrency"], low.line) == (1.25, 12)


# --- the arithmetic, without a log ----------------------------------------------------


def _auto_fit(line: int) -> Finding:
    return Finding(
        code="VT403", name="max-model-len-auto-reduced", title="t", stage="config", severity="warning",
        source="s.log", line=line, excerpt="", fields={"user_max_model_len": 131072, "max_model_len": 61440},
        derived={}, cause=[], fixes=[],
    )


def test_served_window_prefers_the_line_printed_last_in_startup():
    facts = {"max_model_len": 131072}
    assert served_window(facts, [])[0] == 131072
    assert served_window(facts, [_auto_fit(9)])[0] == 61440
    assert served_window({**facts, "concurrency_tokens": 61440}, [_auto_fit(9)])[:2] == (61440, "'Maximum concurrency for N tokens'")
    assert served_window({}, []) == (None, "", None)


def test_concurrency_from_vllm_or_from_the_cache_size():
    assert concurrency_at_full_length({"concurrency": 2.42, "kv_tokens": 1}, 32768) == 2.42
    assert concurrency_at_full_length({"kv_tokens": 98304}, 32768) == 3.0
    assert concurrency_at_full_length({"kv_tokens": 98304}, None) is None


def test_only_the_assertions_asked_for_are_evaluated():
    assert evaluate("s.log", {}, [], Thresholds()) == []
    failed = evaluate("s.log", {}, [], Thresholds(min_concurrency=1))
    assert [f.code for f in failed] == ["VT803"]


@pytest.mark.parametrize("facts", [{}, {"max_model_len": 1024, "kv_tokens": 100, "kv_usage_at_start_pct": 99.0}])
def test_an_assertion_not_asked_for_never_fails_whatever_the_log_says(facts):
    from triage.diagnose.gate import NUMBERS

    for code, numbers in NUMBERS.items():
        assert numbers(Facts(facts), [], Thresholds()) is None, code
    assert evaluate("s.log", Facts(facts), [], Thresholds()) == []


@pytest.mark.parametrize("facts", [{}, {"max_model_len": 1024, "kv_tokens": 100, "kv_usage_at_start_pct": 99.0, "concurrency": 0.5}])
def test_each_assertion_gives_only_the_numbers_its_rule_declares(facts):
    from triage.diagnose.gate import NUMBERS, builtin_assertions

    asked = Thresholds(min_max_model_len=4096, min_concurrency=2, max_kv_usage_at_start=10, require_ready=True)
    for code, rule in builtin_assertions().items():
        numbers = NUMBERS[code](Facts(facts), [], asked)
        assert numbers is not None and set(numbers) <= set(rule.field_types), code
