"""Test rules: against their own examples, and against annotated fixture logs.

A fixture log states what it proves in marker lines, each about the next line that is
not a marker (the line where the event's first line must be):

    #! expect VT101 max_model_len=8192 prompt_tokens=9000   VT101 fires there, with these numbers
    #! ok VT101                                             VT101 does not fire there
    #! ok                                                   no rule fires there
    #! outcome failed                                       its run failed; this is the root error line

(and the other run markers of triage/rules/runmarkers.py: first-failure, root-error,
consequence, fact, no-fact).

Values are compared with the event's fields, else with the rule's derived numbers. On a
line with `expect` markers every rule that fires must be expected. Fact rules (capacity
and metrics lines) count only where a marker names them: they tell the diagnosis about
the server and are no finding. Lines without a marker are not checked. A marker naming an unknown rule, or one we cannot read, is a failure.
Marker lines are blanked before the scan, so line numbers stay those of the file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import regex

from triage import pipeline
from triage.diagnose.facts import DEFAULTS, Facts, Names, Run, derive
from triage.diagnose.requirements import Requirement, derived_when_met
from triage.match.matcher import Matcher
from triage.model import Event, RunSummary
from triage.rules import runmarkers
from triage.rules.runmarkers import RunMarker
from triage.rules.ruleset import Example, Rule, RuleSet

MARKER_PREFIX = b"#!"
MARKER = regex.compile(r"#!\s*(?P<verb>expect|ok)\b(?P<rest>.*)$")
ASSIGNMENT = regex.compile(r"(?P<name>[A-Za-z_]\w*)=(?P<value>\S+)")
FIXTURE_GLOB = "*.log"


@dataclass(slots=True)
class Failure:
    rule: str  # code, or "-" when the marker names none
    where: str  # "example 2", "counter-example 1", or "file:line"
    problem: str
    expected: str | None = None
    got: str | None = None

    def __str__(self) -> str:
        return f"{self.rule} {self.where}: {self.problem}"


@dataclass(slots=True)
class Marker:
    verb: str  # "expect" or "ok"
    code: str | None  # None: a bare `#! ok`
    values: dict[str, Any]
    marker_line: int
    target_line: int = 0


@dataclass(slots=True)
class Outcome:
    """What a `rules test` run checked and what failed."""

    rules: int = 0
    examples: int = 0
    fixtures: int = 0
    markers: int = 0
    failures: list[Failure] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


# --- a rule's own examples -----------------------------------------------------------


def check_examples(ruleset: RuleSet) -> list[Failure]:
    failures: list[Failure] = []
    for rule in ruleset.rules:
        if rule.kind == "check":  # evaluated over a run's facts, not matched on lines
            failures.extend(_check_check(rule))
            continue
        if rule.kind == "gate":  # its numbers come from the gate's code (tests/diagnose/test_gate.py)
            continue
        matcher = Matcher(ruleset, [rule])
        for number, example in enumerate(rule.examples, 1):
            failures.extend(_check_match(matcher, rule, number, example))
        for number, text in enumerate(rule.counter_examples, 1):
            if fired_events(matcher, "example", text.encode()):
                failures.append(
                    Failure(rule.code, f"counter-example {number}", f"matched but must not: {text[:100]!r}",
                            expected="no match", got=rule.code)
                )
    return failures


def _check_check(rule: Rule) -> list[Failure]:
    """A check's examples give facts; the check must hold on them, with the derived numbers given."""
    failures = []
    for number, example in enumerate(rule.examples, 1):
        facts = example.fields  # a check's example states facts, not a log line
        derived = derived_when_met(rule, {**DEFAULTS, **facts})
        if derived is None:
            failures.append(Failure(rule.code, f"example {number}", f"does not hold on facts {facts}", expected=rule.code, got="nothing"))
            continue
        failures += [
            Failure(rule.code, f"example {number}", f"derived {name}: expected {want!r}, got {derived.get(name)!r}",
                    expected=f"{name}={want!r}", got=f"{name}={derived.get(name)!r}")
            for name, want in example.derived.items()
            if not _same(derived.get(name), want)
        ]
    for number, facts in enumerate(getattr(rule, "counter_facts", []) or [], 1):
        if derived_when_met(rule, {**DEFAULTS, **facts}) is not None:
            failures.append(Failure(rule.code, f"counter-example {number}", f"holds on facts {facts} but must not",
                                    expected="no finding", got=rule.code))
    return failures


def fires(event: Event, facts: Mapping[str, Any]) -> bool:
    """A match becomes a finding (or a fact) only when the rule's `require` holds: judged
    as the diagnosis judges it."""
    return Requirement.of(event.rule).holds(event.fields, facts)


def fired_events(matcher: Matcher, source: str, data: bytes) -> list[tuple[Event, Facts]]:
    """The events a scan of data takes, split into runs and diagnosed as `scan` does, that
    fire, each with the facts it is judged by: a problem's, those its run holds at the end
    (its finding is made with them); a fact's, those its run holds just after its line (what
    it set, a count that later lines add to included)."""
    return scanned(matcher, source, data)[0]


