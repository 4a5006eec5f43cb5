"""`vllm-triage gate`: each assertion both ways, its numbers, and the exit codes."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from triage import cli
from triage.diagnose.facts import Facts
from triage.diagnose.gate import NO_ENDING, Thresholds, concurrency_at_full_length, evaluate, served_window
from triage.model import Finding

ROOT = Path(__file__).resolve().parents[2]
HEALTHY = "fixtures/gate/healthy.log"
SHORT = "fixtures/gate/short-window.log"
LOW = "fixtures/gate/low-concurrency.log"
NEVER = "fixtures/gate/never-ready.log"
KV_TOO_SMALL = "fixtures/startup-kv-too-small-v1.log"
KILLED = "fixtures/gate/v0-worker-killed-at-load-v066.log"
RESTART = "fixtures/runs/restart-after-kv-shortfall-v0110.log"


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
    ready = findings["VT801"]
    assert ready["fields"] == {"startup_errors": 0, "log_end": 8}
    assert ready["line"] == 8  # where the log ends, not its start
    assert ready["cause"] == [
        "The log ends at line 8 before the server was ready: no ready line and no failure"
        " (the server was still starting, or the log was saved too early)."
    ]


def test_ready_fails_on_a_startup_error_and_names_the_first_process_to_fail(gate):
    code, findings = gate(KV_TOO_SMALL, "--require-ready", "--fail-on", "never")
    assert code == 1  # the assertion fails whatever --fail-on says
    ready = findings["VT801"]
    fields = ready["fields"]
    assert {k: fields[k] for k in ("startup_errors", "first_error_code", "first_error_line")} == {
        "startup_errors": 1, "first_error_code": "VT201", "first_error_line": 24,
    }
    assert (fields["root_process"], fields["root_line"], fields["root_error_line"]) == ("EngineCore_DP0 pid=3117", 18, 24)
    assert fields["root_error"].startswith("ValueError: To serve at least one request with the models's max seq len (65536)")
    assert ready["line"] == 24
    assert ready["cause"][0].startswith(
        "The start failed: EngineCore_DP0 pid=3117 failed first, at line 18; its root error, at line 24: ValueError: To serve"
    )
    assert ready["fixes"][0] == "Fix VT201 first: its own finding in this report (line 24) gives the numbers and the fix."


def test_ready_names_a_worker_killed_without_a_traceback(gate):
    code, findings = gate(KILLED, "--require-ready")
    assert code == 1
    ready = findings["VT801"]
    assert ready["line"] == 14
    assert ready["fields"]["root_died"] == 1
    assert ready["cause"][0] == (
        "The start failed: VllmWorkerProcess pid=7713 failed first, killed without a traceback of its own,"
        " as line 14 reports: Worker VllmWorkerProcess pid 7713 died, exit code: -9"
    )
    assert ready["fixes"][0].startswith("Fix VT207 first")  # startup-failed names the kill and its likely causes


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
        assert numbers(Facts(facts), [], Thresholds(), NO_ENDING) is None, code
    assert evaluate("s.log", Facts(facts), [], Thresholds()) == []


@pytest.mark.parametrize("facts", [{}, {"max_model_len": 1024, "kv_tokens": 100, "kv_usage_at_start_pct": 99.0, "concurrency": 0.5}])
def test_each_assertion_gives_only_the_numbers_its_rule_declares(facts):
    from triage.diagnose.gate import NUMBERS, builtin_assertions

    asked = Thresholds(min_max_model_len=4096, min_concurrency=2, max_kv_usage_at_start=10, require_ready=True)
    for code, rule in builtin_assertions().items():
        judged = NUMBERS[code](Facts(facts), [], asked, NO_ENDING)
        assert judged is not None and not judged.passed, code
        assert set(judged.numbers) <= set(rule.field_types), code


# --- --require-ready reads the run summary scan makes -----------------------------------

EVERY_LOG = sorted(
    str(path.relative_to(ROOT)) for folder in ("fixtures", "fixtures/runs", "fixtures/gate", "fixtures/robust")
    for path in (ROOT / folder).iterdir() if path.name.endswith((".log", ".log.gz"))
)


def _scanned(log: str) -> dict:
    result = CliRunner().invoke(cli.main, ["scan", log, "--format", "json", "--fail-on", "never"], catch_exceptions=False)
    return json.loads(result.stdout)


@pytest.mark.parametrize("log", EVERY_LOG)
def test_require_ready_judges_the_last_run_that_scan_reports(gate, log):
    """On every fixture: the gate passes exactly when scan's last run is ready with no startup
    error of its own; failing, it names scan's first failure of that run, or where the log ends."""
    scanned = _scanned(log)
    runs = scanned["runs"]
    last = runs[-1] if runs else None
    errors = [
        f for f in scanned["findings"]
        if f["severity"] == "error" and f["stage"] in ("startup", "config") and (last is None or f["run"] == last["run"])
    ]
    result = CliRunner().invoke(cli.main, ["gate", log, "--require-ready", "--format", "json"], catch_exceptions=False)
    document = json.loads(result.stdout)
    (check,) = document["gate"]
    ready = last is not None and last["outcome"] == "ready"
    assert check["passed"] == (ready and not errors), log
    if check["passed"]:
        assert check["line"] == last["outcome_line"]
        return
    assert result.exit_code == 1
    (finding,) = [f for f in document["findings"] if f["code"] == "VT801"]
    first = last["first_failure"] if last else None
    if first is not None and first["stage"] == "startup":
        fields = finding["fields"]
        assert (fields["root_process"], fields["root_line"], fields["root_error_line"], fields["root_error"]) == (
            first["process"] or "the untagged main process", first["line"], first["error_line"], first["error"],
        ), log
        assert finding["line"] == first["error_line"]
        assert fields["root_died"] == int(first["died"])
        said = "killed without a traceback of its own" if first["died"] else (
            f"failed first, at line {first['line']}; its root error, at line {first['error_line']}"
        )
        assert said in finding["cause"][0]
    elif not errors and not ready:
        data = (ROOT / log).read_bytes()
        if log.endswith(".gz"):
            import gzip

            data = gzip.decompress(data)
        ends = data.count(b"\n") + (not data.endswith(b"\n"))
        assert finding["fields"]["log_end"] == ends == finding["line"], log
        assert finding["cause"][0].startswith(f"The log ends at line {ends:,} before the server was ready")


