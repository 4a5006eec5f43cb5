"""From events to findings: the numbers worked out, the cause and the fixes rendered.

A pure function of the events, taken one startup run at a time (facts.py splits
the runs). Fact rules (capacity lines, the engine config line) tell the diagnosis
about the server; their numbers are available to every finding of the same run
under the same names. Then, per run:

- request rejections of one rule become one finding with the distribution of the
  requested lengths and the window that would have served 99% of them;
- other identical findings (same rule, process and numbers) become one with a count;
- `kind: check` rules are evaluated over the run's facts: on their own they make a
  finding (capacity), with `attach_to` they add their sentences to the findings of a
  stage (why the window is what it is);
- when several processes or ranks fail, the first to fail is the root and the others
  are its consequences.

Diagnoser takes events one at a time, so a live stream can print each finding as soon
as its line is read (with the facts seen so far); result() gives the whole picture. A
run's findings are final when the next run begins, so a scan works them out then and lets
the run's events go: memory does not grow with the restarts a log holds.
"""

from __future__ import annotations

import math
import operator
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from triage.rules.expr import Missing, render
from triage.diagnose.facts import DEFAULTS, Names, Run, RunSplitter, derive, line_totals
from triage.diagnose.requirements import Requirement, derived_when_met
from triage.plan.kvcache import GIB, bytes_for_tokens, round_up
from triage.rules.ruleset import Rule, Step
from triage.diagnose.store import FindingStore
from triage.diagnose.lifecycle import FAILURE_NAMES, Lifecycle, failure_names, run_summary
from triage.model import Event, Finding, RunSummary

__all__ = ["Diagnoser", "Diagnosis", "diagnose", "render_steps"]

# The cause's last sentence for a hosted API's error; its server-side fixes are not rendered.
HOSTED_NOTE = "The error came from a hosted API that words it as vLLM does, not from a vLLM server: only the request can change."
FAILURE_STAGES = ("startup", "runtime")  # where a rank's error stops the engine
# The last line of a Python traceback: the exception the client raised ("openai.BadRequestError: ...").
EXCEPTION_LINE = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception): ")
ECHO_LINES = 200  # a traceback that ends further below a logged error is another failure


@dataclass(slots=True)
class Diagnosis:
    """What a diagnosis made of one input: its findings, the last run's facts and every run."""

    findings: list[Finding] | FindingStore  # the sink, when the Diagnoser was given one
    facts: dict[str, Any] = field(default_factory=dict)  # the last run's facts
    runs: list[Run] = field(default_factory=list)


def diagnose(events: Iterable[Event], keep_text: bool = False, checks: Sequence[Rule] = ()) -> Diagnosis:
    """keep_text: findings carry their record's full text (--show-text); off, because
    vLLM's log lines can quote whole prompts. checks: the `kind: check` rules to evaluate."""
    diagnoser = Diagnoser(checks, keep_text)
    for event in events:
        diagnoser.add(event)
    return diagnoser.result()


