"""GitHub workflow commands: the Actions toolkit's escaping, so no text can end or forge a command."""

import pytest

from triage.report.github import annotation, escape_data, escape_property, render
from triage.report import ScanResult
from triage.model import Finding


@pytest.mark.parametrize(
    ("raw", "data", "prop"),
    [
        ("50% used", "50%25 used", "50%25 used"),
        ("one\ntwo\r\n", "one%0Atwo%0D%0A", "one%0Atwo%0D%0A"),
        ("a:b,c", "a:b,c", "a%3Ab%2Cc"),
        ("%0A already", "%250A already", "%250A already"),  # escaped once, never decoded into a newline
        ("::error::forged", "::error::forged", "%3A%3Aerror%3A%3Aforged"),
    ],
)
def test_escaping_matches_the_actions_toolkit(raw, data, prop):
    assert escape_data(raw) == data
    assert escape_property(raw) == prop


def _finding(**changes) -> Finding:
    values = dict(
        code="VT101", name="context-length-exceeded", title="Prompt plus completion is longer than the window",
        stage="request", severity="error", source="logs/a,b:c.log", line=7, excerpt="x",
        fields={}, derived={}, cause=["100% of\nthe window"], fixes=["Lower max_tokens"],
    )
    values.update(changes)
    return Finding(**values)


def test_an_annotation_is_one_line_with_escaped_file_and_message():
    line = annotation(_finding())
    assert "\n" not in line
    assert line.startswith("::error file=logs/a%2Cb%3Ac.log,line=7,title=vllm-triage (VT101)::")
    assert line.endswith("::context-length-exceeded: Prompt plus completion is longer than the window%0A100%25 of%0Athe window%0A1. Lower max_tokens")


@pytest.mark.parametrize(("severity", "command"), [("error", "::error "), ("warning", "::warning "), ("info", "::notice ")])
def test_severity_picks_the_command(severity, command):
    assert annotation(_finding(severity=severity)).startswith(command)


def test_most_important_first():
    findings = [_finding(severity="info", line=1), _finding(severity="error", line=9), _finding(severity="warning", line=2)]
    lines = render(ScanResult(findings, ["logs/a,b:c.log"])).splitlines()
    assert [line.split(" ", 1)[0] for line in lines[:3]] == ["::error", "::warning", "::notice"]
    assert lines[3] == "vllm-triage: 3 findings (1 error, 1 warning, 1 info) in 1 input"
