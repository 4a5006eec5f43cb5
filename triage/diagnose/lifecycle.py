"""How a startup run ended, and which process failed first.

Fed a run's events in line order (the `role` fact rules of rules/lifecycle.yaml say what a
line means); summary() gives the run's outcome and its first failure. What it relies on,
from how vLLM prints (the shared lifecycle notes):

- A process's failure output is a *block*: it starts at vLLM's own failure line ("WorkerProc
  failed to start.", "EngineCore failed to start.", "Exception in worker ..."), at a raw
  traceback no logger printed (an uncaught exception, torch's `[rankN]:` excepthook), or at
  multiprocessing's "Process X:" line; it ends with the traceback's exception line. A
  traceback under a logger's header that no failure line opened is a handled error (a
  request refused, say) and no failure of the process.
- Some errors only pass another's on: "WorkerProc initialization failed ...", "Worker failed
  with error '...'", "Engine core initialization failed ..." (consequence rules). A block
  that ends in one is a consequence, and so is a process that died or was terminated.
- The first process to fail is the one whose block (not a consequence) starts first: by
  timestamp when every such block has a comparable one, else by line. Every EngineCore
  failure is printed twice (logged, then re-raised into "Process EngineCore_DP0:"): a
  process is counted once, at its first block. Each other process is a consequence, once.
- A process killed without a traceback (SIGKILL, the OOM killer, a segfault) says nothing
  itself: the line of another that reports its death ("Worker VllmWorkerProcess pid 7713
  died, exit code: -9", "Worker proc VllmWorker-1 died unexpectedly", "Failed core proc(s):
  {'EngineCore_DP0': -9}") stands for its failure, at that line, named as the line names it.
  It competes with the blocks for first: a process that died of its own traceback printed
  that traceback before its death was reported.
- Without either, the first consequence is all there is to point at (an NCCL watchdog
  time-out, a wrapper's "Engine core initialization failed").
- A traceback goes on past an exception line only after "During handling of the above
  exception ..." or Ray's RayTaskError(X), whose remote traceback ends in the error itself;
  any other traceback that follows is a block of its own (a re-raised copy, another process).
- A window may start inside a block (a paste): a process first seen at a frame or exception
  line opens a block there, which counts only beside other failure output (the tail of a
  request's handled error alone fails nothing). Times compare across forms (vLLM's, ISO,
  journald's); a raw line without one takes the last time printed before it.

Nothing here reads prose: failure, consequence and ready lines count only with a vLLM or
uvicorn header or a process tag; an exception line only inside a block.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from triage.model import Event, ProcessFailure, Record, RunSummary

# Roles of lines printed together by one process on one line number: handled in this order.
ROLE_ORDER = {"failure": 0, "traceback": 1, "exception": 2, "consequence": 3, "shutdown": 4, "ready": 5}
MAX_ERROR = 300  # characters of an error kept for the one-line summary
MAX_PROCESSES = 512  # processes tracked in one run (bounded memory on a hostile log)
MAX_BLOCKS = 8  # blocks kept per process: the first few are all the summary reads
FAILED_PROC = re.compile(r"'([\w-]+)': (-?\d+)")  # one process and its exit code in "Failed core proc(s): {...}"
CHAIN_GAP = 4  # "During handling of the above exception" this close after a block's exception continues it
VLLM_FRAME = "vllm/"  # in a frame's path: the traceback runs through vLLM's code
# Fact rules whose lines carry no vLLM header by nature (`vllm collect-env` output).
HEADERLESS_FACTS = {"collect-env"}
# The lines that state a summary figure, the best first.
WITNESSES = {
    "served_max_model_len": ("concurrency_tokens", "max_model_len"),
    "window_source": ("auto_fit_from", "sliding_window_cap", "draft_cap_from", "max_model_len_set", "max_model_len"),
}


@dataclass(slots=True)
class Block:
    """One process's failure output."""

    process: str | None
    line: int
    time: str | None
    error_line: int
    error: str
    last_line: int
    awaiting: bool = True  # its traceback is still printing: the next exception line is its error
    wrapper: bool = False  # it ends in (or is) an error that passes another's on
    raw: bool = False  # opened by an uncaught traceback or "Process X:", not by a logger
    message: str = ""  # the error without its class: what "same error" compares
    vllm: bool = False  # a frame of it is in vLLM's code
    carrier: bool = False  # opened by a consequence line: whatever its traceback ends in passes an error on
    quoted: str | None = None  # a wrapper's copy of the error it passes on ("Worker failed with error '...'")
    died: bool = False  # a death another process reported: the process left no traceback of its own
    partial: bool = False  # the window starts inside it: a failure only beside other failure output
    order_time: str | None = None  # its time, or the last one printed before it: what orders it, never shown


