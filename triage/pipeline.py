"""The one wiring of a scan: inputs -> reader -> matcher -> diagnosis -> result.

`scan` and `gate` on the command line, `rules test`, the benchmarks and the tests all
scan through scan() here, so they read, split runs and diagnose alike.
"""

from __future__ import annotations

import io
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from triage.diagnose.diagnoser import Diagnoser
from triage.diagnose.facts import Run
from triage.diagnose.store import FindingStore
from triage.input.follow import FollowedFile, WaitingPipe, big_regular_file, tee, with_progress
from triage.input.reader import (
    Chunk,
    InputError,
    NotText,
    capped,
    iter_chunks,
    maybe_gunzip,
    open_input,
    sniff_binary,
    tallied,
)
from triage.match.matcher import Matcher
from triage.model import Event, Finding, ScanResult
from triage.rules.ruleset import Rule, RuleSet, load_rules

__all__ = ["Phases", "ScanInterrupted", "ScanOptions", "Text", "scan"]


@dataclass(slots=True)
class Text:
    """An input held in memory (a rule's example, a fixture with its markers blanked)."""

    name: str
    data: bytes


class Phases(defaultdict[str, float]):
    """Seconds spent in each phase of a scan: "pass" (the anchor pass), "match" (matching
    candidate lines), "diagnose" (taking the events); and how many calls each had."""

    def __init__(self) -> None:
        super().__init__(float)
        self.calls: Counter[str] = Counter()

    def timing(self, phase: str, call: Callable[..., Any]) -> Callable[..., Any]:
        """call, with its time and its calls added to the phase's."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            self.calls[phase] += 1
            started = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self[phase] += time.perf_counter() - started

        return timed


@dataclass(slots=True)
class ScanOptions:
    """How to scan. ruleset None: the built-in rules; rules None: every rule of the ruleset."""

    ruleset: RuleSet | None = None
    rules: Sequence[Rule] | None = None
    keep_text: bool = False  # findings carry their record's whole text (--show-text)
    on_finding: Callable[[Finding], None] | None = None  # each finding as soon as its line is read
    on_wait: Callable[[], None] | None = None  # stdin, a pipe: called when it goes quiet but stays open
    on_event: Callable[[Event, Run], None] | None = None  # each event, with the run it went to
    follow: bool = False  # read the one path like tail -f
    tee_to: BinaryIO | None = None  # pass the input through unchanged
    progress: bool = False  # a progress line for a big file on disk
    standalone_checks: bool = True  # the capacity checks that make findings of their own
    jobs: int = 1  # processes for a plain file on disk (the events come in line order all the same)
    live: bool = False  # a line that matches on its own is reported at once (pipes, --follow)
    engine: str = "auto"
    max_bytes: int | None = None  # read each input up to this many bytes (after gunzip); the MCP server's bound
    phases: Phases | None = None  # where the time went (benchmarks); None: not measured
    matcher: Matcher | None = field(default=None, repr=False)  # made from the above when None


class ScanInterrupted(KeyboardInterrupt):
    """Ctrl-C during a scan; carries the result of what was read until then."""

    def __init__(self, result: ScanResult):
        super().__init__()
        self.result = result


def scan(paths: Sequence[str | Text], options: ScanOptions | None = None) -> ScanResult:
    """Scan each input in turn: its events are split into runs and diagnosed as they come.
    Inputs that cannot be read, or are not logs, are errors of the result, not exceptions."""
    options = options or ScanOptions()
    matcher = options.matcher or make_matcher(options)
    if options.phases is not None:
        matcher.time_phases(options.phases)
    findings = FindingStore()  # compressed as each run ends
    result = ScanResult(findings, [], rules=[rule for rule in matcher.rules if rule.kind != "gate"])
    checks = [r for r in matcher.rules if r.kind == "check" and (options.standalone_checks or r.attach_to)]
    for path in paths:
        diagnoser = Diagnoser(checks, options.keep_text, matcher.ruleset.fact_names, keep_runs=False, sink=findings)
        try:
            scan_input(path, matcher, diagnoser, options, result)
        except KeyboardInterrupt:
            result.errors.extend(matcher.warnings)
            raise ScanInterrupted(result) from None
    result.errors.extend(matcher.warnings)
    return result


def make_matcher(options: ScanOptions) -> Matcher:
    if options.ruleset is None:
        options.ruleset = load_rules(())
    return Matcher(options.ruleset, options.rules, engine=options.engine, live=options.live)


def scan_input(path: str | Text, matcher: Matcher, diagnoser: Diagnoser, options: ScanOptions, result: ScanResult) -> None:
    """One input into the result: its name, its findings (in the diagnoser's sink), its runs."""
    try:
        name, stream = open_path(path, options.follow, options.on_wait)
    except InputError as exc:
        result.errors.append(str(exc))
        return
    if options.max_bytes is not None:
        stream = capped(stream, options.max_bytes)
    interrupted = False
    junk = NotText()
    try:
        not_a_log = sniff_binary(stream)
        if not_a_log:
            result.errors.append(f"{name}: {not_a_log}; skipped")
            result.skipped.append(name)
            return
        result.inputs.append(name)
        take_events(events_of(path, name, stream, matcher, options, result.line_counts, junk), diagnoser, options)
    except InputError as exc:
        result.errors.append(f"{name}: {exc} (scanned what could be read)")
    except KeyboardInterrupt:
        interrupted = True
        result.errors.append(f"{name}: interrupted; the report covers what was read until then")
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
        warning = junk.warning(name)
        if warning is not None:
            result.errors.append(warning)
    diagnosis = diagnoser.result()  # adds the last run's findings to the sink
    result.facts[name], result.runs[name] = diagnosis.facts, diagnosis.runs
    if interrupted:
        raise KeyboardInterrupt


def open_path(path: str | Text, follow: bool, on_wait: Callable[[], None] | None = None) -> tuple[str, BinaryIO]:
    if isinstance(path, Text):
        return path.name, io.BufferedReader(io.BytesIO(path.data))
    if follow:
        return path, io.BufferedReader(FollowedFile(path))
    if path == "-" and on_wait is not None:
        return "<stdin>", maybe_gunzip(io.BufferedReader(WaitingPipe(sys.stdin.fileno(), on_wait)))
    return open_input(path)


def events_of(
    path: str | Text, name: str, stream: BinaryIO, matcher: Matcher, options: ScanOptions, line_counts: dict[str, int],
    junk: NotText,
) -> Iterator[Event]:
    """line_counts[name]: the number of the last line read, as it is read (not on a split file);
    junk: counts the lines that are not text as they are read."""
    if options.jobs > 1 and isinstance(path, str) and path != "-" and not options.follow and options.tee_to is None:
        from triage.match.parallel import can_split, scan_split  # multiprocessing: imported only when asked

        if can_split(path):
            return scan_split(matcher, path, options.jobs, junk)
    return matcher.scan(name, counted(input_chunks(name, stream, options, junk, matcher.markers), name, line_counts))


def take_events(events: Iterator[Event], diagnoser: Diagnoser, options: ScanOptions) -> None:
    on_finding, on_event, phases = options.on_finding, options.on_event, options.phases
    add = diagnoser.add if phases is None else phases.timing("diagnose", diagnoser.add)
    render = on_finding is not None
    for event in events:
        finding = add(event, render=render)
        if on_event is not None:
            on_event(event, diagnoser.run)
        if finding is not None and on_finding is not None:
            on_finding(finding)


def input_chunks(name: str, stream: BinaryIO, options: ScanOptions, junk: NotText, markers: tuple[bytes, ...]) -> Iterator[Chunk]:
    chunks = tallied(iter_chunks(stream, markers=markers), junk)
    size = big_regular_file(stream) if options.progress else None
    if size:
        chunks = with_progress(chunks, size, os.path.basename(name))
    return tee(chunks, options.tee_to) if options.tee_to is not None else chunks


def counted(chunks: Iterator[Chunk], name: str, line_counts: dict[str, int]) -> Iterator[Chunk]:
    """The chunks, with line_counts[name] the number of the last line read so far: where a log
    ends (the gate's "log ends at line N"). The matcher counts each chunk's lines; a last
    line without its newline is a line too."""
    for chunk in chunks:
        yield chunk  # the matcher is done with it when it asks for the next
        lines = chunk.lines if chunk.lines is not None else chunk.data.count(b"\n", 0, chunk.end)
        unended = chunk.end > 0 and chunk.data[chunk.end - 1] != 0x0A
        line_counts[name] = chunk.first_line + lines - 1 + unended