class Diagnoser:
    def __init__(
        self, checks: Sequence[Rule] = (), keep_text: bool = False, fact_names: Iterable[str] | None = None,
        keep_runs: bool = True, sink: FindingStore | None = None,
    ):
        """fact_names: every name a fact rule can set (RuleSet.fact_names); with them, an event
        whose `require` fails on its own numbers alone is not kept (flat memory on big logs).
        keep_runs False: a run's events are let go as soon as the next run begins (its findings
        are worked out then: facts never cross runs); result().runs still lists every run, with
        its facts and where each was said.
        sink: where the findings of each run go once final (a FindingStore); result(), called
        once, adds the last run's and gives the sink as its findings."""
        self.checks = [rule for rule in checks if rule.kind == "check"]
        self.keep_text = keep_text
        self.splitter = RunSplitter(keep_runs)
        self._run = self.splitter.current
        self._sink = sink
        self._ended: list[Finding] | FindingStore = [] if sink is None else sink  # the findings of the runs that ended
        self._last_ended: Run | None = None  # the last run that ended with facts or problems
        self._kept: list[Run] = []  # the runs that ended with facts or problems
        self.fact_names = None if fact_names is None else {*fact_names, *DEFAULTS}
        self._requirements: dict[int, Requirement] = {}  # id(rule) -> what its require reads
        self._folded: dict[tuple, Folded] = {}  # group key -> the group's later events, as numbers
        self._group_by: dict[str, list[str] | None] = {}  # rule code -> its group_by, as seen
        self._totals: dict[str, dict[str, tuple[str, str]]] = {}  # rule code -> its totals, as seen
        # a refused request's printing, by what an echo of it shares: it, its last printing's line,
        # and whether that was an exception line (a further one echoes it only through a chain)
        self._logged: dict[tuple, tuple[Event, int, bool]] = {}
        self._chains: dict[tuple, int] = {}  # (source, process) -> the line of its last "direct cause" note

    @property
    def run(self) -> Run:
        """The run the last event went to."""
        return self._run

    def add(self, event: Event, render: bool = True) -> Finding | None:
        """Take the next event; a problem comes back as a finding rendered with the facts so far
        (render False: only taken, for a caller that prints nothing before the end)."""
        run = self.splitter.add(event)
        if run is not self._run:
            self._end(self._run)
            self._run = run
        rule = event.rule
        if rule.kind == "fact":
            if event.fields.get("chained"):  # an exception raised again from the one above it
                self._chains[(event.record.source, event.record.process)] = event.record.line
            return None
        if rule.stage == "request" and self._echoes(event):
            return None  # the same refusal again: listed on the first, not counted
        if rule.stage in FAILURE_STAGES and rule.severity == "error" and within(event.record.line, run.lifecycle.copies()):
            return None  # the re-raised copy of an error already counted: one failed start, once
        requirement = self._requirements.get(id(rule)) or self._requirement(rule)
        settled = requirement.settled(event.fields)
        if not requirement.holds(event.fields, run.facts):
            if not settled:  # a later fact of the run may make it hold
                run.problems.append(event)
            return None  # settled: no later fact can change the answer, never a finding
        if not (settled and self._fold(run, event)):
            run.problems.append(event)
            if not self.keep_text:
                # kept until the end: the record's text (maybe a whole prompt) is not needed any more,
                # nor the function that makes the excerpt from it (it holds the text)
                event.quoted = event.excerpt
                event.record = replace(event.record, text="")
        return to_finding(event, run.facts, self.keep_text, run.number) if render else None

    def _echoes(self, event: Event) -> bool:
        """The same refused request printed again: a client that logs a refusal and then dies
        of it prints the log line, then its traceback's last line; a client library that maps
        the error raises it again from the first (an exception chain: LiteLLM's mapped error,
        LangChain's wrapper around openai's). An exception line with the same numbers, soon
        after the logged one, or after a chain's "direct cause" note that follows the last
        printing, is that request; a second exception line of its own is another."""
        record = event.record
        key = (self._run.number, event.rule.code, record.source, record.process, event.hosted,
               tuple(sorted(event.fields.items())))
        if len(self._logged) >= 256:  # only the last few hundred lines' can still be echoed
            self._logged = {k: e for k, e in self._logged.items() if record.line - e[1] <= ECHO_LINES}
        earlier = self._logged.get(key)
        exception = EXCEPTION_LINE.match(record.text) is not None
        if exception and earlier is not None and record.line - earlier[1] <= ECHO_LINES:
            first, last, raised = earlier
            chained = self._chains.get((record.source, record.process), 0)
            if not raised or last < chained < record.line:
                first.also_at.append(record.line)
                self._logged[key] = (first, record.end_line, True)
                return True
        self._logged[key] = (event, record.end_line, exception)
        return False

    def _requirement(self, rule: Rule) -> Requirement:
        requirement = self._requirements.get(id(rule))
        if requirement is None:
            requirement = self._requirements[id(rule)] = Requirement.of(rule, self.fact_names)
        return requirement

    def _fold(self, run: Run, event: Event) -> bool:
        """A finding for sure: the first of its group is kept by the run, the others only count
        (and give their requested length), so a million rejections take a few numbers.
        True when the event was folded into its group's numbers (not to be kept)."""
        self._group_by[event.rule.code] = event.rule.group_by
        self._totals[event.rule.code] = event.rule.totals
        key = group_key(run.number, event.rule.code, event.record.source, event.record.process,
                        grouping(event.fields, event.rule.group_by), event.hosted, event.rule.stage)
        folded = self._folded.get(key)
        if folded is None:
            self._folded[key] = Folded()
            return False
        folded.add(event)
        return True

    def _end(self, run: Run) -> None:
        """The next run began: this one's findings are final, its events not needed any more."""
        if run.active:
            self._ended.extend(self._run_findings(run))
            self._last_ended = run
            if not self.splitter.keep_runs:
                run.problems = []  # they are findings now: the run keeps its facts alone
                run.lifecycle = Lifecycle()  # and its summary
            self._kept.append(run)
        self._folded.clear()  # the groups of the run that ended: the next run has none yet
        self._logged.clear()
        self._chains.clear()

    def result(self) -> Diagnosis:
        findings = list(self._ended) if self._sink is None else self._sink
        runs, last = list(self._kept), self._last_ended
        if self._run.active:
            findings.extend(self._run_findings(self._run))
            last = self._run
            runs.append(self._run)
        return Diagnosis(findings, last.facts.copy() if last else {}, runs)  # copy(): with the facts' lines

    def _run_findings(self, run: Run) -> list[Finding]:
        run.summary = run_summary(run.source, run.number, (run.first_line, run.last_line), run.facts,
                                  run.fact_events, run.lifecycle)
        copies = run.lifecycle.copies()
        problems = [
            e for e in run.problems
            if self._requirement(e.rule).holds(e.fields, run.facts) and not within(e.record.line, copies)
        ]
        self._group_by.update((e.rule.code, e.rule.group_by) for e in problems)
        self._totals.update((e.rule.code, e.rule.totals) for e in problems)
        findings = aggregate(
            [to_finding(e, run.facts, self.keep_text, run.number) for e in problems], self._folded, self._group_by,
            self._totals,
        )
        rules = {e.rule.code: e.rule for e in problems}
        for finding in findings:
            rule = rules[finding.code]
            if rule.totals and finding.count > 1:
                # its numbers and words again, over the totals of every line it stands for
                totals = {name: finding.derived[name] for name in rule.totals if name in finding.derived}
                names = Names({**DEFAULTS, **run.facts, **finding.fields, "count": finding.count,
                               "source": finding.source})
                finding.derived.update(derive(rule, names, totals))
                finding.cause, finding.fixes = rendered_words(rule, names, finding.hosted)
            if "requested_p99" in finding.derived:
                window = finding.fields.get("max_model_len")
                finding.derived.update(sizing(finding.derived["requested_p99"], {**DEFAULTS, **run.facts}, window))
                # its words again, now that they can speak of all the run's rejections (`rejected`)
                names = Names({**DEFAULTS, **run.facts, **finding.fields, **finding.derived, "source": finding.source})
                finding.cause, finding.fixes = rendered_words(rules[finding.code], names, finding.hosted)
        for rule in self.checks:
            if rule.attach_to is not None:
                for finding in findings:
                    if finding.stage == rule.attach_to:
                        attach(rule, finding, run.facts)
        rejected = sum(f.count for f in findings if f.stage == "request")
        findings.extend(run_checks([r for r in self.checks if r.attach_to is None], run, {"rejected": rejected}))
        findings.extend(failure_findings(self.checks, run.summary, findings))
        mark_roots(findings)
        return findings