@dataclass(slots=True)
class Outcome:
    """How a run ended: ready, failed (the first failure and what followed from it) or unknown."""

    outcome: str  # "ready", "failed" or "unknown"
    outcome_line: int | None
    first_failure: ProcessFailure | None
    consequences: list[ProcessFailure]
    blocks: list[tuple[str | None, int, int]]  # (process, first line, last line) of every block, for findings


@dataclass(slots=True)
class Lifecycle:
    """The lifecycle lines of one run, per process: what the outcome and the failures are read from."""

    seen: set[str | None] = field(default_factory=set)  # processes that printed any recognised line
    blocks: dict[str | None, list[Block]] = field(default_factory=dict)  # process -> its blocks in order
    notes: dict[str | None, Block] = field(default_factory=dict)  # process -> its first consequence line
    deaths: list[Block] = field(default_factory=list)  # processes reported dead, each at the line that says so
    ready: Record | None = None
    alias: str | None = None  # the process untagged raw lines belong to, from the last "Process X:"
    latest: str | None = None  # the time on the last line that had one

    @property
    def active(self) -> bool:
        return bool(self.blocks or self.notes or self.ready)

    def add(self, event: Event) -> None:
        record, role = event.record, event.rule.role
        process = record.process or (tag(record) if record.rank else None)  # (most lines: no tag at all)
        key = self.alias if process is None and self.alias is not None else process  # (_key, inline: every event)
        seen = key in self.seen
        if not seen and len(self.seen) < MAX_PROCESSES:
            self.seen.add(key)
        if record.time:
            self.latest = record.time
        if role is None:  # (nearly every line: a figure of the server)
            return
        if role == "ready":
            if self.ready is None and printed_by_vllm(record):
                self.ready = record
        elif role == "failure":
            if printed_by_vllm(record):
                self._open(process, record, event.fields.get("failure") or event.excerpt)
        elif role == "traceback":
            self._traceback(event, process, seen)
        elif role == "exception":
            self._exception(event, process, seen)
        elif printed_by_vllm(record) or self._ends_block(process, record):
            self._consequence(event, process, role)

    def kept(self, record: Record) -> bool:
        """The line went into a process's failure output (it is the last line of one)."""
        block = self._current(self._key(tag(record)))
        return block is not None and block.last_line == record.line

    # --- blocks ----------------------------------------------------------------------

    def _key(self, process: str | None) -> str | None:
        """Untagged raw lines after "Process X:" are X's (0.33 prints the re-raise untagged)."""
        return self.alias if process is None and self.alias is not None else process

    def _current(self, key: str | None) -> Block | None:
        blocks = self.blocks.get(key)
        return blocks[-1] if blocks else None

    def _open(self, key: str | None, record: Record, text: str, raw: bool = False, carrier: bool = False) -> Block:
        block = Block(key, record.line, record.time, record.line, one_line(text), record.line, raw=raw,
                      wrapper=carrier, carrier=carrier)
        # a raw traceback has no time of its own: it was printed after the last line that had one
        block.order_time = record.time or self.latest
        block.message = block.error
        if key not in self.blocks and len(self.blocks) >= MAX_PROCESSES:
            return block  # not kept: bounded memory
        blocks = self.blocks.setdefault(key, [])
        if len(blocks) >= MAX_BLOCKS:
            blocks.pop()  # the newest stands for the rest: the summary reads the first few
        blocks.append(block)
        return block

    def _traceback(self, event: Event, process: str | None, seen: bool) -> None:
        record, fields = event.record, event.fields
        raw = record.level is None
        crashed = fields.get("crashed_process")
        if crashed:
            if raw:
                key = process
                if process is None:
                    key = self.alias = self._named(crashed)
                self._open(key, record, f"Process {crashed} crashed", raw=True)
            return
        key = self._key(process)
        block = self._current(key)
        if fields.get("chained"):  # "During handling of the above exception ...": the next traceback is this block's
            if block is not None and record.line - block.last_line <= CHAIN_GAP:
                block.awaiting, block.last_line = True, record.line
            return
        # A traceback that follows a finished one without the chaining line is another's: a raw
        # one after a logged one is the re-raised copy, an untagged one may be another process's.
        going_on = block is not None and block.awaiting
        if fields.get("traceback_header"):
            if going_on:
                block.awaiting, block.last_line = True, record.line  # type: ignore[union-attr]
            elif raw:  # an uncaught exception: the process dies of it
                if process is None:
                    self.alias = key = None
                self._open(key, record, "Traceback (most recent call last):", raw=True)
            elif not seen:  # the window starts between a failure line and its traceback
                self._open(key, record, "(its failure line is before this window)").partial = True
            return
        if going_on:
            block.last_line = record.line  # type: ignore[union-attr]
            block.vllm = block.vllm or VLLM_FRAME in fields.get("frame_path", "")  # type: ignore[union-attr]
        elif not seen:  # the window starts inside this process's traceback
            self._open(key, record, "(its traceback starts before this window)", raw=raw).partial = True

    def _exception(self, event: Event, process: str | None, seen: bool) -> None:
        if event.record.end_line != event.record.line:
            return  # a reading of several lines joined, maybe other processes' lines: an exception line is one line
        key = self._key(process)
        block = self._current(key)
        if block is None and not seen and printed_by_vllm(event.record):
            # the window starts on the last lines of this process's traceback
            block = self._open(key, event.record, "(its traceback starts before this window)")
            block.partial = True
        if block is None or not block.awaiting:
            return
        fields = event.fields
        block.error = one_line(f"{fields['exception']}: {fields['error']}")
        block.message = one_line(fields["error"])
        block.error_line = block.last_line = event.record.line
        # Ray's RayTaskError(X) is followed by the remote traceback: its last exception is the error
        block.awaiting = bool(fields.get("wrapped"))
        block.wrapper, block.quoted = block.carrier, None  # the last exception of a chain is the block's

    def _ends_block(self, process: str | None, record: Record) -> bool:
        block = self._current(self._key(process))
        return block is not None and block.error_line == record.line

    def _consequence(self, event: Event, process: str | None, role: str) -> None:
        record, fields = event.record, event.fields
        self._deaths(record, fields)
        key = self._key(process)
        block = self._current(key)
        if block is not None and block.error_line == record.line:
            if record.line != block.line or block.partial:
                block.wrapper = True  # the traceback ends in an error that passes another's on
                block.quoted = fields.get("worker_error")
            return
        text = fields.get("consequence") or fields.get("teardown") or event.excerpt
        if role == "consequence" and record.level is not None:
            # logged, maybe with a traceback below it (logger.exception): that traceback is the
            # consequence's, not a failure of this process
            self._open(key, record, event.excerpt, carrier=True).quoted = fields.get("worker_error")
            return
        if key not in self.notes and len(self.notes) < MAX_PROCESSES:
            note = Block(key, record.line, record.time, record.line, one_line(text), record.line, awaiting=False,
                         wrapper=True, carrier=True)
            note.message = note.error
            note.raw = role == "shutdown"  # a teardown line alone never fails a run
            self.notes[key] = note

    def _deaths(self, record: Record, fields: Mapping[str, Any]) -> None:
        """The processes this line reports dead: its dead_process (with its pid when the line
        gives one), or the killed ones of a "Failed core proc(s)" summary when every one of
        them was killed by a signal (a code 1 is a traceback's: that process failed first)."""
        text = one_line(str(fields.get("consequence") or ""))
        if fields.get("dead_process"):
            dead = [(str(fields["dead_process"]), fields.get("dead_pid"))]
        else:
            codes = FAILED_PROC.findall(str(fields.get("failed_procs") or ""))
            dead = [(name, None) for name, code in codes] if codes and all(int(c) < 0 for _, c in codes) else []
        for name, pid in dead:
            process = f"{name} pid={pid}" if pid else self._named(name)
            if len(self.deaths) >= MAX_PROCESSES or any(d.process == process for d in self.deaths):
                continue  # bounded; and a death reported twice (by the executor, then the frontend) is one
            death = Block(process, record.line, record.time, record.line, text or name, record.line,
                          awaiting=False, died=True)
            death.message = death.error
            self.deaths.append(death)

    def _named(self, crashed: str) -> str:
        """The tag of the process multiprocessing calls `crashed`: the re-raise copy of
        EngineCore's failure is untagged in 0.33 ("Process EngineCore:")."""
        for process in self.seen:
            if process is not None and process_name(process) == crashed:
                return process
        return crashed

    def copies(self) -> list[tuple[int, int]]:
        """The lines of blocks that repeat an earlier block of the same process (EngineCore's
        logged-then-re-raised failure): their errors are counted once, at the first."""
        repeated = []
        for blocks in self.blocks.values():
            for index, block in enumerate(blocks):
                if any(earlier.message == block.message for earlier in blocks[:index]):
                    repeated.append((block.line, block.last_line))
        return repeated

    # --- the summary -----------------------------------------------------------------

    def outcome(self) -> Outcome:
        # An untagged traceback without a frame in vLLM's code is another program's (a client, a
        # training script pasted with the log): no failure of this server.
        every = [block for blocks in self.blocks.values() for block in blocks
                 if block.process is not None or not block.raw or block.vllm]
        if all(block.partial for block in every) and all(note.raw for note in self.notes.values()):
            # only the tail of one traceback (a request's handled error, say): no failure shown
            every = []
        roots = [block for block in every if not block.wrapper and not reraised(block, every)] + self.deaths
        if not roots:
            roots = [block for block in every] + [n for n in self.notes.values() if not n.raw]
        root = first_to_fail(roots)
        ready_line = self.ready.line if self.ready is not None else None
        blocks = [(block.process, block.line, block.last_line) for block in every]
        if root is None:
            return Outcome("ready" if ready_line else "unknown", ready_line, None, [], blocks)
        stage = "runtime" if ready_line is not None and ready_line < root.line else "startup"
        first = failure_of(root, stage, False)
        consequences = self._consequences(root, stage)
        if stage == "runtime":
            return Outcome("ready", ready_line, first, consequences, blocks)
        return Outcome("failed", root.error_line, first, consequences, blocks)

    def _consequences(self, root: Block, stage: str) -> list[ProcessFailure]:
        """Each other process once, at its first block or line."""
        earliest: dict[str | None, Block] = {}
        for process, blocks in self.blocks.items():
            earliest[process] = blocks[0]
        for process, note in self.notes.items():
            if process not in earliest or note.line < earliest[process].line:
                earliest[process] = note
        earliest.pop(root.process, None)
        ordered = sorted(earliest.values(), key=lambda block: block.line)
        return [failure_of(block, stage, same_error(block, root)) for block in ordered]


