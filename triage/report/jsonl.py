"""One finding a line, for log pipelines: each line is the finding object of the JSON format."""

from __future__ import annotations

import json

from triage.report import ScanResult, ordered
from triage.report.json_format import finding_dict


def render(result: ScanResult) -> str:
    return "".join(json.dumps(finding_dict(f), ensure_ascii=False) + "\n" for f in ordered(result.findings))
