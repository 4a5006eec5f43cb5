"""GitHub Actions workflow commands: one annotation per finding, most important first.

Escaping follows the Actions toolkit (@actions/core): the message escapes %, CR and LF;
property values (file, title) additionally escape ':' and ','. The markdown summary for
$GITHUB_STEP_SUMMARY is the markdown format; the CLI appends it.
"""

from __future__ import annotations

from triage.report import TOOL_NAME, ScanResult, ordered, relative_path, summary_line
from triage.report.sections import laid_out
from triage.model import Finding

COMMAND = {"error": "error", "warning": "warning", "info": "notice"}
MESSAGE_LAYOUT = {"cause": "{text}", "fix": "{number}. {text}"}


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render(result: ScanResult) -> str:
    lines = [annotation(f) for f in ordered(result.findings)]
    lines.append(f"{TOOL_NAME}: {summary_line(result)}")
    return "\n".join(lines) + "\n"


def annotation(finding: Finding) -> str:
    properties = {
        "file": relative_path(finding.source),
        "line": str(max(finding.line, 1)),
        "title": f"{TOOL_NAME} ({finding.code})",
    }
    rendered = ",".join(f"{key}={escape_property(value)}" for key, value in properties.items())
    return f"::{COMMAND[finding.severity]} {rendered}::{escape_data(message(finding))}"


def message(finding: Finding) -> str:
    lines = [f"{finding.name}: {finding.title}"]
    if finding.count > 1:
        lines[0] += f" (x{finding.count})"
    return "\n".join(lines + laid_out(finding, MESSAGE_LAYOUT))