def summarize(events: Iterable[Event]) -> Outcome:
    """The outcome of a run from its events (in line order): the pure form of Lifecycle."""
    lifecycle = Lifecycle()
    for event in sorted(events, key=lambda e: (e.record.line, ROLE_ORDER.get(e.rule.role or "", 9))):
        lifecycle.add(event)
    return lifecycle.outcome()


def reraised(block: Block, blocks: list[Block]) -> bool:
    """A raw traceback ending in an error another process logged: the error passed on (V0's
    engine process re-raises its worker's), however early its borrowed time looks."""
    return block.raw and any(
        not other.raw and other.process != block.process and other.message == block.message for other in blocks
    )


def first_to_fail(blocks: list[Block]) -> Block | None:
    """By timestamp when every block has one (vLLM's, a collector's: read alike), else by line."""
    if not blocks:
        return None
    times = [time_key(block.order_time or block.time) for block in blocks]
    if None in times:
        return min(blocks, key=lambda b: b.line)
    return min(zip(times, blocks, strict=True), key=lambda pair: (pair[0], pair[1].line))[1]


MONTHS = {name: f"{number:02d}" for number, name in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}
TIME_FORMS = (
    re.compile(r"(?P<month>\d\d)-(?P<day>\d\d) (?P<clock>\d\d:\d\d:\d\d)"),  # vLLM's "11-04 16:20:41"
    re.compile(r"\d{4}-(?P<month>\d\d)-(?P<day>\d\d)[T ](?P<clock>\d\d:\d\d:\d\d)"),  # ISO (docker, kubectl)
    re.compile(r"(?P<month>[A-Z][a-z]{2}) +(?P<day>\d{1,2}) (?P<clock>\d\d:\d\d:\d\d)"),  # journald "Nov 04 16:20:41"
)