def within(line: int, spans: Sequence[tuple[int, int]]) -> bool:
    return any(first <= line <= last for first, last in spans)


def to_finding(event: Event, facts: Mapping[str, Any], keep_text: bool = False, run: int = 1) -> Finding:
    """An event's finding: its line, its own numbers and those derived over them and the facts."""
    rule: Rule = event.rule
    names = Names({"count": 1, **DEFAULTS, **facts, **event.fields, "source": event.record.source})
    derived = derive(rule, names)  # into names too, before the words that read them
    record = event.record
    finding = rule_finding(
        rule, names, event.hosted, source=record.source, line=record.line, excerpt=event.excerpt,
        fields=dict(event.fields), derived=derived, process=record.process, rank=record.rank,
        time=record.time, text=record.text if keep_text else None, run=run, also_at=event.also_at,
    )
    finding.facts = _facts_used(names, facts, event.fields)  # after rendering: the words read facts too
    return finding


def rule_finding(rule: Rule, names: Mapping[str, Any], hosted: bool = False, **where: Any) -> Finding:
    """A rule's finding: its identity, references and words over these names; `where` gives
    the place and numbers. The one builder: of an event's finding, a run check's, a failure
    check's and a gate assertion's."""
    cause, fixes = rendered_words(rule, names, hosted)
    return Finding(code=rule.code, name=rule.name, title=rule.title, stage=rule.stage, severity=rule.severity,
                   cause=cause, fixes=fixes, hosted=hosted, references=list(rule.references), **where)


