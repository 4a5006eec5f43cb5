"""SARIF 2.1.0, as GitHub code scanning reads it.

Every rule that was run is listed under tool.driver.rules (an empty list when none ran);
each finding is a result located at its log line, with its numbers in `properties` and a
partial fingerprint that does not depend on the line, so it survives log rotation. The run's
properties hold each startup run's facts with their lines, outcome and first failure.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from triage import __version__
from triage.report import TOOL_NAME, ScanResult, checks, fingerprint, help_text, ordered, relative_path
from triage.report.runs import run_dict, summaries
from triage.report.sections import laid_out
from triage.model import Finding

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
LEVEL = {"error": "error", "warning": "warning", "info": "note"}
FINGERPRINT_KEY = "vllmTriage/v1"
MESSAGE_LAYOUT = {"cause": "{text}", "fix": "Fix {number}: {text}"}


def render(result: ScanResult) -> str:
    rules = checks(result)
    index = {rule.code: number for number, rule in enumerate(rules)}
    run = {
        "tool": {
            "driver": {
                "name": TOOL_NAME,
                "version": __version__,
                "rules": [rule_descriptor(rule) for rule in rules],
            }
        },
        "invocations": [invocation(result)],
        "results": [sarif_result(f, index.get(f.code)) for f in ordered(result.findings)],
        "columnKind": "unicodeCodePoints",
        # each startup run of each input, as the JSON report's "runs" (docs/ci.md): a SARIF run is one scan
        "properties": {"startupRuns": [run_dict(summary) for summary in summaries(result)]},
    }
    document = {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def rule_descriptor(rule) -> dict:
    descriptor = {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.title},
        "fullDescription": {"text": rule.description or rule.title},
        "help": {"text": help_text(rule)},
        "defaultConfiguration": {"level": LEVEL[rule.severity]},
        "properties": {"tags": ["vllm", rule.stage], "stage": rule.stage},
    }
    if rule.references:
        descriptor["helpUri"] = rule.references[0]
    return descriptor


def invocation(result: ScanResult) -> dict:
    return {
        "executionSuccessful": True,
        "toolExecutionNotifications": [{"level": "warning", "message": {"text": error}} for error in result.errors],
    }


def sarif_result(finding: Finding, rule_index: int | None) -> dict:
    entry: dict[str, Any] = {
        "ruleId": finding.code,
        "level": LEVEL[finding.severity],
        "message": {"text": message(finding)},
        "locations": [location(finding)],
        "partialFingerprints": {FINGERPRINT_KEY: fingerprint(finding)},
        "properties": {
            "name": finding.name,
            "stage": finding.stage,
            "count": finding.count,
            "fields": finding.fields,
            "derived": finding.derived,
            "facts": finding.facts,
            **({"process": finding.process} if finding.process else {}),
            **({"rank": finding.rank} if finding.rank else {}),
            **({"lastLine": finding.last_line} if finding.last_line else {}),
        },
    }
    if rule_index is not None:
        entry["ruleIndex"] = rule_index
    return entry


def message(finding: Finding) -> str:
    return "\n".join([f"{finding.title}.", *laid_out(finding, MESSAGE_LAYOUT)])


def location(finding: Finding) -> dict:
    region: dict[str, Any] = {"startLine": max(finding.line, 1)}
    if finding.excerpt:
        region["snippet"] = {"text": finding.excerpt}
    return {
        "physicalLocation": {
            "artifactLocation": {"uri": quote(relative_path(finding.source))},
            "region": region,
        }
    }
