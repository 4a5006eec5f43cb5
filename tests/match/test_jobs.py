"""--jobs: a file cut into parts scanned by several processes gives the events of one scan."""

import io
import sys
from pathlib import Path

import pytest

from triage.match import parallel as jobs
from triage.match.matcher import Matcher
from triage.input.reader import iter_chunks

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import generate  # noqa: E402

pytestmark = pytest.mark.skipif(not jobs.can_split(__file__), reason="needs fork")


def events_of(found):
    return [(e.rule.code, e.record.line, e.record.end_line, e.pattern_id, e.hosted, sorted(e.fields.items())) for e in found]


@pytest.mark.parametrize("seed", [3, 4])
def test_parts_give_the_same_events_as_one_scan(ruleset, tmp_path, monkeypatch, seed):
    """Events every few lines, many of them wrapped over two lines, cut into small parts."""
    writer = generate.LogWriter("access-log", seed=seed, out=io.BytesIO(), pool_blocks=1)
    lines = []
    for number in range(600):
        lines.append(writer.access_line() if number % 3 else writer.metrics_line())
        if number % 5 == 0:
            lines.extend(writer.event_lines(writer.rng.choice(generate.ALL_EVENTS))[0])
    log = tmp_path / "big.log"
    log.write_bytes("".join(lines).encode() + b"ValueError: no final newline")
    with open(log, "rb") as handle:
        expected = events_of(Matcher(ruleset).scan(str(log), iter_chunks(handle)))
    monkeypatch.setattr(jobs, "MIN_PART", 256)
    monkeypatch.setattr(jobs, "PART_SIZE", 700)  # a cut every few lines, more parts than processes
    found = events_of(jobs.scan_split(Matcher(ruleset), str(log), 3))
    assert len([e for e in expected if e[0] < "VT9"]) > 100 and found == expected


def test_gzip_and_pipes_are_not_split(tmp_path):
    packed = tmp_path / "x.log.gz"
    packed.write_bytes(b"\x1f\x8b" + bytes(100))
    assert not jobs.can_split(str(packed)) and not jobs.can_split("/dev/stdin")


def test_scan_with_jobs_prints_the_same_report(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from triage.cli import main

    fixtures = sorted((ROOT / "fixtures").glob("*.log"))
    log = tmp_path / "all.log"
    log.write_bytes(b"".join(path.read_bytes() for path in fixtures))
    monkeypatch.setattr(jobs, "MIN_PART", 1024)
    monkeypatch.setattr(jobs, "PART_SIZE", 4096)
    reports = [
        CliRunner().invoke(main, ["scan", "--format", "json", "--fail-on", "never", "-j", n, str(log)]).output
        for n in ("1", "2")
    ]
    assert '"findings"' in reports[0] and reports[1] == reports[0]