def rendered_words(rule: Rule, names: Mapping[str, Any], hosted: bool) -> tuple[list[str], list[str]]:
    """A rule's cause and fixes over these names; a hosted API's error says where it came from."""
    cause = render_steps(rule.cause, names, hosted=hosted)
    if hosted:
        cause.append(HOSTED_NOTE)
    return cause, render_steps(rule.fixes, names, hosted=hosted)


def render_steps(steps: list[Step], names: Mapping[str, Any], hosted: bool = False) -> list[str]:
    rendered = []
    for step in steps:
        if hosted and step.server:
            continue
        try:
            if step.when is not None and not step.when.evaluate(names):
                continue
            rendered.append(render(step.text, names))
        except Missing:
            continue
    return rendered


def _facts_used(names: Names, facts: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    return {k: facts[k] for k in sorted(names.used) if k in facts and k not in own}


# --- aggregation -------------------------------------------------------------------------


def group_key(run: int, code: str, source: str, process: str | None, fields: Mapping[str, Any],
              hosted: bool, stage: str) -> tuple:
    """Findings with the same key become one."""
    if stage == "request" and requested_length(fields) is not None:
        return ("rejections", run, code, source, hosted)
    return (run, code, source, process, tuple(sorted(fields.items())), hosted)


@dataclass(slots=True)
class Folded:
    """The later events of a group, as numbers: how many, the last, the rejection figures' inputs."""

    count: int = 0
    last_line: int = 0
    last_time: str | None = None
    stats: RejectionStats = field(default_factory=lambda: RejectionStats())
    totals: dict[str, Any] = field(default_factory=dict)  # the rule's totals over these events

    def add(self, event: Event) -> None:
        self.count += 1
        self.last_line, self.last_time = event.record.line, event.record.time
        self.stats.add(event.fields)
        if event.rule.totals:
            add_totals(event.rule.totals, self.totals, line_totals(event.rule, event.fields))


COMBINE: dict[str, Callable[[Any, Any], Any]] = {"sum": operator.add, "max": max, "min": min, "count": operator.add}


def add_totals(spec: Mapping[str, tuple[str, str]], into: dict[str, Any], more: Mapping[str, Any]) -> None:
    """Totals of more lines into `into`: each by its own way (sum, max, min), whatever the order."""
    for name, (how, _) in spec.items():
        if name in more:
            into[name] = more[name] if name not in into else COMBINE[how](into[name], more[name])


def grouping(fields: Mapping[str, Any], group_by: list[str] | None) -> Mapping[str, Any]:
    """The fields that tell findings of a rule apart (the rule's group_by; default all)."""
    return fields if group_by is None else {name: fields.get(name) for name in group_by}


def aggregate(
    findings: list[Finding], folded: Mapping[tuple, Folded] | None = None,
    group_by: Mapping[str, list[str] | None] | None = None,
    totals: Mapping[str, Mapping[str, tuple[str, str]]] | None = None,
) -> list[Finding]:
    """Request rejections of one rule become one finding with their length distribution;
    other identical findings (same rule, process and grouping fields) become one with a count
    and the rule's totals over them all.
    folded: the events Diagnoser counted without keeping them, by group key."""
    group_by, totals = group_by or {}, totals or {}
    merged: dict[tuple, list[Finding]] = {}
    for finding in findings:
        key = group_key(finding.run, finding.code, finding.source, finding.process,
                        grouping(finding.fields, group_by.get(finding.code)), finding.hosted, finding.stage)
        merged.setdefault(key, []).append(finding)
    folded = folded or {}
    return [_merge(key[0] == "rejections", group, folded.get(key), totals.get(group[0].code))
            for key, group in merged.items()]


def _merge(rejections: bool, group: list[Finding], folded: Folded | None = None,
           totals: Mapping[str, tuple[str, str]] | None = None) -> Finding:
    first, last = group[0], group[-1]
    if len(group) == 1 and not (folded and folded.count):
        return first
    if totals:  # each finding's derived numbers hold its own totals
        for finding in group[1:]:
            add_totals(totals, first.derived, finding.derived)
        if folded:
            add_totals(totals, first.derived, folded.totals)
    first.count = sum(f.count for f in group)
    first.also_at = [line for f in group for line in f.also_at]
    first.last_line = last.last_line or last.line
    first.last_time = last.last_time or last.time
    if folded and folded.count:
        first.count += folded.count
        if folded.last_line > first.last_line:  # lines of one source only grow
            first.last_line, first.last_time = folded.last_line, folded.last_time
    if rejections:
        stats = RejectionStats()
        for finding in group:
            stats.add(finding.fields)
        if folded:
            stats.merge(folded.stats)
        first.derived.update(stats.figures())
    return first


def requested_length(fields: Mapping[str, Any]) -> int | None:
    """Tokens a rejected request asked for: the total the error prints, else prompt plus
    max_tokens, else prompt + 1 (the prompt alone was refused: one output token more), else
    max_tokens alone (the error printed no prompt)."""
    if fields.get("requested") is not None:
        return int(fields["requested"])
    prompt, completion = fields.get("prompt_tokens"), fields.get("completion_tokens")
    if prompt is not None and completion is not None:
        return int(prompt + completion)
    if prompt is not None:
        return int(prompt) + 1
    if completion is not None:
        return int(completion)
    return None


def percentile(values: Sequence[int], percent: float) -> int:
    """Nearest-rank percentile: the smallest value with at least `percent`% of the values at
    or below it, i.e. sorted(values)[ceil(percent / 100 * n) - 1] (the minimum for 0)."""
    return counted_percentile(Counter(values), percent)


def rejection_figures(rejections: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The distribution of requested lengths and how many a smaller max_tokens would have saved."""
    stats = RejectionStats()
    for fields in rejections:
        stats.add(fields)
    return stats.figures()


@dataclass(slots=True)
class RejectionStats:
    """What rejection_figures needs, in memory that does not grow with the rejections:
    the requested lengths as a count per length (exact percentiles all the same)."""

    rejected: int = 0
    lengths: Counter = field(default_factory=Counter)
    prompt_over: int = 0
    fit_smaller: int = 0

    def add(self, fields: Mapping[str, Any]) -> None:
        self.rejected += 1
        length = requested_length(fields)
        if length is not None:
            self.lengths[length] += 1
        prompt, window = fields.get("prompt_tokens"), fields.get("max_model_len")
        if prompt is None or window is None:
            return
        if prompt >= window:
            self.prompt_over += 1
        elif fields.get("completion_tokens") is not None or fields.get("requested") is not None:
            self.fit_smaller += 1

    def merge(self, other: RejectionStats) -> None:
        self.rejected += other.rejected
        self.lengths.update(other.lengths)
        self.prompt_over += other.prompt_over
        self.fit_smaller += other.fit_smaller

    def figures(self) -> dict[str, Any]:
        return {
            "rejected": self.rejected,
            "requested_p50": counted_percentile(self.lengths, 50),
            "requested_p90": counted_percentile(self.lengths, 90),
            "requested_p99": counted_percentile(self.lengths, 99),
            "requested_max": max(self.lengths),
            "prompt_over_window": self.prompt_over,
            "fit_with_smaller_max_tokens": self.fit_smaller,
            **({"requested_histogram": histogram(self.lengths)} if len(self.lengths) > 1 else {}),
        }


HISTOGRAM_BINS = 8


def histogram(counts: Mapping[int, int], bins: int = HISTOGRAM_BINS) -> list[list[int]]:
    """Requested lengths in equal bins from the shortest to the longest, as [low, high,
    how many] with both ends inclusive: what the report draws, so it never sorts lengths."""
    low, high = min(counts), max(counts)
    width = max(1, math.ceil((high - low + 1) / bins))
    tally = [0] * math.ceil((high - low + 1) / width)
    for length, count in counts.items():
        tally[(length - low) // width] += count
    return [[low + i * width, min(high, low + (i + 1) * width - 1), count] for i, count in enumerate(tally)]


def counted_percentile(counts: Mapping[int, int], percent: float) -> int:
    """percentile() over values given as value -> how many times (what RejectionStats keeps)."""
    total = sum(counts.values())
    if not total:
        raise ValueError("percentile of no values")
    rank = max(1, math.ceil(percent / 100 * total))
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        if seen >= rank:
            return value
    raise AssertionError("unreachable")


def sizing(p99: int, facts: Mapping[str, Any], max_model_len: int | None) -> dict[str, Any]:
    """The window that serves the 99th percentile, and what it costs in this run's KV cache."""
    block_size = int(facts.get("block_size") or DEFAULTS["block_size"])
    recommended = round_up(p99, block_size)
    figures: dict[str, Any] = {"recommended_max_model_len": recommended}
    bytes_per_token, kv_tokens = facts.get("bytes_per_token"), facts.get("kv_tokens")
    if bytes_per_token:
        figures["recommended_kv_gib"] = round(bytes_for_tokens(recommended, bytes_per_token, block_size) / GIB, 2)
    if kv_tokens:
        figures["recommended_concurrency"] = round(kv_tokens / recommended, 2)
        if max_model_len:
            figures["current_concurrency"] = round(kv_tokens / max_model_len, 2)
    return figures


# --- checks ------------------------------------------------------------------------------


def attach(rule: Rule, finding: Finding, facts: Mapping[str, Any]) -> None:
    """Add an attached check's sentences to a finding: causes after its own, fixes first."""
    names = Names({**DEFAULTS, **facts, **finding.fields, **finding.derived})
    derived = derived_when_met(rule, names)
    if derived is None:
        return
    cause = render_steps(rule.cause, names, hosted=finding.hosted)
    fixes = render_steps(rule.fixes, names, hosted=finding.hosted)
    if not cause and not fixes:
        return
    finding.cause.extend(cause)
    finding.fixes[:0] = fixes
    finding.derived.update(derived)
    finding.facts.update(_facts_used(names, facts, finding.fields))


def run_checks(rules: Sequence[Rule], run: Run, figures: Mapping[str, Any]) -> list[Finding]:
    findings = []
    for rule in rules:
        names = Names({**DEFAULTS, **run.facts, **figures})
        derived = derived_when_met(rule, names)
        if derived is None:
            continue
        used = _facts_used(names, run.facts, {})
        sources = [run.fact_events[k] for k in used if k in run.fact_events]
        where = max(sources, key=lambda e: e.record.line) if sources else None
        findings.append(rule_finding(
            rule, names,
            source=where.record.source if where else "", line=where.record.line if where else 0,
            excerpt=where.excerpt if where else "", fields={}, derived=derived,
            process=where.record.process if where else None, rank=where.record.rank if where else None,
            time=where.record.time if where else None, facts=used, run=run.number,
        ))
    return findings


def failure_findings(checks: Sequence[Rule], summary: RunSummary | None, findings: list[Finding]) -> list[Finding]:
    """The checks over a run's first failure (VT207, VT306), at its root error line: only when
    no finding of a rule already lies on the root's failure output."""
    first = summary.first_failure if summary is not None else None
    if first is None:
        return []
    recognised = any(f.severity == "error" for f in findings)  # a rule already explains the failed run
    names = Names(failure_names(summary, recognised) or {})  # type: ignore[arg-type]
    made = []
    for rule in checks:
        if rule.attach_to is not None or rule.require is None or not rule.require.names & set(FAILURE_NAMES):
            continue
        derived = derived_when_met(rule, names)
        if derived is None:
            continue
        made.append(rule_finding(
            rule, names,
            source=summary.source, line=first.error_line, excerpt=first.error, fields={}, derived=derived,  # type: ignore[union-attr]
            process=first.process, time=first.time, run=summary.number,  # type: ignore[union-attr]
        ))
    return made


# --- ranks -------------------------------------------------------------------------------


def mark_roots(findings: list[Finding]) -> None:
    """When errors come from several processes or ranks, the first to fail is the root
    (by timestamp when all carry one, else by line) and the others are its consequences."""
    failed = [f for f in findings if f.severity == "error" and f.stage in FAILURE_STAGES and (f.rank or f.process)]
    if len({f.rank or f.process for f in failed}) < 2:
        return
    timed = all(f.time for f in failed) and len({len(f.time or "") for f in failed}) == 1
    failed.sort(key=(lambda f: (f.time, f.line)) if timed else (lambda f: f.line))
    root = failed[0]
    root.root = True
    label = f"{root.code} at {root.source}:{root.line} ({root.rank or root.process})"
    for finding in failed[1:]:
        finding.root = False
        finding.consequence_of = label