def scanned(matcher: Matcher, source: str, data: bytes) -> tuple[list[tuple[Event, Facts]], list[RunSummary]]:
    """fired_events(), and the summaries of the runs the scan found."""
    seen: list[tuple[Event, Facts]] = []

    def take(event: Event, run: Run) -> None:
        seen.append((event, run.facts.copy() if event.rule.kind == "fact" else run.facts))

    result = pipeline.scan([pipeline.Text(source, data)], pipeline.ScanOptions(matcher.ruleset, matcher=matcher, on_event=take))
    summaries = [run.summary for run in result.runs.get(source, []) if run.summary is not None]
    return [(event, facts) for event, facts in seen if event.rule.kind == "fact" or fires(event, facts)], summaries


def _check_match(matcher: Matcher, rule: Rule, number: int, example: Example) -> list[Failure]:
    where = f"example {number}"
    events = fired_events(matcher, "example", example.text.encode())
    if not events:
        return [Failure(rule.code, where, f"did not match: {example.text[:100]!r}", expected=rule.code, got="nothing")]
    event, facts = events[0]
    return compare_values(rule, where, event, {**example.fields, **example.derived}, facts)


def compare_values(rule: Rule, where: str, event: Event, wanted: dict[str, Any], facts: Mapping[str, Any]) -> list[Failure]:
    derived = facts if rule.kind == "fact" else derive(rule, Names({**DEFAULTS, **facts, **event.fields}))
    failures = []
    for name, want in wanted.items():
        got = event.fields[name] if name in event.fields else derived.get(name)
        if not _same(got, want):
            kind = "field" if name in rule.field_types else "derived"
            failures.append(
                Failure(rule.code, where, f"{kind} {name}: expected {want!r}, got {got!r}",
                        expected=f"{name}={want!r}", got=f"{name}={got!r}")
            )
    return failures


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) or isinstance(got, float):
        try:
            return abs(float(got) - float(want)) <= 1e-6 * max(1.0, abs(float(want)))
        except (TypeError, ValueError):
            return False
    if isinstance(want, (int, bool)) or want is None:
        return got == want
    return str(got) == str(want)


# --- annotated fixture logs ------------------------------------------------------------


def fixture_files(paths: Iterable[str | Path]) -> list[Path]:
    files: list[Path] = []
    for entry in map(Path, paths):
        if entry.is_dir():
            files.extend(sorted(p for p in entry.rglob(FIXTURE_GLOB) if p.is_file()))
        else:
            files.append(entry)
    return files


def has_markers(path: Path) -> bool:
    with path.open("rb") as stream:
        return any(line.startswith(MARKER_PREFIX) for line in stream)


def read_markers(data: bytes, source: str) -> tuple[bytes, list[Marker | RunMarker], list[Failure]]:
    """The log with marker lines blanked, the markers (each aimed at its line), and bad markers."""
    lines = data.split(b"\n")
    markers: list[Marker | RunMarker] = []
    failures: list[Failure] = []
    pending: list[Marker | RunMarker] = []
    for number, raw in enumerate(lines, 1):
        if not raw.startswith(MARKER_PREFIX):
            for marker in pending:
                marker.target_line = number
            markers.extend(pending)
            pending = []
            continue
        lines[number - 1] = b""
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        parsed, problem = _parse_marker(text, number)
        if parsed is None:
            failures.append(Failure("-", f"{source}:{number}", problem))
        else:
            pending.append(parsed)
    for marker in pending:
        code = marker.code or "-" if isinstance(marker, Marker) else "-"
        failures.append(Failure(code, f"{source}:{marker.marker_line}", "marker has no log line after it"))
    return b"\n".join(lines), markers, failures


def _parse_marker(text: str, number: int) -> tuple[Marker | RunMarker | None, str]:
    run_marker, problem = runmarkers.parse(text, number, parse_value)
    if run_marker is not None or problem:
        return run_marker, problem
    match = MARKER.match(text)
    if match is None:
        return None, (f"not a marker we know (use '#! expect CODE name=value ...', '#! ok [CODE]' or one of "
                      f"{', '.join(runmarkers.VERBS)}): {text!r}")
    words = match["rest"].split()
    verb = match["verb"]
    if verb == "ok":
        if len(words) > 1:
            return None, f"'#! ok' takes at most one rule code: {text!r}"
        return Marker("ok", words[0] if words else None, {}, number), ""
    if not words:
        return None, f"'#! expect' needs a rule code: {text!r}"
    values = {}
    for word in words[1:]:
        assignment = ASSIGNMENT.fullmatch(word)
        if assignment is None:
            return None, f"expected name=value, got {word!r} in {text!r}"
        values[assignment["name"]] = parse_value(assignment["value"])
    return Marker("expect", words[0], values, number), ""


