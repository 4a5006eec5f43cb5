"""Markers that state what a fixture log's run summaries must say (see docs/rule-authoring.md).

Each marker is about the run that holds the next line that is not a marker:

    #! outcome ready|failed|unknown     how that run ended; for ready and failed the next
                                        line is the outcome line (the ready line, the root
                                        error line)
    #! first-failure TAG                the first process to fail, as printed ("untagged" for
                                        the main process); its failure output starts on the next line
    #! root-error TEXT                  the first failure's error is on the next line and starts with TEXT
    #! consequence TAG [same]           another process's failure starts on the next line;
                                        "same": it repeats the first failure's error
    #! fact name=value ...              facts of the run, stated on the next line (a value with
                                        spaces in double quotes)
    #! no-fact name ...                 the run does not report these facts (whatever line)

A fixture with run markers states every run's outcome, the first failure of every run that
has one, and every consequence: a summary that names one more (or one process twice) fails.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import regex

from triage.model import ProcessFailure, RunSummary

VERBS = ("outcome", "first-failure", "root-error", "consequence", "fact", "no-fact")
MARKER = regex.compile(r"#!\s*(?P<verb>outcome|first-failure|root-error|consequence|no-fact|fact)(?:\s+(?P<rest>.*?))?\s*$")
ASSIGNMENT = regex.compile(r'(?P<name>[A-Za-z_]\w*)=(?:"(?P<quoted>[^"]*)"|(?P<value>\S+))')
UNTAGGED = "untagged"
SAME = " same"
OUTCOMES = ("ready", "failed", "unknown")


@dataclass(slots=True)
class RunMarker:
    verb: str
    text: str  # what follows the verb: an outcome, a tag, an error's start
    values: dict[str, Any]  # fact: name -> value; no-fact: name -> None
    marker_line: int
    target_line: int = 0


def parse(text: str, number: int, parse_value: Callable[[str], Any]) -> tuple[RunMarker | None, str]:
    """A run marker from its line, or None and why it cannot be read ("" when it is no run marker)."""
    match = MARKER.match(text)
    if match is None:
        return None, ""
    verb, rest = match["verb"], match["rest"] or ""
    if verb == "outcome" and rest not in OUTCOMES:
        return None, f"'#! outcome' takes one of {', '.join(OUTCOMES)}: {text!r}"
    if verb in ("first-failure", "root-error", "consequence") and not rest:
        return None, f"'#! {verb}' needs a text: {text!r}"
    values: dict[str, Any] = {}
    if verb == "fact":
        position = 0
        for assignment in ASSIGNMENT.finditer(rest):
            if rest[position:assignment.start()].strip():
                break
            raw = assignment["quoted"] if assignment["quoted"] is not None else assignment["value"]
            values[assignment["name"]] = raw if assignment["quoted"] is not None else parse_value(raw)
            position = assignment.end()
        if not values or rest[position:].strip():
            return None, f"'#! fact' takes name=value ... (a value with spaces in double quotes): {text!r}"
    elif verb == "no-fact":
        values = dict.fromkeys(rest.split())
        if not values:
            return None, f"'#! no-fact' needs fact names: {text!r}"
    return RunMarker(verb, rest, values, number), ""


def run_of(summaries: Sequence[RunSummary], line: int) -> RunSummary | None:
    """The run whose recognised lines span the line (the last one that started before it)."""
    before = [summary for summary in summaries if summary.first_line <= line]
    return before[-1] if before else None


def check(summaries: Sequence[RunSummary], markers: Sequence[RunMarker], source: str,
          same: Callable[[Any, Any], bool]) -> list[tuple[str, str, str, str]]:
    """(where, problem, expected, got) for each marker the summaries contradict, and for each
    outcome, first failure or consequence of a summary that no marker states."""
    problems: list[tuple[str, str, str, str]] = []
    by_run: dict[int, list[RunMarker]] = {}
    for marker in markers:
        summary = run_of(summaries, marker.target_line)
        if summary is None:
            problems.append((f"{source}:{marker.target_line}", f"'#! {marker.verb}': no run holds this line",
                             marker.verb, "no run"))
            continue
        by_run.setdefault(summary.number, []).append(marker)
    for summary in summaries:
        problems += _check_run(summary, by_run.get(summary.number, []), source, same)
    return problems


def _check_run(summary: RunSummary, markers: list[RunMarker], source: str,
               same: Callable[[Any, Any], bool]) -> list[tuple[str, str, str, str]]:
    problems: list[tuple[str, str, str, str]] = []
    run = f"run {summary.number} (lines {summary.first_line}-{summary.last_line})"

    def where(marker: RunMarker) -> str:
        return f"{source}:{marker.target_line}"

    outcomes = [m for m in markers if m.verb == "outcome"]
    got_outcome = f"{summary.outcome} at line {summary.outcome_line}"
    if len(outcomes) != 1:
        problems.append((f"{source}:{summary.first_line}", f"{run}: needs one '#! outcome' marker, has {len(outcomes)}",
                         "one outcome marker", got_outcome))
    for marker in outcomes:
        line_wanted = marker.target_line if marker.text != "unknown" else None
        if (marker.text, line_wanted) != (summary.outcome, summary.outcome_line):
            problems.append((where(marker), f"{run}: outcome", f"{marker.text} at line {line_wanted}", got_outcome))
    problems += _check_first(summary, [m for m in markers if m.verb in ("first-failure", "root-error")], run, where)
    problems += _check_consequences(summary, [m for m in markers if m.verb == "consequence"], run, where, source)
    for marker in markers:
        if marker.verb == "fact":
            for name, want in marker.values.items():
                got = (summary.facts.get(name), summary.fact_lines.get(name))
                if not (name in summary.facts and same(got[0], want) and got[1] == marker.target_line):
                    problems.append((where(marker), f"{run}: fact {name}", f"{name}={want!r} at line {marker.target_line}",
                                     f"{name}={got[0]!r} at line {got[1]}" if name in summary.facts else "not reported"))
        elif marker.verb == "no-fact":
            for name in marker.values:
                if name in summary.facts:
                    problems.append((where(marker), f"{run}: fact {name} must not be reported", f"no {name}",
                                     f"{name}={summary.facts[name]!r} at line {summary.fact_lines.get(name)}"))
    return problems


def _process(text: str) -> str | None:
    return None if text == UNTAGGED else text


def _shown(process: str | None) -> str:
    return UNTAGGED if process is None else process


def _check_first(summary: RunSummary, markers: list[RunMarker], run: str,
                 where: Callable[[RunMarker], str]) -> list[tuple[str, str, str, str]]:
    first = summary.first_failure
    got = "none" if first is None else f"{_shown(first.process)} at line {first.line}, error at line {first.error_line}: {first.error}"
    problems = []
    for verb in ("first-failure", "root-error"):
        mine = [m for m in markers if m.verb == verb]
        if first is not None and len(mine) != 1:
            problems.append((f"{where(mine[1]) if mine else summary.source + ':' + str(summary.first_line)}",
                             f"{run}: needs one '#! {verb}' marker, has {len(mine)}", f"one {verb} marker", got))
        for marker in mine:
            if first is None:
                problems.append((where(marker), f"{run}: no first failure", marker.text, got))
            elif verb == "first-failure" and (_process(marker.text), marker.target_line) != (first.process, first.line):
                problems.append((where(marker), f"{run}: first failure", f"{marker.text} at line {marker.target_line}", got))
            elif verb == "root-error" and not (first.error_line == marker.target_line and first.error.startswith(marker.text)):
                problems.append((where(marker), f"{run}: root error", f"at line {marker.target_line}: {marker.text}", got))
    return problems


def _check_consequences(summary: RunSummary, markers: list[RunMarker], run: str,
                        where: Callable[[RunMarker], str], source: str) -> list[tuple[str, str, str, str]]:
    problems = []
    wanted = {(m.target_line, _process(m.text.removesuffix(SAME)), m.text.endswith(SAME)): m for m in markers}
    got = {(c.line, c.process, c.same_error): c for c in summary.consequences}
    for key in wanted.keys() - got.keys():
        problems.append((where(wanted[key]), f"{run}: consequence not listed", describe(key), _nearest(summary.consequences, key[0])))
    for key in got.keys() - wanted.keys():
        problems.append((f"{source}:{key[0]}", f"{run}: consequence no marker states", "no consequence here", describe(key)))
    processes = [c.process for c in summary.consequences]
    for process in sorted({p for p in processes if processes.count(p) > 1}, key=str):
        problems.append((f"{source}:{summary.first_line}", f"{run}: {_shown(process)} listed more than once",
                         "each process once", f"{processes.count(process)} times"))
    return problems


def describe(key: tuple[int, str | None, bool]) -> str:
    line, process, same = key
    return f"{_shown(process)} at line {line}{' (same error)' if same else ''}"


def _nearest(consequences: Sequence[ProcessFailure], line: int) -> str:
    here = [c for c in consequences if c.line == line]
    return "; ".join(describe((c.line, c.process, c.same_error)) for c in here) or f"nothing at line {line}"
