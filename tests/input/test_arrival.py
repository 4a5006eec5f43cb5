"""How text arrives never changes the answer: a file, a pipe's pieces of any size, a live pipe
that goes quiet between records, gzip, and a file split across processes (-j) give the same
JSON report, for every fixture and every rule example."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import random
from pathlib import Path
from unittest import mock

import pytest

from triage import pipeline
from triage.input.assemble import Rows
from triage.input.reader import InputQuiet
from triage.match import parallel
from triage.report import json_format
from triage.rules.ruleset import load_rules
from triage.rules.ruletest import MARKER_PREFIX

from conftest import FIXTURES

RULES = load_rules()
MATCHER = pipeline.make_matcher(pipeline.ScanOptions(RULES))
LOGS = sorted(path for path in FIXTURES.rglob("*.log"))


def text_of(path: Path) -> bytes:
    """The fixture as vLLM printed it: its annotation lines empty."""
    return b"\n".join(b"" if line.startswith(MARKER_PREFIX) else line for line in path.read_bytes().split(b"\n"))


def _inputs() -> list[tuple[str, bytes]]:
    inputs = [(path.relative_to(FIXTURES).as_posix(), text_of(path)) for path in LOGS]
    inputs.append(("request-overflow-v092-rotated.log.gz", gzip.decompress((FIXTURES / "request-overflow-v092-rotated.log.gz").read_bytes())))
    for rule in RULES.rules:
        for index, example in enumerate(rule.examples):
            inputs.append((f"{rule.code}-{index}", example.text.encode()))
    return inputs


INPUTS = _inputs()


class Pieces(io.RawIOBase):
    """Bytes as a pipe hands them over: reads of the given sizes; live, quiet (InputQuiet) after
    the pieces that end where a record starts."""

    def __init__(self, data: bytes, sizes: list[int], quiet: set[int] = frozenset()):  # type: ignore[assignment]
        self.data, self.sizes, self.quiet = data, sizes, quiet
        self.at, self.reads, self.told = 0, 0, False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.at in self.quiet and not self.told and 0 < self.at < len(self.data):
            self.told = True
            raise InputQuiet()
        self.told = False
        size = min(len(buffer), self.sizes[self.reads % len(self.sizes)], len(self.data) - self.at)
        if self.quiet:  # (a live writer's pieces end where it paused)
            stops = [at for at in self.quiet if self.at < at < self.at + size]
            size = min(stops, default=self.at + size) - self.at
        self.reads += 1
        buffer[:size] = self.data[self.at : self.at + size]
        self.at += size
        return size


def report(name: str, open_path=None, path: str | None = None, jobs: int = 1) -> dict:
    """The JSON report, less the input's name (each way of reading names it its own way)."""
    target = path if path is not None else pipeline.Text(name, b"")
    with mock.patch.object(pipeline, "open_path", open_path) if open_path else contextlib.nullcontext():
        result = pipeline.scan([target], pipeline.ScanOptions(RULES, matcher=MATCHER, jobs=jobs))
    rendered = json_format.render(result)
    for named in result.inputs:  # (a finding that names another's line names it by its input)
        rendered = rendered.replace(json.dumps(named)[1:-1] + ":", "INPUT:")
    document = json.loads(rendered)
    for finding in document["findings"]:
        finding.pop("source")
    for run in document["runs"]:
        run.pop("input")
    document.pop("inputs")
    document["errors"] = [error.split(": ", 1)[-1] for error in document["errors"]]
    return document


def piped(data: bytes, sizes: list[int], quiet: set[int] = frozenset()):  # type: ignore[assignment]
    def open_path(path, follow, on_wait=None):
        return "pipe", io.BufferedReader(Pieces(data, sizes, quiet), buffer_size=max(sizes))
    return open_path


def record_starts(data: bytes) -> set[int]:
    """Where the records begin: where a live server pauses (it writes a record at once)."""
    rows, starts, at = Rows(data, len(data), MATCHER.markers), set(), 0
    for line in data.split(b"\n")[:-1]:
        if at and rows.starts_record(at):
            starts.add(at)
        at += len(line) + 1
    return starts


@pytest.mark.slow
@pytest.mark.parametrize(("name", "data"), INPUTS, ids=[name for name, _ in INPUTS])
def test_file_pipe_live_and_gzip_give_the_same_report(tmp_path, name, data):
    path = tmp_path / "log"
    path.write_bytes(data)
    whole = report(name, path=str(path))
    draw = random.Random(name)
    sizes = [draw.randint(1, 9000) for _ in range(3)]
    assert report(name, piped(data, sizes)) == whole, ("pipe", sizes)
    pauses = {at for at in record_starts(data) if draw.random() < 0.5}
    assert report(name, piped(data, [draw.randint(64, 4096)], pauses)) == whole, ("live", sorted(pauses))
    packed = tmp_path / "log.gz"
    packed.write_bytes(gzip.compress(data))
    assert report(name, path=str(packed)) == whole, "gzip"


@pytest.mark.slow
def test_a_file_split_across_processes_gives_the_report_of_one(tmp_path, monkeypatch):
    """-j: every fixture and example in one file, cut into parts of a few kilobytes (where a
    record starts) so that every process reads some of them."""
    if not parallel.can_split(__file__):
        pytest.skip("no fork here")
    path = tmp_path / "all.log"
    path.write_bytes(b"\n".join(data for _, data in INPUTS) + b"\n")
    whole = report("all", path=str(path))
    monkeypatch.setattr(parallel, "MIN_PART", 4096)
    monkeypatch.setattr(parallel, "PART_SIZE", 16384)
    assert report("all", path=str(path), jobs=2) == whole