def parse_value(text: str) -> Any:
    if text in ("true", "false"):
        return text == "true"
    plain = text.replace(",", "") if regex.fullmatch(r"-?\d{1,3}(?:,\d{3})+", text) else text
    for convert in (int, float):
        try:
            return convert(plain)
        except ValueError:
            continue
    return text


def check_fixture(ruleset: RuleSet, path: Path) -> tuple[list[Failure], int]:
    """Failures and the number of markers in one annotated log (a bad or unknown one counts: it was checked, and failed)."""
    source = str(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        return [Failure("-", f"{source}:0", f"cannot read fixture: {exc}")], 0
    blanked, every_marker, failures = read_markers(data, source)
    read = len(every_marker) + len(failures)  # each failure so far is one marker line that could not be used
    run_markers = [m for m in every_marker if isinstance(m, RunMarker)]
    markers = [m for m in every_marker if isinstance(m, Marker)]
    for marker in markers:
        if marker.code is not None and ruleset.by_code(marker.code) is None:
            failures.append(Failure(marker.code, f"{source}:{marker.marker_line}", "marker names an unknown rule"))
    markers = [m for m in markers if m.code is None or ruleset.by_code(m.code) is not None]
    events, summaries = scanned(Matcher(ruleset), source, blanked)
    events_by_line: dict[int, list[tuple[Event, Facts]]] = {}
    for event, facts in events:
        events_by_line.setdefault(event.record.line, []).append((event, facts))
    for line in sorted({m.target_line for m in markers}):
        here = [m for m in markers if m.target_line == line]
        failures.extend(_check_line(f"{source}:{line}", here, events_by_line.get(line, [])))
    if run_markers:
        failures += [Failure("-", where, problem, expected=expected, got=got)
                     for where, problem, expected, got in runmarkers.check(summaries, run_markers, source, _same)]
    return failures, read


def _check_line(where: str, markers: list[Marker], fired_here: list[tuple[Event, Facts]]) -> list[Failure]:
    named = {m.code for m in markers}
    # Fact rules (capacity lines, metrics) are not findings: a marker speaks of them only by code.
    fired_here = [(e, facts) for e, facts in fired_here if e.rule.kind != "fact" or e.rule.code in named]
    events = [event for event, _ in fired_here]
    fired = {event.rule.code: (event, facts) for event, facts in fired_here}
    got = _describe(events)
    failures: list[Failure] = []
    expected = [m for m in markers if m.verb == "expect"]
    for marker in expected:
        here = fired.get(marker.code or "")
        want = _describe_marker(marker)
        if here is None:
            failures.append(Failure(marker.code or "-", where, "expected to fire here, did not", expected=want, got=got))
            continue
        event, facts = here
        for failure in compare_values(event.rule, where, event, marker.values, facts):
            failure.expected, failure.got = want, _describe([event], marker.values)
            failures.append(failure)
    expected_codes = {m.code for m in expected}
    if expected:
        for code in fired.keys() - expected_codes:
            failures.append(Failure(code, where, "fired here but no marker expects it", expected=_describe_markers(expected), got=got))
    for marker in markers:
        if marker.verb != "ok":
            continue
        if marker.code is None and fired:
            failures.append(Failure(",".join(fired), where, "no rule may fire here", expected="nothing", got=got))
        elif marker.code is not None and marker.code in fired:
            failures.append(Failure(marker.code, where, "must not fire here", expected=f"not {marker.code}", got=got))
    return failures


def _describe(events: list[Event], only: dict[str, Any] | None = None) -> str:
    if not events:
        return "nothing"
    parts = []
    for event in events:
        names = only if only is not None else event.fields
        values = " ".join(f"{n}={event.fields.get(n)!r}" for n in names if n in event.fields)
        parts.append(f"{event.rule.code} {values}".rstrip())
    return "; ".join(parts)


def _describe_marker(marker: Marker) -> str:
    values = " ".join(f"{n}={v!r}" for n, v in marker.values.items())
    return f"{marker.code} {values}".rstrip()


def _describe_markers(markers: list[Marker]) -> str:
    return "; ".join(_describe_marker(m) for m in markers)


# --- the whole run ---------------------------------------------------------------------


def run(ruleset: RuleSet, fixture_paths: Iterable[str | Path] = ()) -> Outcome:
    """Every rule's examples, then every annotated fixture among the paths."""
    outcome = Outcome(rules=len(ruleset.rules))
    outcome.examples = sum(len(r.examples) + len(r.counter_examples) for r in ruleset.rules)
    outcome.failures.extend(check_examples(ruleset))
    for path in fixture_files(fixture_paths):
        if not path.exists():
            outcome.failures.append(Failure("-", f"{path}:0", "no such fixture file or folder"))
            continue
        if not has_markers(path):
            continue
        failures, markers = check_fixture(ruleset, path)
        outcome.fixtures += 1
        outcome.markers += markers
        outcome.failures.extend(failures)
    return outcome
