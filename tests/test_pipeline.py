"""pipeline.scan: the one wiring every caller scans through; its result carries each input's runs."""

from dataclasses import asdict

import pytest
from conftest import FIXTURES

from triage.pipeline import Phases, ScanOptions, Text, scan

LOGS = sorted(FIXTURES.glob("*.log")) + sorted((FIXTURES / "runs").glob("*.log"))


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name)
def test_each_input_carries_its_runs_and_every_finding_names_one_of_them(ruleset, path):
    result = scan([str(path)], ScanOptions(ruleset))
    runs = result.runs[str(path)]
    assert [run.number for run in runs] == sorted({run.number for run in runs})
    assert {f.run for f in result.findings} <= {run.number for run in runs}
    for run in runs:
        for name, (source, line) in run.facts.lines.items():
            assert source == str(path) and line >= 1 and name in run.facts
        assert not any(run.problems for run in runs[:-1])  # a run that ended keeps its facts, not its events
    assert result.facts[str(path)] == (runs[-1].facts if runs else {})


def test_a_log_held_in_memory_scans_as_the_same_file_on_disk(ruleset):
    pasted = b"".join(path.read_bytes() for path in LOGS)
    from_memory = scan([Text("pasted.log", pasted)], ScanOptions(ruleset))
    assert len(from_memory.runs["pasted.log"]) > 5
    for path in LOGS[:3]:
        on_disk, in_memory = scan([str(path)], ScanOptions(ruleset)), scan([Text(str(path), path.read_bytes())], ScanOptions(ruleset))
        assert [asdict(f) for f in in_memory.findings] == [asdict(f) for f in on_disk.findings]


def test_unreadable_and_binary_inputs_are_errors_of_the_result(ruleset, tmp_path):
    binary = tmp_path / "core.bin"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00" + b"\x00\x01\x02" * 400)  # a known format: skipped whole
    result = scan([str(tmp_path / "missing.log"), str(binary), str(FIXTURES / "startup-kv-too-small-v1.log")], ScanOptions(ruleset))
    assert result.inputs == [str(FIXTURES / "startup-kv-too-small-v1.log")] and result.skipped == [str(binary)]
    assert any("missing.log" in error for error in result.errors) and [f.code for f in result.findings][:1] == ["VT201"]


def test_phases_time_the_scan_without_changing_it(ruleset):
    path = str(FIXTURES / "startup-kv-too-small-v1.log")
    phases = Phases()
    timed, plain = scan([path], ScanOptions(ruleset, phases=phases)), scan([path], ScanOptions(ruleset))
    assert [asdict(f) for f in timed.findings] == [asdict(f) for f in plain.findings]
    assert phases.calls["pass"] >= 1 and phases.calls["match"] >= 1 and phases.calls["diagnose"] >= 1
    assert all(phases[phase] > 0 for phase in ("pass", "match", "diagnose"))
