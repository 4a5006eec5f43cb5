"""One object a line, for log pipelines: each startup run ("type": "run"), then each finding
("type": "finding"), each the object of the JSON format with its type first."""

from __future__ import annotations

import json
from collections.abc import Iterator

from triage.report import ScanResult, ordered
from triage.report.json_format import finding_dict
from triage.report.runs import run_dict, summaries


def render(result: ScanResult) -> str:
    return "".join(pieces(result))


def pieces(result: ScanResult) -> Iterator[str]:
    for summary in summaries(result):
        yield json.dumps({"type": "run", **run_dict(summary)}, ensure_ascii=False) + "\n"
    for finding in ordered(result.findings):
        yield json.dumps({"type": "finding", **finding_dict(finding)}, ensure_ascii=False) + "\n"
