"""The one set of sections of a finding, and every format that lays them out, over every
finding of every fixture."""

import pytest

from triage.pipeline import ScanOptions, scan
from triage.report import github, junit, markdown, sarif, where
from triage.report.sections import KINDS, finding_sections
from triage.report.text import render_finding

from conftest import FIXTURES

FIXTURE_LOGS = sorted(
    path for path in FIXTURES.rglob("*") if path.name.endswith((".log", ".log.gz")) and "models" not in path.parts
)


@pytest.fixture(scope="module")
def findings(matcher):
    found = [f for path in FIXTURE_LOGS for f in scan([str(path)], ScanOptions(matcher=matcher, keep_text=True)).findings]
    assert len(found) > len(FIXTURE_LOGS)  # most fixtures give at least one finding
    return found


def test_sections_hold_where_said_cause_figures_and_each_fix_in_order(findings):
    for finding in findings:
        sections = list(finding_sections(finding))
        kinds = [s.kind for s in sections]
        assert kinds == sorted(kinds, key=KINDS.index), finding.code
        assert sections[0].text == where(finding)
        assert [(s.number, s.text) for s in sections if s.kind == "fix"] == list(enumerate(finding.fixes, 1))
        assert ("said" in kinds) == bool(finding.excerpt)
        assert ("text" in kinds) == (finding.text is not None)
        assert [s.text for s in sections if s.kind == "cause"] == ([" ".join(finding.cause)] if finding.cause else [])
        assert ("figures" in kinds) == bool(finding.facts)


def test_every_format_shows_the_cause_and_the_numbered_fixes(findings):
    for finding in findings:
        shown = {
            "text": render_finding(finding),
            "markdown": markdown.details(finding),
            "junit": junit.failure(finding).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"),
            "github": github.message(finding),
        }
        for name, text in shown.items():
            assert " ".join(finding.cause) in text, (name, finding.code)
            for number, fix in enumerate(finding.fixes, 1):
                assert f"{number}. {fix}" in text, (name, finding.code, number)
        for number, fix in enumerate(finding.fixes, 1):
            assert f"Fix {number}: {fix}" in sarif.message(finding)
        if finding.excerpt:
            assert f"vLLM said: {finding.excerpt}" in shown["text"]
            assert finding.excerpt in shown["markdown"]
