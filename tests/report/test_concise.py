"""--format concise: the editors' one line per finding.

The VS Code problem matcher is read from README.md itself, so the README cannot show a
regex the format does not satisfy; every fixture's output goes through it, and through the
grep/gcc form (`file:line: message`) that vim's default errorformat and Emacs's
compilation mode read.
"""

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triage.model import SEVERITIES, Finding
from triage.pipeline import ScanOptions, scan
from triage.report import ScanResult, ordered, relative_path, render
from triage.report.runs import shown_runs
from triage.report.concise import line as concise_line

from conftest import FIXTURES, ROOT

FIXTURE_LOGS = sorted(
    path for path in FIXTURES.rglob("*") if path.name.endswith((".log", ".log.gz")) and "models" not in path.parts
)
# vim's default errorformat tries %f:%l:%c:%m before %f:%l:%m: a line must not look as if it had a column
VIM_WITH_COLUMN = re.compile(r"^[^:]+:\d+:\d+:")
VIM_FILE_LINE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<message>.*)$")
# Emacs's `gnu` entry of compilation-error-regexp-alist: file:line: then the level word
EMACS_GNU = re.compile(r"^(?P<file>[^:\n]+):(?P<line>[0-9]+): (?P<level>error|warning|info):")


def readme_problem_matcher() -> dict:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## In your editor", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```json\n(.*?)```", section, re.DOTALL).group(1)
    (task,) = json.loads(block)["tasks"]
    return task["problemMatcher"]


MATCHER = readme_problem_matcher()
PATTERN = MATCHER["pattern"]
REGEXP = re.compile(PATTERN["regexp"])  # JavaScript's syntax: the subset Python reads alike


def group(match: re.Match, name: str) -> str:
    return match.group(PATTERN[name])


def check_line(text: str, finding: Finding) -> None:
    match = REGEXP.match(text)
    assert match, text
    assert group(match, "file") == relative_path(finding.source)
    assert int(group(match, "line")) == max(finding.line, 1)
    assert group(match, "severity") == finding.severity
    assert group(match, "code") == finding.code
    assert group(match, "message").startswith(" ".join(finding.title.split()))
    vim = VIM_FILE_LINE.match(text)
    assert vim and vim["file"] == relative_path(finding.source) and int(vim["line"]) == max(finding.line, 1)
    assert not VIM_WITH_COLUMN.match(text)
    emacs = EMACS_GNU.match(text)
    assert emacs and emacs["level"] == finding.severity


def check_run_line(text: str, run) -> None:
    """A run line is an info problem at the run's first line: the matcher and the quickfix read it too."""
    match = REGEXP.match(text)
    assert match, text
    assert group(match, "file") == relative_path(run.source) and int(group(match, "line")) == max(run.first_line, 1)
    assert (group(match, "severity"), group(match, "code")) == ("info", "run")
    assert group(match, "message").startswith(f"{run.number} {run.outcome}")
    if run.first_failure is not None:
        assert f"first failure at line {run.first_failure.error_line}" in text
    served = run.facts.get("served_max_model_len")
    assert served is None or f"served_max_model_len={served}" in text
    vim = VIM_FILE_LINE.match(text)
    assert vim and int(vim["line"]) == max(run.first_line, 1) and not VIM_WITH_COLUMN.match(text)
    assert EMACS_GNU.match(text)["level"] == "info"


def check_report(result: ScanResult) -> list[str]:
    """Every finding's line, then every run's, then the one summary no matcher reads."""
    lines = render(result, "concise").splitlines()
    findings = ordered(result.findings)
    runs = [summary for summary, _ in shown_runs(result)]  # a run that states nothing has no line
    *problem_lines, summary = lines
    assert len(problem_lines) == len(findings) + len(runs)
    for text, finding in zip(problem_lines[: len(findings)], findings, strict=True):
        check_line(text, finding)
    for text, run in zip(problem_lines[len(findings):], runs, strict=True):
        check_run_line(text, run)
    assert summary.startswith("vllm-triage: ") and not REGEXP.match(summary) and not EMACS_GNU.match(summary)
    return problem_lines[: len(findings)]


def test_one_line_per_run_after_the_findings(matcher, monkeypatch):
    monkeypatch.chdir(ROOT)
    result = scan(["fixtures/runs/restart-after-kv-shortfall-v0110.log"], ScanOptions(matcher=matcher))
    check_report(result)
    *_, first, second, _summary = render(result, "concise").splitlines()
    assert first.startswith("fixtures/runs/restart-after-kv-shortfall-v0110.log:1: info: run 1 failed, first failure at line 15 in")
    assert "(served_max_model_len=65536, kv_gib_available=4.12, gpu_memory_utilization=0.88, tensor_parallel_size=2)" in first
    assert second.startswith("fixtures/runs/restart-after-kv-shortfall-v0110.log:17: info: run 2 ready, vLLM 0.11.0")
    assert "served_max_model_len=40960, kv_tokens=45008" in second and "concurrency=1.1" in second