def time_key(time: str | None) -> str | None:
    """'MM-DD HH:MM:SS' from any timestamp a line may carry: vLLM's own has no year and no
    fraction, so that is what compares (a tie goes by line)."""
    if not time:
        return None
    for form in TIME_FORMS:
        match = form.match(time)
        if match:
            month = MONTHS.get(match["month"], match["month"])
            return f"{month}-{int(match['day']):02d} {match['clock']}"
    return None


def failure_of(block: Block, stage: str, same: bool) -> ProcessFailure:
    return ProcessFailure(block.process, block.line, block.error_line, block.error, block.time, stage, same, block.died)


def same_error(block: Block, root: Block) -> bool:
    """The block repeats the root's error: the same message, or a wrapper that quotes it."""
    message = root.message
    return bool(message) and message in (block.message, block.quoted)


def tag(record: Record) -> str | None:
    """The process as its lines show it: the tag, torch's "[rankN]", or None (untagged)."""
    if record.process:
        return record.process
    if record.rank and record.rank.startswith("rank="):
        return f"[rank{record.rank[5:]}]"
    return None


def printed_by_vllm(record: Record) -> bool:
    """A vLLM or uvicorn header, or a process tag: not a sentence someone wrote about it."""
    return record.level is not None or record.process is not None or record.rank is not None


