"""A run is finished as soon as the next begins, and the report is written a finding at a time:
the same findings and the same bytes as when everything was kept until the end."""

import json
from dataclasses import asdict
from pathlib import Path

from triage import __version__
from triage.diagnose import Diagnoser
from triage.report import ScanResult, ordered, render, write
from triage.report.json_format import SCHEMA_VERSION, finding_dict
from triage.types import SEVERITIES, Finding

ROOT = Path(__file__).resolve().parent.parent
# Fixture logs pasted one after another: a log of many runs (each startup opens one).
PASTED = "".join(path.read_text(errors="replace") for path in sorted((ROOT / "fixtures").glob("*.log")))


def feed(diagnoser, events):
    for event in events:
        diagnoser.add(event, render=False)
    return diagnoser.result()


def test_a_run_let_go_when_the_next_begins_gives_the_same_findings(ruleset, matcher):
    checks = [r for r in ruleset.rules if r.kind == "check"]
    events = list(matcher.scan_text("pasted.log", PASTED))
    kept = feed(Diagnoser(checks, fact_names=ruleset.fact_names), events)
    events = list(matcher.scan_text("pasted.log", PASTED))
    diagnoser = Diagnoser(checks, fact_names=ruleset.fact_names, keep_runs=False)
    ended = feed(diagnoser, events)
    assert len(kept.runs) > 5  # the paste holds many runs
    assert [asdict(f) for f in ended.findings] == [asdict(f) for f in kept.findings]
    assert ended.facts == kept.facts and ended.facts.lines == kept.facts.lines
    assert ended.runs == [] and len(diagnoser.splitter.runs) == 1  # only the current run is held


def test_render_false_takes_the_event_and_returns_nothing(ruleset, matcher):
    saturated = (
        "INFO 09-13 18:27:01 [loggers.py:123] Engine 000: Avg prompt throughput: 5865.9 tokens/s, "
        "Avg generation throughput: 731.8 tokens/s, Running: 46 reqs, Waiting: 9 reqs, "
        "GPU KV cache usage: 98.5%, Prefix cache hit rate: 75.7%"
    )
    rendered, quiet = Diagnoser(fact_names=ruleset.fact_names), Diagnoser(fact_names=ruleset.fact_names)
    assert [rendered.add(e) for e in matcher.scan_text("m.log", saturated)][-1].code == "VT303"
    assert [quiet.add(e, render=False) for e in matcher.scan_text("m.log", saturated)] == [None, None]
    assert [f.code for f in quiet.result().findings] == ["VT303"]


def whole_document(result: ScanResult) -> str:
    """The JSON report as one json.dumps of the whole document (how it was written before)."""
    document = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "vllm-triage", "version": __version__},
        "inputs": result.inputs,
        "errors": result.errors,
        "summary": {s: sum(f.severity == s for f in result.findings) for s in SEVERITIES},
        "findings": [finding_dict(f) for f in ordered(result.findings)],
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def finding(line: int, severity: str, text: str) -> Finding:
    return Finding(
        code="VT101", name="n", title="t", stage="request", severity=severity, source="a.log", line=line,
        excerpt=text, fields={"prompt_tokens": 9000, "nested": ""}, derived={}, cause=[text, "two\nlines"],
        fixes=[], facts={"block_size": 16}, text=text if line % 2 else None,
    )


def test_the_json_report_in_pieces_is_the_whole_document_byte_for_byte():
    texts = ["plain", "ünïcode ✓", 'quote " and \\ backslash', "tab\tand \u2028 separator", "{\n  \"x\": [1]\n}"]
    findings = [finding(i + 1, SEVERITIES[i % 3], text) for i, text in enumerate(texts)]
    for result in (ScanResult(findings, ["a.log"], ["an error"]), ScanResult([], ["a.log"])):
        pieces = []
        write(result, "json", pieces.append)
        assert "".join(pieces) == render(result, "json") == whole_document(result)
        assert len(pieces) == (len(result.findings) + 2 if result.findings else 1)


def test_every_format_written_in_pieces_is_what_render_gives():
    result = ScanResult([finding(i, s, "x") for i, s in enumerate(SEVERITIES, 1)], ["a.log"])
    for format_name in ("text", "json", "jsonl", "markdown", "sarif", "junit", "github"):
        pieces = []
        write(result, format_name, pieces.append)
        assert "".join(pieces) == render(result, format_name)
