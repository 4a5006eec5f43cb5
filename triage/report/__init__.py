"""Formatters: each turns a scan result into text. They never match or compute."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from triage.types import SEVERITIES, Finding, severity_rank


@dataclass(slots=True)
class ScanResult:
    findings: list[Finding]
    inputs: list[str]
    errors: list[str] = field(default_factory=list)  # inputs that could not be read, skipped rules
    rules: list[Any] = field(default_factory=list)  # every rule that was run (for SARIF, JUnit)
    facts: dict[str, Any] = field(default_factory=dict)


def ordered(findings: list[Finding]) -> list[Finding]:
    """Most severe first, then by where they are."""
    return sorted(findings, key=lambda f: (-severity_rank(f.severity), f.source, f.line))


def summary_line(result: ScanResult) -> str:
    counts = Counter(f.severity for f in result.findings)
    if not result.findings:
        head = "no findings"
    else:
        parts = [f"{counts[s]} {s}{'s' if counts[s] != 1 and s != 'info' else ''}" for s in reversed(SEVERITIES) if counts[s]]
        total = len(result.findings)
        head = f"{total} finding{'s' if total != 1 else ''} ({', '.join(parts)})"
    inputs = len(result.inputs)
    return f"{head} in {inputs} input{'s' if inputs != 1 else ''}"


def where(finding: Finding) -> str:
    text = f"{finding.source}:{finding.line}"
    if finding.count > 1 and finding.last_line:
        text += f" (x{finding.count}, last at line {finding.last_line})"
    if finding.process:
        text += f" [{finding.process}]"
    return text


def _formatters() -> dict[str, Callable[[ScanResult], str]]:
    from triage.report import json_format, text

    return {
        "text": text.render_plain,
        "rich": text.render_rich,
        "json": json_format.render,
    }


def render(result: ScanResult, format_name: str) -> str:
    return _formatters()[format_name](result)


def format_names() -> list[str]:
    return list(_formatters())
