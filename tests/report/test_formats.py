"""Every format over the same fixtures, compared with reviewed golden files.

Goldens are rendered with a frozen copy of the rules (tests/golden/rules/) so that a
wording change in rules/ does not rewrite every golden; `pytest --update-golden`
rewrites them from the current output (review the diff before committing).
"""

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from triage import __version__, cli
from triage import pipeline
from triage.report import REPORTERS, ScanResult, fingerprint, format_for_suffix, relative_path, render, write
from triage.match import matcher as matcher_module
from triage.rules.ruleset import load_rules
from triage.model import Finding

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text())
FORMATS = ["text", "json", "jsonl", "sarif", "github", "junit", "markdown", "concise"]
CASES = {
    "startup-kv-too-small-v1": ["scan", "fixtures/startup-kv-too-small-v1.log"],
    "healthy": ["scan", "fixtures/gate/healthy.log"],
    "short-window": ["scan", "fixtures/gate/short-window.log"],
    "two-inputs": ["scan", "fixtures/gate/short-window.log", "fixtures/startup-kv-too-small-v1.log"],
    "gate-short-window": [
        "gate", "fixtures/gate/short-window.log", "--require-ready", "--min-max-model-len", "65536",
        "--min-concurrency", "2",
    ],
    "gate-never-ready": [
        "gate", "fixtures/gate/never-ready.log", "--require-ready", "--min-max-model-len", "8192",
        "--max-kv-usage-at-start", "50",
    ],
}
VERSION = re.compile(rf"(?<![\w.]){re.escape(__version__)}(?![\w.])")


@pytest.fixture
def run(monkeypatch):
    """The CLI in the repo root, with the frozen rules and no CI environment."""
    monkeypatch.chdir(ROOT)
    for name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "80")  # the width pictures are drawn to
    frozen = load_rules([GOLDEN / "rules"], builtin=False)
    monkeypatch.setattr(cli.common, "load_ruleset", lambda rule_paths: frozen)
    # copies of built-in files: the matcher's advice to authors of slow user rules is not for them
    copies = sorted((GOLDEN / "rules").glob("*.yaml"))
    monkeypatch.setattr(matcher_module, "builtin_rule_files", lambda: copies)

    def invoke(*args: str):
        return CliRunner().invoke(cli.main, list(args), catch_exceptions=False)

    return invoke


