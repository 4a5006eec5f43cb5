"""Values that travel between the stages: records, events, findings, a scan's result."""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from triage.diagnose.facts import Run
    from triage.diagnose.store import FindingStore

STAGES = ("request", "startup", "runtime", "config")
SEVERITIES = ("info", "warning", "error")


def severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity)


@dataclass(slots=True)
class Record:
    """One logical log message: prefixes stripped, escapes decoded, wrapped lines joined."""

    source: str
    line: int  # 1-based number of the first physical line
    end_line: int  # last physical line the message spans
    text: str
    level: str | None = None
    time: str | None = None
    process: str | None = None  # e.g. "EngineCore_DP0 pid=7"
    rank: str | None = None  # e.g. "TP1", "rank=1", "DP0"


@dataclass(slots=True)
class Event:
    """A rule matched a record: the numbers it yielded and the text it matched."""

    rule: Any  # triage.rules.ruleset.Rule (kept loose to avoid an import cycle)
    record: Record
    fields: dict[str, Any]
    # what a report quotes of it, or a function that gives that, made on first use: most
    # events (a metrics line's figures) are never quoted
    quoted: str | Callable[[], str]
    pattern_id: str
    hosted: bool = False
    also_at: list[int] = field(default_factory=list)  # lines that printed this same failure again

    @property
    def excerpt(self) -> str:
        if not isinstance(self.quoted, str):
            self.quoted = self.quoted()
        return self.quoted


@dataclass(slots=True)
class Finding:
    """A diagnosed problem as every report shows it: the rule, where it was seen, its numbers, cause and fixes."""

    code: str
    name: str
    title: str
    stage: str
    severity: str
    source: str
    line: int
    excerpt: str
    fields: dict[str, Any]
    derived: dict[str, Any]
    cause: list[str]
    fixes: list[str]
    process: str | None = None
    rank: str | None = None
    time: str | None = None
    count: int = 1
    last_line: int | None = None
    last_time: str | None = None
    hosted: bool = False
    references: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)  # what the log said elsewhere, as used here
    text: str | None = None  # the whole record, only with --show-text: it may quote a prompt
    run: int = 1  # which startup run of the log (1-based): facts never cross runs
    root: bool | None = None  # several ranks failed: True for the first, False for the others
    consequence_of: str | None = None  # for root False: "CODE at source:line (rank)" of the root
    also_at: list[int] = field(default_factory=list)  # lines that printed the same failure again (not counted)


OUTCOMES = ("ready", "failed", "unknown")


@dataclass(slots=True)
class ProcessFailure:
    """Where one process's failure shows in a run: the first process to fail, or a consequence."""

    process: str | None  # its tag as printed ("Worker_TP1 pid=9031", "[rank2]"); None: the untagged main process
    line: int  # where its failure output starts
    error_line: int  # its error: the exception line that ends its traceback, else the failure line itself
    error: str  # that error in one line
    time: str | None = None  # the timestamp of its first line, when it has one
    stage: str = "startup"  # "runtime" when it failed after the server was ready
    same_error: bool = False  # a consequence that repeats the first failure's error (another rank, a re-raise)
    died: bool = False  # reported dead by another process's line, with no traceback of its own (killed)


@dataclass(slots=True)
class RunSummary:
    """One startup run of one input, as its own vLLM lines state it (DESIGN.md, "runs")."""

    source: str
    number: int  # 1-based, in order of appearance in the input
    first_line: int  # the first and last line of the run that a rule recognised
    last_line: int
    facts: dict[str, Any] = field(default_factory=dict)  # name -> value
    fact_lines: dict[str, int] = field(default_factory=dict)  # name -> the line that stated it
    outcome: str = "unknown"  # OUTCOMES
    outcome_line: int | None = None  # the ready line, or the first failure's error line
    first_failure: ProcessFailure | None = None
    consequences: list[ProcessFailure] = field(default_factory=list)  # one per other process, in line order


@dataclass(slots=True)
class Check:
    """One of the gate's assertions as judged: passed or not, the figures it compared (a
    passed one's margin among them), at the line that states them."""

    code: str
    name: str
    passed: bool
    source: str
    line: int
    figures: dict[str, Any]


@dataclass(slots=True)
class ScanResult:
    """Everything one scan found, for the reports."""

    findings: list[Finding] | FindingStore  # a scan's are a store: read as they are used
    inputs: list[str]
    errors: list[str] = field(default_factory=list)  # inputs that could not be read, skipped rules
    rules: list[Any] = field(default_factory=list)  # every rule that was run (for SARIF, JUnit)
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)  # input name -> what its last run said
    skipped: list[str] = field(default_factory=list)  # inputs opened but not logs (binary): not scanned
    # input name -> its startup runs, in order (facts never cross runs); a run that ended
    # keeps its facts and where they were said, not its events
    runs: dict[str, list[Run]] = field(default_factory=dict)
    line_counts: dict[str, int] = field(default_factory=dict)  # input name -> its lines read (the last line's number)
    checks: list[Check] = field(default_factory=list)  # the gate's assertions, passed or failed (gate only)
