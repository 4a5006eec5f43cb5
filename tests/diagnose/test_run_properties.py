"""Properties of the run summary over every fixture that states its runs (fixtures/runs/):

- the lines of independent processes interleaved anyhow, each process's own order kept: the
  run fails alike, with the same processes; where the failure lines carry timestamps, the
  first to fail by timestamp stays the first;
- a window cut out of the log: a fact is reported only from a line inside it that states it;
  a window that ends before the ready or failure lines is `unknown`; a window that starts
  inside the first failure's traceback still names that process and its error line.
"""

from __future__ import annotations

import re
from collections import defaultdict
from functools import cache
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from triage import pipeline
from triage.diagnose.lifecycle import time_key
from triage.input.lineparse import parse_line
from triage.model import RunSummary
from triage.rules.ruleset import load_rules
from triage.rules.ruletest import MARKER_PREFIX, fixture_files

from conftest import FIXTURES

RULES = load_rules()
MATCHER = pipeline.make_matcher(pipeline.ScanOptions(RULES))
SUMMARY_FACTS = {"served_max_model_len", "window_source"}  # cite the line of the fact they are read from


def log_lines(path: Path) -> tuple[bytes, ...]:
    """The fixture without its marker lines: the log as vLLM printed it."""
    return tuple(line for line in path.read_bytes().split(b"\n") if not line.startswith(MARKER_PREFIX))


RUN_FIXTURES = sorted(p for p in fixture_files([FIXTURES / "runs"])
                      if any(line.startswith(b"#! outcome") for line in p.read_bytes().split(b"\n")))
LOGS = {path.name: log_lines(path) for path in RUN_FIXTURES}


@cache
def scanned(lines: tuple[bytes, ...]) -> tuple[list[RunSummary], dict[str, set[int]]]:
    """The runs of the lines, and for each fact name the lines whose own event states or derives it."""
    stated: dict[str, set[int]] = defaultdict(set)

    def take(event, run) -> None:
        if event.rule.kind == "fact" and event.rule.role in (None, "ready"):  # what the splitter keeps as facts
            for name in (*event.fields, *event.rule.derived):
                stated[name].add(event.record.line)

    result = pipeline.scan([pipeline.Text("log", b"\n".join(lines))],
                           pipeline.ScanOptions(RULES, matcher=MATCHER, on_event=take))
    return [run.summary for run in result.runs["log"]], dict(stated)


def failed(name: str) -> RunSummary | None:
    summaries = scanned(LOGS[name])[0]
    return next((s for s in summaries if s.outcome == "failed"), None)


FAILED = [name for name in LOGS if failed(name) is not None]


CRASHED = re.compile(r"Process (?P<name>[\w.-]+):$")
RAISED = re.compile(r"[\w.]*(?:Error|Exception|Exit|Interrupt)\b.*:")


def owners(lines: tuple[bytes, ...]) -> list[str | None]:
    """Each line's process: its tag; an untagged line between multiprocessing's "Process X:" and
    the end of its traceback is X's (0.33 prints EngineCore's re-raise untagged)."""
    found: list[str | None] = []
    crashed: str | None = None
    for raw in lines:
        parts = parse_line(raw)
        tagged = parts.process or parts.rank
        if tagged is None and (match := CRASHED.match(parts.text)):
            crashed = next((p for p in reversed(found) if p and p.split(" pid=")[0] == match["name"]), match["name"])
        found.append(tagged or crashed)
        if tagged is None and crashed is not None and RAISED.match(parts.text):
            crashed = None
    return found


def startup_end(lines: tuple[bytes, ...]) -> int:
    """Lines up to the last startup marker's stay in place: the API server prints its banner
    and arguments before it starts the engine, which prints its config before its workers start."""
    summaries, stated = scanned(lines)
    markers = [line for name in ("version", "model", "user_max_model_len") for line in stated.get(name, ())]
    return max(markers, default=0)


def first_timed(summary: RunSummary) -> bool:
    """The first failure's output carries a time, and every other that carries one is later (a
    raw traceback carries none: it passes an error on, or repeats one)."""
    first = summary.first_failure
    return first is not None and time_key(first.time) is not None and all(
        time_key(c.time) > time_key(first.time) for c in summary.consequences if time_key(c.time) is not None
    )


