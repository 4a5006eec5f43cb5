"""What a log says about the server, one startup run at a time.

A log may hold several runs: the server restarted, or several logs pasted one after
another. Each run gets its own facts (version, window, KV capacity ...) from the
`kind: fact` rules, and its own problems; nothing crosses from one run to the next.

A run starts at a startup marker: the version banner, the `non-default args` line or
the engine config line, which a startup prints in that order. One startup prints
several of them, so a marker opens a new run only when the current run cannot be
the same startup any more: it already had problems before any marker (those were the
tail of an earlier server), the marker comes earlier in startup order than one the
run has already seen, or the same process already printed this marker in this run
(but not when it repeats the last marker word for word: ranks that share a tag, or none,
each print it).
Data-parallel engines each print the engine config line; their process names differ,
so they stay in one run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from triage.diagnose.lifecycle import Lifecycle, printed_by_vllm
from triage.plan import gpus
from triage.rules.expr import Expression, Missing
from triage.plan.kvcache import DEFAULT_BLOCK_SIZE
from triage.rules.ruleset import ENGINE_CONFIG, NON_DEFAULT_ARGS, SERVER_VERSION, Rule
from triage.model import Event, RunSummary

DEFAULTS: dict[str, Any] = {"block_size": DEFAULT_BLOCK_SIZE}
# Rule names of the startup markers, in the order one startup prints them.
RUN_MARKERS = {SERVER_VERSION: 0, NON_DEFAULT_ARGS: 1, ENGINE_CONFIG: 2}
PID = re.compile(r"\s*\bpid=\d+,?")
# Set with total_gib when the GPU table gave it (the log named the card, not its memory);
# a line that prints the card's memory replaces both.
TOTAL_FROM = "total_gib_from"


class _Absent:
    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


ABSENT = _Absent()


class Facts(dict):
    """A run's facts by name, and where each got the value it holds: `lines[name]` is
    (source, line). A later line that repeats the value does not move it, so the first
    metrics line stays the one that set kv_usage_at_start_pct. `gate` points its findings
    there. copy() keeps the lines (dict() would drop them)."""

    __slots__ = ("lines",)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.lines: dict[str, tuple[str, int]] = {}

    def copy(self) -> Facts:
        copied = Facts(self)
        copied.lines = dict(self.lines)
        return copied

    def set(self, values: Mapping[str, Any], source: str, line: int) -> None:
        for name, value in values.items():
            if self.get(name, ABSENT) != value:  # ABSENT equals nothing: a new name moves too
                self.lines[name] = (source, line)
            self[name] = value

    def drop(self, *names: str) -> None:
        for name in names:
            self.pop(name, None)
            self.lines.pop(name, None)


@dataclass(slots=True)
class Run:
    """One start of the server in a log: the facts its lines printed and the problems found in it."""

    number: int  # 1-based, in order of appearance
    facts: Facts = field(default_factory=Facts)
    fact_events: dict[str, Event] = field(default_factory=dict)  # fact name -> the line that last printed it
    problems: list[Event] = field(default_factory=list)
    markers: dict[str, set[str | None]] = field(default_factory=dict)  # marker -> processes that printed it
    marker_texts: dict[str, tuple[str | None, str]] = field(default_factory=dict)  # marker -> (process with its pid, text) last printed
    last_marker_order: int = -1
    gpu_names: set[str] = field(default_factory=set)  # the cards `vllm collect-env` listed
    lifecycle: Lifecycle = field(default_factory=Lifecycle)  # how the run ended (its `role` lines)
    summary: RunSummary | None = None  # worked out when the run ends: what reports show of it
    source: str = ""
    first_line: int = 0  # the first and last line of a recognised event
    last_line: int = 0
    # fact name -> (process, rank) -> the event each rank last printed it in (a rule's across_ranks)
    rank_events: dict[str, dict[tuple[str | None, str | None], Event]] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        """The run said anything: facts, problems, or how it ended."""
        return bool(self.problems or self.facts or self.lifecycle.active)

    def took(self, event: Event) -> None:
        record = event.record
        self.lifecycle.add(event)
        if event.rule.role is not None and not printed_by_vllm(record) and not self.lifecycle.kept(record):
            return  # a sentence about a failure, not a raw traceback's line: no line of the run
        if not self.first_line:
            self.first_line, self.source = record.line, record.source
        last = record.end_line if record.end_line > record.line else record.line
        if last > self.last_line:  # (max() of three costs a call on every line of figures)
            self.last_line = last

    def add_fact(self, event: Event, inputs: tuple[str, ...] | None = None) -> None:
        """inputs: derived_inputs(event.rule), when the caller keeps it per rule."""
        fields, facts, fact_events = event.fields, self.facts, self.fact_events
        source, line = event.record.source, event.record.line
        if "total_gib" in fields:
            facts.drop(TOTAL_FROM)  # the log's own figure, not the table's
        rule = event.rule
        if rule.across_ranks:
            witnesses = self._across_ranks(event)
            facts.set({k: v for k, v in fields.items() if k not in witnesses}, source, line)
            for name, witness in witnesses.items():
                facts.set({name: witness.fields[name]}, witness.record.source, witness.record.line)
            for name in fields:
                fact_events[name] = witnesses.get(name, event)
        else:
            facts.set(fields, source, line)
            for name in fields:
                fact_events[name] = event  # the newest line, not a copy: only its place is cited
        if rule.derived:
            inputs = derived_inputs(rule) if inputs is None else inputs
            derived = derive(rule, {name: facts.get(name, DEFAULTS.get(name)) for name in inputs})
            facts.set(derived, source, line)
            for name in derived:
                fact_events[name] = event
        if "gpu_name" in fields:
            self.gpu_names.add(fields["gpu_name"])
            self._total_from_gpu_table(source, line)

    def _across_ranks(self, event: Event) -> dict[str, Event]:
        """The line that gives each of the rule's across_ranks fields its value: of the ranks
        that printed it so far (each with its last line), the smallest or largest. A rank is
        its process tag with its pid (Ray's workers differ by pid only; a run is one startup)
        and its rank tag."""
        rank = (event.record.process, event.record.rank)
        witnesses: dict[str, Event] = {}
        for name, how in event.rule.across_ranks.items():
            if name in event.fields:
                printed = self.rank_events.setdefault(name, {})
                printed[rank] = event
                ranks = list(printed.values())
                values = [e.fields[name] for e in ranks]
                best = min(values) if how == "min" else max(values)
                witnesses[name] = ranks[values.index(best)]  # of ranks alike, the first to print it
        return witnesses

    def _total_from_gpu_table(self, source: str, line: int) -> None:
        """V1 fails before it prints the card's memory; the GPU the log names gives it, so the
        utilization that would fit can still be worked out. Only for one kind of card."""
        if "total_gib" in self.facts and TOTAL_FROM not in self.facts:
            return  # a line printed it
        gpu = known_gpu(self.gpu_names)
        if gpu is None:
            self.facts.drop("total_gib", TOTAL_FROM)
            return
        total = {"total_gib": round(gpu.memory_mib / 1024, 2), TOTAL_FROM: f"GPU table: {gpu.name}, {gpu.memory_mib} MiB"}
        self.facts.set(total, source, line)


class RunSplitter:
    """Events in log order in, each given its run: a fact is added to the run's facts; a
    problem is not kept here, the diagnosis decides (once) whether the run keeps it."""

    def __init__(self, keep_runs: bool = True) -> None:
        """keep_runs False: `runs` holds only the current run; one that ended is the caller's
        to finish and let go (memory that does not grow with the restarts a log holds)."""
        self.current = Run(1)
        self.runs = [self.current]
        self.keep_runs = keep_runs
        self._inputs: dict[int, tuple[str, ...]] = {}  # id(rule) -> derived_inputs(rule)

    def add(self, event: Event) -> Run:
        marker = RUN_MARKERS.get(event.rule.name) if event.rule.kind == "fact" else None
        if marker is not None:
            if self._starts_new_run(event, marker):
                self.current = Run(self.current.number + 1)
                if not self.keep_runs:
                    self.runs.clear()
                self.runs.append(self.current)
            run = self.current
            run.markers.setdefault(event.rule.name, set()).add(process_name(event.record.process))
            run.marker_texts[event.rule.name] = (event.record.process, event.record.text)
            run.last_marker_order = max(run.last_marker_order, marker)
        run = self.current
        run.took(event)
        if event.rule.role not in (None, "ready"):
            return run  # a lifecycle line: how the run ends, no figure of the server
        if event.rule.kind == "fact":
            inputs = self._inputs.get(id(event.rule))
            if inputs is None:
                inputs = self._inputs[id(event.rule)] = derived_inputs(event.rule)
            run.add_fact(event, inputs)
        return run  # a problem: the caller decides whether the run keeps it (Diagnoser.add)

    def _starts_new_run(self, event: Event, marker: int) -> bool:
        run = self.current
        if run.last_marker_order < 0:
            return bool(run.problems) or run.lifecycle.active  # the tail of an earlier server
        if marker < run.last_marker_order:
            return True
        if marker == run.last_marker_order and run.marker_texts.get(event.rule.name) == (event.record.process, event.record.text):
            return False  # each rank printing the same line under the same tag (torchrun's, untagged): one startup
        return process_name(event.record.process) in run.markers.get(event.rule.name, ())


def known_gpu(names: set[str]) -> gpus.Gpu | None:
    """The table's entry when every listed card is the same known GPU."""
    if len(names) != 1:
        return None
    try:
        return gpus.find(next(iter(names)))
    except gpus.UnknownGpu:
        return None


def process_name(process: str | None) -> str | None:
    """'EngineCore_DP0 pid=3117' -> 'EngineCore_DP0': the same role across restarts."""
    return PID.sub("", process).strip() if process else None


def derived_inputs(rule: Rule) -> tuple[str, ...]:
    """Every name the rule's derived numbers read (derived ones too: an earlier value may
    stand when one cannot be worked out). derive() over just these names gives what it
    gives over all of them, without copying a run's facts for each line."""
    return tuple(sorted({name for expression in rule.derived.values() for name in expression.names}))


def derive(rule: Rule, names: dict[str, Any], totals: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Evaluate the rule's derived numbers in order; one that lacks an input is left out.
    The rule's totals come first: these (over the lines a finding stands for), else one
    line's, its fields' own values."""
    if totals is None:
        if not rule.totals:
            return derive_these(rule.derived.items(), names)
        totals = line_totals(rule, names)
    names.update(totals)
    return {**totals, **derive_these(rule.derived.items(), names)}


def line_totals(rule: Rule, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The rule's totals over one line: each is its field's value (a count: 1, the line printed it)."""
    return {name: 1 if how == "count" else fields[source] for name, (how, source) in rule.totals.items()
            if fields.get(source) is not None}


def derive_these(expressions: Iterable[tuple[str, Expression]], names: dict[str, Any]) -> dict[str, Any]:
    """derive() over some of a rule's derived numbers (name, expression), in the rule's order."""
    derived: dict[str, Any] = {}
    for name, expression in expressions:
        try:
            value = expression.evaluate(names)
        except Missing:
            continue
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            value = int(value)
        derived[name] = value
        names[name] = value
    return derived


class Names(dict):
    """The names a template may use; remembers which were read, to cite the facts used."""

    def __init__(self, *args: Any):
        super().__init__(*args)
        self.used: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        return super().get(key, default)
