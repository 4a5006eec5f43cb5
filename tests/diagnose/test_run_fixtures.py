"""Every fixture that states its runs (`#! outcome`, `#! first-failure` ...) gets them: the
facts with their lines, the outcome with its line, the first process to fail with its first
line and root error, and each consequence once. The markers bind: take one away, or change
what it says, and the check fails."""

from pathlib import Path

import pytest

from triage import pipeline
from triage.rules.ruleset import load_rules
from triage.rules.ruletest import check_fixture, fixture_files, read_markers
from triage.rules.runmarkers import RunMarker

from conftest import FIXTURES

RULES = load_rules()
BINDING = ("outcome", "first-failure", "root-error", "consequence")  # a summary must state each of these


def states_runs(path: Path) -> bool:
    return any(line.startswith(b"#! outcome") for line in path.read_bytes().split(b"\n"))


RUN_FIXTURES = [path for path in fixture_files([FIXTURES]) if states_runs(path)]
IDS = [str(path.relative_to(FIXTURES)) for path in RUN_FIXTURES]


def run_markers(path: Path) -> list[RunMarker]:
    return [m for m in read_markers(path.read_bytes(), str(path))[1] if isinstance(m, RunMarker)]


def summaries_and_findings(path: Path):
    blanked = read_markers(path.read_bytes(), str(path))[0]
    result = pipeline.scan([pipeline.Text(str(path), blanked)], pipeline.ScanOptions(RULES))
    return [run.summary for run in result.runs[str(path)]], list(result.findings)


def test_the_fixtures_cover_every_failure_chain():
    """Healthy V0 and V1 starts, each executor's failed start, a paste, restarts, collectors."""
    assert len(RUN_FIXTURES) >= 3
    outcomes = {m.text for path in RUN_FIXTURES for m in run_markers(path) if m.verb == "outcome"}
    assert {"ready", "failed"} <= outcomes


@pytest.mark.parametrize("path", RUN_FIXTURES, ids=IDS)
def test_each_run_says_what_its_markers_state(path):
    failures, markers = check_fixture(RULES, path)
    assert markers > 0
    assert [str(f) + f"\n  expected {f.expected}\n  got      {f.got}" for f in failures] == []


@pytest.mark.parametrize("path", RUN_FIXTURES, ids=IDS)
def test_a_failed_run_that_no_rule_explains_gets_one_generic_finding_at_its_root(path):
    summaries, findings = summaries_and_findings(path)
    for summary in summaries:
        first = summary.first_failure
        generic = [f for f in findings if f.run == summary.number and f.code in ("VT207", "VT306")]
        if first is None:
            assert generic == []
            continue
        at_root = [f for f in findings if f.run == summary.number and f.line == first.error_line
                   and f.code not in ("VT207", "VT306") and f.root is not False]
        if at_root:  # a rule recognised the root: it is the finding, no generic one
            assert generic == []
            continue
        assert [(f.code, f.line, f.process) for f in generic] == [
            ("VT207" if first.stage == "startup" else "VT306", first.error_line, first.process)
        ]
        assert generic[0].excerpt == first.error and f"line {first.line}" in " ".join(generic[0].cause)


@pytest.mark.parametrize("path", RUN_FIXTURES, ids=IDS)
def test_each_binding_marker_is_needed(path, tmp_path):
    """A marker the check would pass without says nothing: drop each one in turn and the check fails."""
    lines = path.read_bytes().split(b"\n")
    for marker in run_markers(path):
        if marker.verb not in BINDING:
            continue
        dropped = lines[: marker.marker_line - 1] + [b""] + lines[marker.marker_line:]
        copy = tmp_path / path.name
        copy.write_bytes(b"\n".join(dropped))
        assert check_fixture(RULES, copy)[0], f"{path.name}:{marker.marker_line} '#! {marker.verb} {marker.text}'"


@pytest.mark.parametrize("path", RUN_FIXTURES, ids=IDS)
def test_a_fact_marker_with_another_value_fails(path, tmp_path):
    lines = path.read_bytes().split(b"\n")
    facts = [m for m in run_markers(path) if m.verb == "fact"]
    for marker in facts[:3]:  # a few per fixture: each costs a scan
        name = next(iter(marker.values))
        changed = lines[: marker.marker_line - 1] + [f'#! fact {name}="not {marker.values[name]}"'.encode()] + lines[marker.marker_line:]
        copy = tmp_path / path.name
        copy.write_bytes(b"\n".join(changed))
        assert check_fixture(RULES, copy)[0], f"{path.name}:{marker.marker_line} {name}"
