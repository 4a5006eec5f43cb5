"""Stable machine output. The schema is documented in README.md ("JSON output")."""

from __future__ import annotations

import json
from collections.abc import Iterator

from triage import __version__
from triage.report import ScanResult, ordered, severity_counts
from triage.report.runs import run_dict, summaries
from triage.model import SEVERITIES, Check

# 2: a top-level "runs" list (every startup run: its facts with their lines, outcome, first
# failure and consequences); README, "JSON output", documents it.
SCHEMA_VERSION = 2
ITEM_INDENT = " " * 4
FINDING_KEYS = (
    "code", "name", "title", "stage", "severity", "source", "line", "last_line", "count",
    "process", "rank", "time", "last_time", "excerpt", "fields", "derived", "facts", "cause",
    "fixes", "hosted", "references", "run", "root", "consequence_of", "also_at",
)


def finding_dict(finding) -> dict:
    # the attributes themselves, not asdict(): its deep copy of every list and dict was half
    # the time of writing a report (a Finding holds no nested dataclass)
    document = {key: getattr(finding, key) for key in FINDING_KEYS}
    if finding.text is not None:  # only with --show-text: the whole record, which may quote a prompt
        document["text"] = finding.text
    return document


def check_dict(check: Check) -> dict:
    return {"code": check.code, "name": check.name, "passed": check.passed, "line": check.line, "figures": check.figures}


def render(result: ScanResult) -> str:
    return "".join(pieces(result))


def pieces(result: ScanResult) -> Iterator[str]:
    """The document json.dumps(indent=2) would give, one finding at a time: a report of
    thousands of findings is never held whole (nor as dicts) on the way out."""
    counts = severity_counts(result.findings)
    document = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "vllm-triage", "version": __version__},
        "inputs": result.inputs,
        "errors": result.errors,
        "summary": {s: counts[s] for s in SEVERITIES},
        "runs": [run_dict(summary) for summary in summaries(result)],
    }
    if result.checks:  # `gate` only: each assertion, passed or not, with the figures it compared
        document["gate"] = [check_dict(check) for check in result.checks]
    document["findings"] = []
    head = json.dumps(document, indent=2, ensure_ascii=False)
    findings = ordered(result.findings)
    if not findings:
        yield head + "\n"
        return
    yield head.removesuffix("]\n}") + "\n"  # up to the list's "["
    separator = ""
    for finding in findings:
        # Two levels down (document, list): every line 4 spaces in. JSON escapes the
        # newlines inside strings, so each newline here is one json.dumps put between items.
        text = json.dumps(finding_dict(finding), indent=2, ensure_ascii=False)
        yield separator + ITEM_INDENT + text.replace("\n", "\n" + ITEM_INDENT)
        separator = ",\n"
    yield "\n  ]\n}\n"
