"""One finding a line, for log pipelines: each line is the finding object of the JSON format."""

from __future__ import annotations

import json
from collections.abc import Iterator

from triage.report import ScanResult, ordered
from triage.report.json_format import finding_dict


def render(result: ScanResult) -> str:
    return "".join(pieces(result))


def pieces(result: ScanResult) -> Iterator[str]:
    for finding in ordered(result.findings):
        yield json.dumps(finding_dict(finding), ensure_ascii=False) + "\n"
