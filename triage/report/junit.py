"""JUnit XML: one testsuite per input, one testcase per rule that was run.

A rule with no finding in an input is a passing (empty) testcase; each finding is a
<failure> of its rule's testcase. classname is the input, which GitLab shows as the suite.
"""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from triage.report import TOOL_NAME, ScanResult, checks
from triage.report.runs import RunSections, shown_runs
from triage.report.sections import laid_out
from triage.model import Finding, RunSummary


def render(result: ScanResult) -> str:
    rules = checks(result)
    runs = shown_runs(result)
    suites = [
        testsuite(name, rules, [f for f in result.findings if f.source == name], [pair for pair in runs if pair[0].source == name])
        for name in result.inputs
    ]
    total_tests = sum(tests for _, tests, _ in suites)
    total_failures = sum(failed for _, _, failed in suites)
    head = (
        f'<testsuites name="{TOOL_NAME}" tests="{total_tests}" failures="{total_failures}" errors="0" time="0">'
    )
    return "\n".join(['<?xml version="1.0" encoding="UTF-8"?>', head, *(xml for xml, _, _ in suites), "</testsuites>"]) + "\n"


def testsuite(name: str, rules: list, findings: list[Finding], runs: list[tuple[RunSummary, RunSections]]) -> tuple[str, int, int]:
    by_code: dict[str, list[Finding]] = {}
    for finding in sorted(findings, key=lambda f: f.line):
        by_code.setdefault(finding.code, []).append(finding)
    cases = [(rule.code, rule.name) for rule in rules]
    known = {code for code, _ in cases}
    cases += sorted({(f.code, f.name) for f in findings if f.code not in known})  # a rule not listed as run
    xml = [testcase(name, code, rule_name, by_code.get(code, [])) for code, rule_name in cases]
    failed = len(by_code)
    head = (
        f"  <testsuite name={attr(name)} tests=\"{len(cases)}\" failures=\"{failed}\" "
        f'errors="0" skipped="0" time="0">'
    )
    return "\n".join([head, *properties(runs), *xml, "  </testsuite>"]), len(cases), failed


def properties(runs: list[tuple[RunSummary, RunSections]]) -> list[str]:
    """Each run of the input as <properties>: "run N outcome", "run N first failure", each
    consequence, then each figure with the line that states it."""
    pairs = [pair for summary, run in runs for pair in run_properties(summary, run)]
    if not pairs:
        return []
    rows = [f"      <property name={attr(name)} value={attr(value)}/>" for name, value in pairs]
    return ["    <properties>", *rows, "    </properties>"]


def run_properties(summary: RunSummary, run: RunSections) -> list[tuple[str, str]]:
    prefix = f"run {summary.number}"
    pairs = [(f"{prefix} lines", f"{summary.first_line}-{summary.last_line}"), (f"{prefix} outcome", run.outcome)]
    if run.first_failure is not None:
        pairs.append((f"{prefix} first failure", run.first_failure))
    pairs += [(f"{prefix} consequence {number}", text) for number, text in enumerate(run.consequences, 1)]
    pairs += [(f"{prefix} {label}", f"{text} (line {line})" if line else text) for label, text, line in run.figures]
    return pairs


def testcase(suite: str, code: str, rule_name: str, findings: list[Finding]) -> str:
    attributes = f"classname={attr(suite)} name={attr(f'{code} {rule_name}')} time=\"0\""
    if not findings:
        return f"    <testcase {attributes}/>"
    failures = [failure(f) for f in findings]
    return "\n".join([f"    <testcase {attributes}>", *failures, "    </testcase>"])


FAILURE_LAYOUT = {"where": "at {text}", "said": "vLLM said: {text}", "cause": "cause: {text}", "fix": "{number}. {text}"}


def failure(finding: Finding) -> str:
    body = laid_out(finding, FAILURE_LAYOUT)
    message = attr(f"{finding.title} ({finding.source}:{finding.line})")
    return f"      <failure type={attr(finding.severity)} message={message}>{escape(_xml_text(chr(10).join(body)))}</failure>"


def _xml_text(text: str) -> str:
    """XML 1.0 cannot hold most control characters, even escaped; a log line may."""
    return "".join(ch if ch in "\t\n\r" or ord(ch) >= 0x20 else f"\\x{ord(ch):02x}" for ch in text)


def attr(value: str) -> str:
    return quoteattr(_xml_text(value))