@pytest.mark.parametrize("format_name", FORMATS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_output_matches_golden(run, update_golden, case, format_name):
    command, *args = CASES[case]
    result = run(command, "--format", format_name, *args)
    assert result.exit_code in (0, 1), result.stderr
    output = VERSION.sub("<version>", result.stdout)
    golden = GOLDEN / f"{case}.{format_name}"
    if update_golden:
        golden.write_text(output, encoding="utf-8")
    assert golden.exists(), f"no golden {golden.name}: run pytest --update-golden and review it"
    assert output == golden.read_text(encoding="utf-8")


@pytest.mark.parametrize("case", sorted(CASES))
def test_sarif_is_valid_sarif_2_1_0(run, case):
    command, *args = CASES[case]
    document = json.loads(run(command, "--format", "sarif", *args).stdout)
    jsonschema.validate(document, SCHEMA, cls=jsonschema.Draft4Validator)


def test_sarif_lists_every_rule_that_ran_and_locates_each_finding(run):
    document = json.loads(run("scan", "--format", "sarif", "fixtures/startup-kv-too-small-v1.log").stdout)
    driver = document["runs"][0]["tool"]["driver"]
    codes = [rule["id"] for rule in driver["rules"]]
    assert "VT201" in codes and "VT403" in codes
    assert not any(code.startswith("VT9") for code in codes)  # facts inform findings, they are not checks
    vt201 = driver["rules"][codes.index("VT201")]
    assert vt201["defaultConfiguration"]["level"] == "error"
    assert "gpu_memory_utilization" in vt201["help"]["text"]
    (result,) = document["runs"][0]["results"]
    assert result["ruleId"] == "VT201" and result["level"] == "error"
    assert driver["rules"][result["ruleIndex"]]["id"] == "VT201"
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "fixtures/startup-kv-too-small-v1.log"
    assert location["region"]["startLine"] == 24
    assert result["properties"]["fields"]["max_model_len"] == 65536
    assert result["properties"]["derived"]["fit_max_model_len"] == 43488
    assert "43488" in result["message"]["text"]


def test_sarif_has_an_empty_rule_list_when_no_rule_ran():
    document = json.loads(render(ScanResult([], ["x.log"]), "sarif"))
    assert document["runs"][0]["tool"]["driver"]["rules"] == []
    assert document["runs"][0]["results"] == []
    jsonschema.validate(document, SCHEMA, cls=jsonschema.Draft4Validator)


def _finding(line: int, **fields) -> Finding:
    return Finding(
        code="VT201", name="kv-cache-too-small", title="t", stage="startup", severity="error",
        source="logs/a.log", line=line, excerpt="x", fields=fields, derived={}, cause=[], fixes=[],
    )


def test_fingerprint_survives_log_rotation_but_not_other_numbers():
    assert fingerprint(_finding(24, max_model_len=65536)) == fingerprint(_finding(9001, max_model_len=65536))
    assert fingerprint(_finding(24, max_model_len=65536)) != fingerprint(_finding(24, max_model_len=32768))


def test_relative_path_is_relative_to_the_working_directory(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert relative_path(str(tmp_path / "logs" / "server.log")) == "logs/server.log"
    assert relative_path("./logs/../logs/server.log") == "logs/server.log"
    assert relative_path("<stdin>") == "<stdin>"


def test_jsonl_is_one_object_a_line_runs_first_and_each_has_its_type(run):
    lines = run("scan", "--format", "jsonl", "fixtures/gate/short-window.log", "fixtures/startup-kv-too-small-v1.log").stdout.splitlines()
    objects = [json.loads(line) for line in lines]
    runs = [o for o in objects if o["type"] == "run"]
    findings = [o for o in objects if o["type"] == "finding"]
    assert len(runs) + len(findings) == len(objects) and objects[: len(runs)] == runs
    assert [(r["input"], r["outcome"]) for r in runs] == [
        ("fixtures/gate/short-window.log", "ready"), ("fixtures/startup-kv-too-small-v1.log", "failed"),
    ]
    assert [f["code"] for f in findings] == ["VT201", "VT403"]  # most severe first
    assert findings[0]["count"] == 1 and findings[0]["derived"]["fit_max_model_len"] == 43488  # not its re-raise


def test_junit_has_a_suite_per_input_and_a_case_per_rule(run):
    xml = run("scan", "--format", "junit", "fixtures/gate/healthy.log", "fixtures/startup-kv-too-small-v1.log").stdout
    suites = ET.fromstring(xml).findall("testsuite")
    assert [s.get("name") for s in suites] == ["fixtures/gate/healthy.log", "fixtures/startup-kv-too-small-v1.log"]
    healthy, failing = suites
    assert int(healthy.get("tests")) == len(healthy.findall("testcase")) > 1
    assert healthy.get("failures") == "0" and not healthy.findall(".//failure")
    (failure,) = failing.findall(".//failure")
    case = next(c for c in failing.findall("testcase") if c.find("failure") is not None)
    assert case.get("name") == "VT201 kv-cache-too-small"
    assert case.get("classname") == "fixtures/startup-kv-too-small-v1.log"
    assert failure.get("type") == "error" and "--max-model-len 43488" in failure.text


def test_junit_survives_control_characters_in_a_log_line():
    finding = _finding(3)
    finding.excerpt = "bad \x00\x1b[31m byte"
    ET.fromstring(render(ScanResult([finding], ["logs/a.log"]), "junit"))  # parses


def test_markdown_keeps_table_rows_and_code_fences_intact():
    finding = _finding(3)
    finding.title = "a | b"
    finding.excerpt = "text with ``` inside"
    report = render(ScanResult([finding], ["logs/a.log"]), "markdown")
    assert "| a \\| b |" in report
    assert "````text\ntext with ``` inside\n````" in report


def test_auto_picks_github_in_actions_and_text_when_piped(run, monkeypatch):
    plain = run("scan", "fixtures/startup-kv-too-small-v1.log").stdout
    assert plain.startswith("fixtures/startup-kv-too-small-v1.log (lines 2-33): failed at startup")  # the run first
    assert "\n\nVT201 kv-cache-too-small" in plain
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    annotated = run("scan", "fixtures/startup-kv-too-small-v1.log").stdout
    assert annotated.startswith("::error file=fixtures/startup-kv-too-small-v1.log,line=24,title=vllm-triage (VT201)::")


def test_github_appends_a_markdown_summary_when_asked(run, monkeypatch, tmp_path):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    run("scan", "--format", "github", "fixtures/startup-kv-too-small-v1.log")
    text = summary.read_text()
    assert text.startswith("earlier step\n## vllm-triage: 1 finding (1 error)")
    assert "--max-model-len 43488" in text


def test_output_writes_the_report_and_the_summary_to_stderr(run, tmp_path):
    target = tmp_path / "report.sarif"
    result = run("scan", "--output", str(target), "fixtures/startup-kv-too-small-v1.log")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "1 finding (1 error) in 1 input; sarif report written to" in result.stderr
    assert json.loads(target.read_text())["runs"][0]["results"][0]["ruleId"] == "VT201"


def test_output_to_an_unwritable_place_is_a_one_line_error(run, tmp_path):
    result = run("scan", "--output", str(tmp_path / "no" / "such" / "dir.txt"), "fixtures/gate/healthy.log")
    assert result.exit_code == 2
    assert result.stderr.startswith("vllm-triage: error: cannot write") and result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["scan", "fixtures/gate/healthy.log"], 0),
        (["scan", "fixtures/startup-kv-too-small-v1.log"], 1),
        (["scan", "--fail-on", "never", "fixtures/startup-kv-too-small-v1.log"], 0),
        (["scan", "fixtures/gate/short-window.log"], 0),  # a warning is below the default threshold
        (["scan", "--fail-on", "warning", "fixtures/gate/short-window.log"], 1),
        (["scan", "--format", "sarif", "fixtures/gate/no-such.log"], 2),
        (["scan", "--format", "yaml", "fixtures/gate/healthy.log"], 2),
    ],
)
def test_exit_codes(run, args, code):
    assert run(*args).exit_code == code


