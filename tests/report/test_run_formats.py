"""Each startup run's summary in markdown, SARIF, JUnit, GitHub annotations and HTML: its
outcome with its line, its figures with the line that states each, its first failure, over
every fixture that has a run."""

import html
import json
import xml.etree.ElementTree as ET

import jsonschema
import pytest

from triage.pipeline import ScanOptions, scan
from triage.report import relative_path, render
from triage.report.github import escape_data, escape_property
from triage.report.markdown import cell
from triage.report.runs import run_sections, runs_per_input, stated_figures, summaries, worth_showing

from conftest import FIXTURES, ROOT

FIXTURE_LOGS = sorted(
    path for path in FIXTURES.rglob("*") if path.name.endswith((".log", ".log.gz")) and "models" not in path.parts
)
SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text())


@pytest.fixture(scope="module")
def scans(matcher):
    """(result, its summaries worth showing) for every fixture with one; at least the runs/ ones."""
    found = []
    for path in FIXTURE_LOGS:
        result = scan([str(path.relative_to(ROOT))], ScanOptions(matcher=matcher))
        shown = [s for s in summaries(result) if worth_showing(s)]
        if shown:
            found.append((result, shown))
    assert len(found) >= 10 and any(s.outcome == "failed" for _, shown in found for s in shown)
    assert any(s.outcome == "ready" for _, shown in found for s in shown)
    return found


@pytest.fixture(autouse=True)
def in_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # relative_path() reads the inputs against the working directory


def outcome_at(summary) -> str:
    return {"ready": f"ready at line {summary.outcome_line}", "failed": f"failed at startup, at line {summary.outcome_line}",
            "unknown": "outcome unknown"}[summary.outcome]


def test_markdown_shows_each_run_as_a_table_of_figures_with_lines(scans):
    for result, shown in scans:
        document = render(result, "markdown")
        counts = runs_per_input(result)
        for summary in shown:
            run = run_sections(summary, counts[summary.source])
            heading = f"\n### {cell(run.headline)}\n"
            assert heading in document and outcome_at(summary) in heading
            block = document.split(heading, 1)[1].split("\n### ", 1)[0]
            for label, text, line in run.figures:
                assert f"| {cell(label)} | {cell(text)} | {line or ''} |" in block
            if summary.first_failure is not None:
                assert "- first to fail: " in block and f"its error at line {summary.first_failure.error_line}" in block
                assert cell(summary.first_failure.error) in block
            assert document.index(heading) < document.find("| | code |") or "| | code |" not in document


def test_sarif_holds_each_run_s_facts_lines_and_outcome_and_stays_valid(scans):
    for result, shown in scans:
        document = json.loads(render(result, "sarif"))
        jsonschema.validate(document, SCHEMA, cls=jsonschema.Draft4Validator)
        runs = {(r["input"], r["run"]): r for r in document["runs"][0]["properties"]["startupRuns"]}
        for summary in shown:
            entry = runs[summary.source, summary.number]
            assert (entry["outcome"], entry["outcome_line"]) == (summary.outcome, summary.outcome_line)
            assert (entry["first_line"], entry["last_line"]) == (summary.first_line, summary.last_line)
            for name, value in summary.facts.items():
                assert entry["facts"][name] == {"value": value, "line": summary.fact_lines.get(name)}
            if summary.first_failure is not None:
                assert entry["first_failure"]["error_line"] == summary.first_failure.error_line
                assert entry["first_failure"]["error"] == summary.first_failure.error
            assert len(entry["consequences"]) == len(summary.consequences)


def test_junit_gives_each_input_s_runs_as_properties(scans):
    for result, shown in scans:
        suites = {suite.get("name"): suite for suite in ET.fromstring(render(result, "junit"))}
        counts = runs_per_input(result)
        for summary in shown:
            suite = suites[summary.source]
            assert list(suite)[0].tag == "properties"  # before the testcases, as the JUnit schema orders them
            properties = {p.get("name"): p.get("value") for p in suite.find("properties")}
            prefix = f"run {summary.number}"
            assert properties[f"{prefix} lines"] == f"{summary.first_line}-{summary.last_line}"
            assert properties[f"{prefix} outcome"].startswith(outcome_at(summary))
            for label, text, line in run_sections(summary, counts[summary.source]).figures:
                assert properties[f"{prefix} {label}"] == (f"{text} (line {line})" if line else text)
            if summary.first_failure is not None:
                assert summary.first_failure.error in properties[f"{prefix} first failure"]
                assert len([n for n in properties if n.startswith(f"{prefix} consequence ")]) == len(summary.consequences)


def test_github_annotates_each_run_at_its_outcome_line_and_a_failed_run_s_root_as_an_error(scans):
    for result, shown in scans:
        lines = render(result, "github").splitlines()
        for summary in shown:
            line = summary.outcome_line or summary.first_line
            at = f"file={escape_property(relative_path(summary.source))},line={max(line, 1)},"
            title = f"title={escape_property(f'vllm-triage (run {summary.number}: {summary.outcome})')}::"
            (annotation,) = [a for a in lines if at in a and title in a]
            assert escape_data(outcome_at(summary)) in annotation
            if summary.outcome == "failed":  # the root error's line carries an error: the run's own, or a finding's
                assert any(a.startswith("::error ") and at in a for a in lines)
                assert f"line {summary.first_failure.error_line}" in annotation


def test_html_shows_each_run_s_outcome_figures_and_first_failure(scans):
    for result, shown in scans:
        document = render(result, "html")
        counts = runs_per_input(result)
        assert document.find('<section id="runs">') < document.find('<section id="findings">')
        for summary in shown:
            run = run_sections(summary, counts[summary.source])
            article = document.split(f'data-run="{summary.number}">', 1)[1].split("</article>", 1)[0]
            assert html.escape(outcome_at(summary)) in article
            for label, text, line in run.figures:
                assert f"<dt>{html.escape(label)}</dt><dd>{html.escape(text)}{f' (line {line})' if line else ''}</dd>" in article
            if summary.first_failure is not None:
                assert html.escape(summary.first_failure.error) in article


def test_each_fact_shows_in_one_figure_at_the_line_that_states_it(scans):
    gpu_runs = 0
    for _, shown in scans:
        for summary in shown:
            stated = list(stated_figures(summary))
            names = [name for _, figure_facts in stated for name in figure_facts]
            assert len(names) == len(set(names)), names  # "GPU: A100, 40 GiB" then "GPU memory: 40 GiB" was one fact twice
            labels = [figure.label for figure, _ in stated]
            assert len(labels) == len(set(labels)), labels
            for figure, figure_facts in stated:
                assert figure.line == summary.fact_lines.get(figure_facts[0], 0)
            gpu_runs += "gpu_name" in names
    assert gpu_runs  # a fixture states its GPU