@st.composite
def interleaved(draw, lines: tuple[bytes, ...]) -> tuple[bytes, ...]:
    keep = startup_end(lines)
    streams: dict[str | None, list[bytes]] = defaultdict(list)
    for raw, process in zip(lines[keep:], owners(lines)[keep:], strict=True):
        streams[process].append(raw)
    queues = [list(reversed(stream)) for stream in streams.values()]
    out = list(lines[:keep])
    while any(queues):
        queue = draw(st.sampled_from([q for q in queues if q]))
        out.append(queue.pop())
    return tuple(out)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_interleaving_independent_processes_keeps_the_failure_and_by_time_its_first_process(data):
    name = data.draw(st.sampled_from(FAILED))
    before = failed(name)
    shuffled = data.draw(interleaved(LOGS[name]))
    after = failed_of(shuffled)
    assert after is not None, name
    processes = {before.first_failure.process} | {c.process for c in before.consequences}
    assert {after.first_failure.process} | {c.process for c in after.consequences} == processes
    assert len(after.consequences) == len({c.process for c in after.consequences})  # each once
    if first_timed(before):
        assert (after.first_failure.process, after.first_failure.error) == (
            before.first_failure.process, before.first_failure.error)


def failed_of(lines: tuple[bytes, ...]) -> RunSummary | None:
    return next((s for s in scanned(lines)[0] if s.outcome == "failed"), None)


@st.composite
def windows(draw):
    name = draw(st.sampled_from(sorted(LOGS)))
    lines = LOGS[name]
    start = draw(st.integers(1, len(lines)))
    end = draw(st.integers(start, len(lines)))
    return name, start, end


def window_of(name: str, start: int, end: int) -> list[RunSummary]:
    return scanned(LOGS[name][start - 1:end])[0]


def check_facts(name: str, start: int, end: int) -> None:
    _, stated = scanned(LOGS[name])
    for summary in window_of(name, start, end):
        for fact, line in summary.fact_lines.items():
            where = line + start - 1  # the window's line in the whole log
            assert start <= where <= end, (name, start, end, fact, where)
            if fact not in SUMMARY_FACTS:
                assert where in stated.get(fact, ()), (name, start, end, fact, where)
        for fact in set(summary.facts) - SUMMARY_FACTS:
            assert any(start <= line <= end for line in stated.get(fact, ())), (name, start, end, fact)


def end_evidence(summary: RunSummary) -> int | None:
    """The first line that tells how the run ended: its ready line, or its first failure output."""
    if summary.outcome == "ready" and summary.first_failure is None:
        return summary.outcome_line
    if summary.first_failure is not None:
        return min([summary.first_failure.line, *(c.line for c in summary.consequences)])
    return None


def check_outcome(name: str, start: int, end: int) -> None:
    whole = scanned(LOGS[name])[0]
    holding = [s for s in whole if s.first_line <= end]
    if not holding:
        return
    last = holding[-1]
    evidence = end_evidence(last)
    cut = window_of(name, start, end)
    if evidence is not None and end < evidence and cut:
        assert cut[-1].outcome == "unknown", (name, start, end, cut[-1].outcome)


@settings(max_examples=80, deadline=None)
@given(window=windows())
def test_a_window_reports_only_its_own_facts_and_no_end_it_does_not_show(window):
    check_facts(*window)
    check_outcome(*window)


def test_every_window_that_ends_early_is_unknown_and_keeps_to_its_facts():
    """The same at every cut of every fixture: [1, end] and [start, last line]."""
    for name, lines in LOGS.items():
        for cut in range(1, len(lines) + 1):
            check_facts(name, 1, cut)
            check_outcome(name, 1, cut)
            check_facts(name, cut, len(lines))


def test_a_window_that_starts_inside_the_first_traceback_still_names_its_process():
    for name in FAILED:
        first = failed(name).first_failure
        if first.process is None:
            continue  # untagged lines name no process once "Process X:" is cut off
        lines = LOGS[name]
        for start in range(first.line + 1, first.error_line + 1):
            cut = failed_of(lines[start - 1:])
            assert cut is not None, (name, start)
            assert (cut.first_failure.process, cut.first_failure.error_line + start - 1, cut.first_failure.error) == (
                first.process, first.error_line, first.error), (name, start)


def test_the_interleaving_property_reaches_timed_and_untimed_failures():
    """Its by-time branch is only as good as the fixtures it runs on."""
    timed = [name for name in FAILED if first_timed(failed(name))]
    assert len(timed) >= 3 and len(timed) < len(FAILED), timed
