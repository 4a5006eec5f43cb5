"""Stable machine output. The schema is documented in README.md ("JSON output")."""

from __future__ import annotations

import json
from dataclasses import asdict

from triage import __version__
from triage.report import ScanResult, ordered
from triage.types import SEVERITIES

SCHEMA_VERSION = 1
FINDING_KEYS = (
    "code", "name", "title", "stage", "severity", "source", "line", "last_line", "count",
    "process", "rank", "time", "last_time", "excerpt", "fields", "derived", "facts", "cause",
    "fixes", "hosted", "references", "run", "root", "consequence_of",
)


def finding_dict(finding) -> dict:
    data = asdict(finding)
    document = {key: data[key] for key in FINDING_KEYS}
    if finding.text is not None:  # only with --show-text: the whole record, which may quote a prompt
        document["text"] = finding.text
    return document


def render(result: ScanResult) -> str:
    document = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "vllm-triage", "version": __version__},
        "inputs": result.inputs,
        "errors": result.errors,
        "summary": {s: sum(f.severity == s for f in result.findings) for s in SEVERITIES},
        "findings": [finding_dict(f) for f in ordered(result.findings)],
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