@pytest.mark.parametrize("newline", ["\n", ""])
def test_a_start_cut_before_ready_says_where_the_log_ends(newline):
    """Cut the healthy start at every line before its ready line: nothing failed, so the gate
    says the log ends there (with or without the last line's newline)."""
    from triage.diagnose.gate import gate_log
    from triage.pipeline import ScanOptions, Text, scan

    lines = (ROOT / HEALTHY).read_text().splitlines()
    ready_at = next(i for i, line in enumerate(lines, 1) if "Starting vLLM API server" in line)
    for cut in range(1, ready_at):
        result = scan([Text("cut.log", ("\n".join(lines[:cut]) + newline).encode())], ScanOptions())
        failed, checks = gate_log(result, "cut.log", Thresholds(require_ready=True))
        (ready,) = failed
        assert (ready.line, ready.fields.get("log_end")) == (cut, cut), cut
        assert ready.cause[0].startswith(f"The log ends at line {cut} before the server was ready"), cut
        assert [c.passed for c in checks] == [False]


def test_a_restart_is_judged_by_its_last_run(gate):
    """The first run failed (VT201), the restart got ready: the server the log leaves is ready."""
    code, findings = gate(RESTART, "--require-ready", "--fail-on", "never")
    assert code == 0 and "VT801" not in findings and "VT201" in findings  # scan's findings stay
    document = json.loads(CliRunner().invoke(cli.main, ["gate", RESTART, "--require-ready", "--format", "json"]).stdout)
    assert document["gate"] == [
        {"code": "VT801", "name": "server-not-ready", "passed": True, "line": 29, "figures": {"ready_line": 29, "startup_errors": 0}},
    ]


def test_a_passing_gate_prints_the_figures_it_checked_and_by_how_much(monkeypatch):
    monkeypatch.chdir(ROOT)
    args = [
        "gate", HEALTHY, "--format", "text", "--require-ready", "--min-max-model-len", "30000",
        "--min-concurrency", "4", "--max-kv-usage-at-start", "1",
    ]
    result = CliRunner().invoke(cli.main, args, catch_exceptions=False)
    assert result.exit_code == 0
    assert result.stdout.endswith(
        "\ngate: passed (4 of 4 assertions)\n"
        "  VT801 ready: at line 24, no startup error\n"
        "  VT802 served window: 32,768 tokens (line 4) >= 30,000 required: 2,768 tokens to spare\n"
        "  VT803 concurrency: 6.50x requests of 32,768 tokens (line 18) >= 4x required: 2.50x to spare;"
        " the KV cache holds 213,072 tokens, 131,072 needed\n"
        "  VT804 KV cache in use at the first metrics line: 0.6% (line 32) <= 1% allowed: 0.4 points to spare\n"
    )


def test_a_failing_gate_lists_what_failed_and_the_figures_of_what_passed(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    report = tmp_path / "gate.txt"
    args = ["gate", SHORT, "--require-ready", "--min-max-model-len", "65536", "--min-concurrency", "1", "-o", str(report)]
    result = CliRunner().invoke(cli.main, args, catch_exceptions=False)
    assert result.exit_code == 1
    assert report.read_text().endswith(
        "\ngate: 1 of 3 assertions failed (VT802)\n"
        "  VT801 ready: at line 13, no startup error\n"
        "  VT803 concurrency: 1.00x requests of 40,960 tokens (line 11) >= 1x required: 0.00x to spare;"
        " the KV cache holds 40,960 tokens, 40,960 needed\n"
    )
