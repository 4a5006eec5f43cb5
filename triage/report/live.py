"""Findings printed while the input is still arriving, and what the final report then adds.

One scan gives one report. A stream that is still running (`--follow`, `--tee`, a server
piped in) prints each finding as soon as it is complete; at the end the report adds only
what changed since (a count, a finding that needed the end of the run) and the summary
line. A finished file or paste piped in prints nothing early: the held findings go out
only if the pipe goes quiet while it stays open, so one `cat log | vllm-triage scan` gives
one report.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from triage.model import Finding
from triage.report import ScanResult, ordered, summary_line

ADDED_HEADING = "== what the end of the input added =="


def finding_key(finding: Finding) -> tuple:
    return finding.source, finding.code, finding.line


class LiveReport:
    """on_finding for a scan: prints (or holds, until release()) each finding as it is found,
    and remembers what it printed so rest() can leave it out of the final report."""

    def __init__(self, format_name: str, out: Callable[[str], None], hold: bool = False,
                 redact: bool = False):
        self.jsonl = format_name == "jsonl"
        self.out, self.hold, self.redact = out, hold, redact
        self.held: list[Finding] = []
        self.printed: dict[tuple, str] = {}  # finding key -> the text printed for it

    def __call__(self, finding: Finding) -> None:
        if self.redact:
            from triage.report.redact import redact_result  # imported only when asked for

            finding = redact_result(ScanResult([finding], [])).findings[0]
        if self.hold:
            self.held.append(finding)
        else:
            self._print(finding)

    def release(self) -> None:
        """The input went quiet but is still open: a stream, so what was held is printed now."""
        held, self.held, self.hold = self.held, [], False
        for finding in held:
            self._print(finding)

    def render(self, finding: Finding) -> str:
        if self.jsonl:
            from triage.report.json_format import finding_dict

            return json.dumps(finding_dict(finding), ensure_ascii=False)
        from triage.report.text import render_finding

        return render_finding(finding)

    def _print(self, finding: Finding) -> None:
        text = self.render(finding)
        self.printed[finding_key(finding)] = text
        self.out(text + ("\n" if self.jsonl else "\n\n"))

    def rest(self, result: ScanResult) -> str | None:
        """What the final report adds to what was printed, or None when nothing was printed
        (then the whole report is the one report)."""
        if not self.printed:
            return None
        added = [self._added(finding) for finding in ordered(result.findings)]
        blocks = [block for block in added if block]
        if self.jsonl:
            return "".join(block + "\n" for block in blocks)
        heading = [ADDED_HEADING] if blocks else []
        return "\n\n".join([*heading, *blocks, summary_line(result)]) + "\n"

    def _added(self, finding: Finding) -> str:
        """A finding not printed yet, whole; one printed, only its lines that changed (under its
        first line, so the reader knows which); one printed as it is, nothing."""
        text = self.render(finding)
        before = self.printed.get(finding_key(finding))
        if before is None or self.jsonl:
            return "" if text == before else text
        if text == before:
            return ""
        lines = text.split("\n")
        return "\n".join([lines[0], *changed_lines(lines[1:], before.split("\n"))])


def changed_lines(lines: Sequence[str], before: Sequence[str]) -> list[str]:
    seen = set(before)
    return [line for line in lines if line not in seen]
