"""The HTML report without a browser: one file that loads nothing, with every finding's
cause and fixes and every picture, over every fixture (the browser test checks the layout)."""

import html
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from triage import cli
from triage.pipeline import ScanOptions, make_matcher, scan
from triage.report import render
from triage.report.pictures import finding_pictures, summary_pictures
from triage.report.runs import shown_runs

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = [*sorted((ROOT / "fixtures").glob("*.log")), *sorted((ROOT / "fixtures").glob("*.log.gz")),
            *sorted((ROOT / "fixtures" / "runs").glob("*.log"))]
FETCHES = re.compile(r"<script|<link|<img|<iframe|<object|<embed|\bsrc\s*=|url\(|@import|https?://", re.IGNORECASE)


class Elements(HTMLParser):
    """Tags as they open and close, to see that the document is well nested."""

    VOID = frozenset({"meta", "br", "hr", "img", "input", "link", "rect", "line", "wbr"})

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.counts: dict[str, int] = {}
        self.problems: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.counts[tag] = self.counts.get(tag, 0) + 1
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.counts[tag] = self.counts.get(tag, 0) + 1

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        if not self.open or self.open[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.open[-1:] or 'nothing'}")
            return
        self.open.pop()


@pytest.fixture(scope="module")
def matcher():
    return ScanOptions(matcher=make_matcher(ScanOptions()))


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_every_fixture_report_is_self_contained_and_holds_every_finding(matcher, path):
    result = scan([str(path)], matcher)
    document = render(result, "html")
    assert FETCHES.search(document) is None, FETCHES.search(document)
    parser = Elements()
    parser.feed(document)
    assert parser.problems == [] and parser.open == []
    findings = list(result.findings)
    summaries = [summary for summary, _ in shown_runs(result)]  # a run that says nothing has no article
    assert parser.counts.get("article", 0) == len(findings) + len(summaries)
    expected_figures = sum(len(finding_pictures(f)) for f in findings) + sum(len(summary_pictures(s)) for s in summaries)
    assert parser.counts.get("figure", 0) == expected_figures
    for summary in summaries:
        assert f'data-run="{summary.number}"' in document
        if summary.first_failure:
            assert html.escape(summary.first_failure.error) in document
    for finding in findings:
        assert f'data-code="{finding.code}"' in document
        for sentence in [finding.title, *finding.cause, *finding.fixes]:
            assert html.escape(sentence) in document


def test_output_report_html_writes_the_html_report(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    target = tmp_path / "report.html"
    result = CliRunner().invoke(cli.main, ["scan", "--output", str(target), "fixtures/startup-kv-tokens-v066-journald.log"])
    assert result.exit_code == 1, result.output
    assert "html report written to" in result.stderr
    written = target.read_text(encoding="utf-8")
    assert written.startswith("<!DOCTYPE html>") and "<svg" in written and 'data-kind="memory"' in written
    assert "short by 10.98 GiB" in written


def test_markup_in_what_the_log_gives_is_shown_as_text(tmp_path, matcher):
    log = tmp_path / "<script>alert(1)<b>.log"  # the input's name is printed where each finding is
    log.write_text(
        "ERROR 02-03 10:00:00 [serving_chat.py:283] ValueError: This model's maximum context length is 8192 "
        "tokens. However, you requested 9000 tokens (8000 in the messages, 1000 in the completion).\n"
    )
    document = render(scan([str(log)], matcher), "html")
    assert "&lt;script&gt;alert(1)&lt;b&gt;.log" in document
    assert "<script" not in document.lower()


def test_the_readme_shows_the_picture_the_first_command_prints(monkeypatch):
    """README's first screen: `vllm-triage scan fixtures/startup-kv-too-small-v1.log` in a pipe (80 columns)."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("NO_COLOR", raising=False)
    printed = CliRunner().invoke(cli.main, ["scan", "fixtures/startup-kv-too-small-v1.log"]).stdout
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_screen = readme.split("```text\n", 1)[1].split("```", 1)[0]
    picture = first_screen[first_screen.index("  One GPU's memory"):]
    assert picture.strip() and picture in printed
    assert first_screen == printed  # the whole first screen, as it prints


def test_the_action_writes_the_html_report_and_names_it_for_the_upload(tmp_path, monkeypatch):
    """The action's run step, as GitHub runs it (bash, inputs in the environment)."""
    import yaml

    action = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    steps = {step["name"]: step for step in action["runs"]["steps"]}
    upload = steps["Upload the HTML report"]
    assert upload["uses"].startswith("actions/upload-artifact@")
    assert "html-report" in action["inputs"] and "html-report" in action["outputs"]
    outputs = tmp_path / "github-output"
    environment = {
        **os.environ, "GITHUB_OUTPUT": str(outputs), "TRIAGE_COMMAND": "scan", "TRIAGE_FORMAT": "text",
        "TRIAGE_FAIL_ON": "error", "TRIAGE_UPLOAD": "false", "TRIAGE_SARIF": "", "TRIAGE_ARGS": "",
        "TRIAGE_PATHS": "fixtures/startup-kv-tokens-v066-journald.log", "TRIAGE_HTML": str(tmp_path / "report.html"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    subprocess.run(["bash", "-c", steps["Run vllm-triage"]["run"]], cwd=ROOT, env=environment, check=True,
                   capture_output=True, timeout=120)
    assert f"html-report={tmp_path / 'report.html'}" in outputs.read_text().splitlines()
    assert 'data-kind="memory"' in (tmp_path / "report.html").read_text(encoding="utf-8")