def test_readme_matcher_names_every_part_of_a_line():
    assert {"file", "line", "severity", "code", "message"} <= set(PATTERN)
    assert MATCHER["fileLocation"][0] == "autoDetect"  # paths are relative to the cwd, or absolute


@pytest.mark.parametrize("path", FIXTURE_LOGS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_line_for_every_fixture_is_read_by_the_problem_matcher(matcher, monkeypatch, path):
    monkeypatch.chdir(ROOT)
    result = scan([str(path.relative_to(ROOT))], ScanOptions(matcher=matcher))
    check_report(result)


def test_the_numbers_are_the_findings_figures_as_flags_take_them(matcher, monkeypatch):
    monkeypatch.chdir(ROOT)
    (text,) = check_report(scan(["fixtures/startup-kv-too-small-v1.log"], ScanOptions(matcher=matcher)))
    assert text.endswith(
        "(max_model_len=65536, kv_gib_needed=8, kv_gib_available=5.31, estimated_max_model_len=43488,"
        " gpu_memory_utilization=0.9)"  # once: line 29 is the re-raised copy
    )


def test_no_log_text_reaches_a_line(matcher, monkeypatch):
    """The excerpt and --show-text's record can quote a prompt: the concise line holds neither."""
    monkeypatch.chdir(ROOT)
    result = scan(["fixtures/startup-kv-too-small-v1.log"], ScanOptions(matcher=matcher, keep_text=True))
    (finding,) = result.findings
    output = render(result, "concise")
    assert finding.text and finding.text not in output and finding.excerpt not in output


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40)
NUMBER = st.one_of(st.integers(-(10**12), 10**12), st.floats(allow_nan=False, allow_infinity=False, width=32))


@settings(max_examples=200, deadline=None)
@given(
    source=st.from_regex(r"[A-Za-z0-9_./ -]{1,30}\.log", fullmatch=True).filter(lambda s: not s.startswith("/")),
    line=st.integers(0, 10**7), severity=st.sampled_from(SEVERITIES),
    code=st.from_regex(r"[A-Z]{1,4}[0-9]{1,4}", fullmatch=True), title=TEXT,
    fields=st.dictionaries(st.from_regex(r"[a-z_]{1,12}", fullmatch=True), st.one_of(NUMBER, TEXT, st.booleans()), max_size=5),
    count=st.integers(1, 1000),
)
def test_any_finding_gives_one_line_the_matcher_reads_back(source, line, severity, code, title, fields, count):
    finding = Finding(
        code=code, name="n", title=title, stage="startup", severity=severity, source=source, line=line,
        excerpt="x", fields=fields, derived={}, cause=[], fixes=[], count=count,
    )
    text = concise_line(finding)
    assert "\n" not in text and "\r" not in text
    match = REGEXP.match(text)
    assert match, text
    assert group(match, "file") == relative_path(source)
    assert int(group(match, "line")) == max(line, 1)
    assert (group(match, "severity"), group(match, "code")) == (severity, code)
    shown = [f"{name}=" for name, value in fields.items() if isinstance(value, (int, float)) and not isinstance(value, bool)]
    assert all(name in text for name in shown)


def test_the_readme_example_is_what_the_command_prints(matcher, monkeypatch):
    """The README's editor section shows real output: it was left at 'x2' and 'line 29' once
    the re-raised engine failure was counted once, and nothing noticed."""
    monkeypatch.chdir(ROOT)
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("## In your editor", 1)[1]
    shown = re.search(r"```text\n(.*?)```", section, re.DOTALL).group(1)
    inputs = ["fixtures/gate/short-window.log", "fixtures/startup-kv-too-small-v1.log"]
    assert render(scan(inputs, ScanOptions(matcher=matcher)), "concise") == shown


def test_a_pasted_client_error_alone_gives_no_run_line(matcher):
    """A run that states no figure and no ending (a request error pasted from a client) has
    nothing to say in the problem list: as in the text and rich formats, no line for it."""
    result = scan(["fixtures/client-openai-python-traceback.log"], ScanOptions(matcher=matcher))
    lines = render(result, "concise").splitlines()
    assert [line for line in lines if ": info: run " in line] == []
    assert any(": error: VT102 " in line for line in lines)