@pytest.mark.parametrize("format_name", ["text", "json", "jsonl", "sarif", "github", "junit", "markdown"])
def test_formats_that_draw_no_panels_do_not_import_rich(format_name):
    """The default on a pipe is plain text: importing rich would be a good part of its start."""
    probe = (
        "import sys; from triage.cli import main\n"
        "try: main(['scan', '--format', sys.argv[1], '--fail-on', 'never', 'fixtures/startup-kv-too-small-v1.log'])\n"
        "except SystemExit: pass\n"
        "print(sorted(m for m in sys.modules if m == 'rich' or m.startswith('rich.')), file=sys.stderr)\n"
    )
    run = subprocess.run([sys.executable, "-c", probe, format_name], capture_output=True, text=True, cwd=ROOT)
    assert "VT201" in run.stdout
    assert run.stderr.strip().splitlines()[-1] == "[]"


def test_plain_text_on_a_terminal_wraps_at_spaces_with_a_hanging_indent(monkeypatch):
    """A terminal would break a long line mid-word at its edge; piped, lines stay whole."""
    import sys

    from triage.pipeline import ScanOptions, scan
    from triage.report import text

    result = scan([str(ROOT / "fixtures" / "startup-kv-too-small-v1.log")], ScanOptions())
    [finding] = list(result.findings)
    whole = text.render_finding(finding)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setenv("COLUMNS", "70")
    wrapped = text.render_finding(finding)
    head = wrapped.split("\n\n")[0]  # the pictures below draw to the width themselves
    assert all(len(line) <= 70 for line in head.splitlines()), head
    assert " ".join(head.split()) == " ".join(whole.split("\n\n")[0].split())  # the same words, none split
    fix = next(i for i, line in enumerate(head.splitlines()) if line.startswith("  1. "))
    assert head.splitlines()[fix + 1].startswith("     ") and not head.splitlines()[fix + 1].startswith("      ")


@pytest.mark.parametrize("reporter", list(REPORTERS.values()), ids=lambda r: r.name)
def test_every_reporter_in_the_table_renders_and_its_pieces_join_to_the_whole(reporter):
    """The table is all the CLI knows of a format: its functions must exist and agree."""
    result = pipeline.scan([str(ROOT / "fixtures" / "startup-kv-too-small-v1.log")], pipeline.ScanOptions())
    whole = render(result, reporter.name)
    assert whole
    if reporter.pieces is not None:
        pieces: list[str] = []
        write(result, reporter.name, pieces.append)
        assert "".join(pieces) == whole
    for suffix in reporter.suffixes:
        assert format_for_suffix(suffix.upper()) == reporter.name