def process_name(process: str) -> str:
    """'EngineCore_DP0 pid=3117' -> 'EngineCore_DP0'."""
    return process.split(" pid=", 1)[0].strip()


def one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR else text[: MAX_ERROR - 1] + "…"


def summary_facts(facts: Mapping[str, Any]) -> dict[str, Any]:
    """The figures a run summary adds to the facts: the window served and where it came from."""
    served = facts.get("concurrency_tokens") or facts.get("max_model_len")
    if not served:
        return {}
    derived: dict[str, Any] = {"served_max_model_len": served}
    if facts.get("auto_fit_from"):
        derived["window_source"] = f"auto-fit from {facts['auto_fit_from']:,}"
    elif facts.get("sliding_window_cap"):
        derived["window_source"] = "the sliding window"
    elif facts.get("draft_cap_from"):
        derived["window_source"] = "the draft model"
    elif facts.get("max_model_len_set"):
        derived["window_source"] = "--max-model-len"
    elif facts.get("max_model_len_set") is False:
        derived["window_source"] = "config.json"
    return derived


def run_summary(
    source: str, number: int, lines: tuple[int, int], facts: Mapping[str, Any], fact_events: Mapping[str, Event],
    lifecycle: Lifecycle,
) -> RunSummary:
    """The summary of one run: its own vLLM lines' facts (each with its line), the served
    window and its source, the outcome and the first failure. A figure that only a line
    without vLLM's header stated (a sentence, a shell command) stays out; `vllm collect-env`
    prints none, so its lines count."""
    kept: dict[str, Any] = {}
    fact_lines: dict[str, int] = {}
    for name, value in facts.items():
        event = fact_events.get(name)
        line = getattr(facts, "lines", {}).get(name, (source, event.record.line if event else 0))[1]
        if event is not None and not (printed_by_vllm(event.record) or event.rule.name in HEADERLESS_FACTS):
            continue
        kept[name] = value
        fact_lines[name] = line
    for name, value in summary_facts(kept).items():
        kept[name] = value
        fact_lines[name] = next((fact_lines[w] for w in WITNESSES[name] if w in fact_lines), 0)
    ended = lifecycle.outcome()
    return RunSummary(
        source=source, number=number, first_line=lines[0], last_line=lines[1], facts=kept, fact_lines=fact_lines,
        outcome=ended.outcome, outcome_line=ended.outcome_line, first_failure=ended.first_failure,
        consequences=ended.consequences,
    )


# The names the checks over a run's first failure read (VT207, VT306 in rules/lifecycle.yaml).
FAILURE_NAMES = (
    "failed_at_startup", "failed_at_runtime", "root_recognised", "root_process", "root_line", "root_error_line",
    "root_error", "root_died", "consequences",
)


def failure_names(summary: RunSummary, recognised: bool) -> dict[str, Any] | None:
    """The run's first failure as the names its checks read; None when nothing failed.
    recognised: a rule's finding already points at the root error."""
    first = summary.first_failure
    if first is None:
        return None
    return {
        "failed_at_startup": int(first.stage == "startup"),
        "failed_at_runtime": int(first.stage == "runtime"),
        "root_recognised": int(recognised),
        "root_process": first.process or "The untagged main process",
        "root_line": first.line,
        "root_error_line": first.error_line,
        "root_error": first.error,
        "root_died": int(first.died),
        "consequences": len(summary.consequences),
    }
