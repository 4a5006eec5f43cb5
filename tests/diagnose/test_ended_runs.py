"""A run is finished as soon as the next begins, and the report is written a finding at a time:
the same findings and the same bytes as when everything was kept until the end."""

import json
from dataclasses import asdict, replace
from pathlib import Path

from triage import __version__
from triage.diagnose.diagnoser import Diagnoser
from triage.report.redact import redact_result
from triage.report import ScanResult, format_names, ordered, render, write
from triage.report.json_format import SCHEMA_VERSION, finding_dict
from triage.diagnose.store import FindingStore
from triage.model import SEVERITIES, Finding
from conftest import scan_events

ROOT = Path(__file__).resolve().parents[2]
# Fixture logs pasted one after another: a log of many runs (each startup opens one).
PASTED = "".join(path.read_text(errors="replace") for path in sorted((ROOT / "fixtures").glob("*.log")))


def feed(diagnoser, events):
    for event in events:
        diagnoser.add(event, render=False)
    return diagnoser.result()


def test_a_run_let_go_when_the_next_begins_gives_the_same_findings(ruleset, matcher):
    checks = [r for r in ruleset.rules if r.kind == "check"]
    events = list(scan_events(matcher, "pasted.log", PASTED))
    kept = feed(Diagnoser(checks, fact_names=ruleset.fact_names), events)
    events = list(scan_events(matcher, "pasted.log", PASTED))
    diagnoser = Diagnoser(checks, fact_names=ruleset.fact_names, keep_runs=False)
    ended = feed(diagnoser, events)
    assert len(kept.runs) > 5  # the paste holds many runs
    assert [asdict(f) for f in ended.findings] == [asdict(f) for f in kept.findings]
    assert ended.facts == kept.facts and ended.facts.lines == kept.facts.lines
    assert len(diagnoser.splitter.runs) == 1  # only the current run's events are held
    assert [run.facts for run in ended.runs] == [run.facts for run in kept.runs]
    assert not any(run.problems for run in ended.runs[:-1])


def test_render_false_takes_the_event_and_returns_nothing(ruleset, matcher):
    saturated = (
        "INFO 09-13 18:27:01 [loggers.py:123] Engine 000: Avg prompt throughput: 5865.9 tokens/s, "
        "Avg generation throughput: 731.8 tokens/s, Running: 46 reqs, Waiting: 9 reqs, "
        "GPU KV cache usage: 98.5%, Prefix cache hit rate: 75.7%"
    )
    rendered, quiet = Diagnoser(fact_names=ruleset.fact_names), Diagnoser(fact_names=ruleset.fact_names)
    assert [rendered.add(e) for e in scan_events(matcher, "m.log", saturated)][-1].code == "VT303"
    assert [quiet.add(e, render=False) for e in scan_events(matcher, "m.log", saturated)] == [None, None]
    assert [f.code for f in quiet.result().findings] == ["VT303"]


def whole_document(result: ScanResult) -> str:
    """The JSON report as one json.dumps of the whole document (how it was written before)."""
    document = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "vllm-triage", "version": __version__},
        "inputs": result.inputs,
        "errors": result.errors,
        "summary": {s: sum(f.severity == s for f in result.findings) for s in SEVERITIES},
        "runs": [],
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


def scanned(matcher, ruleset, store_block: int | None) -> ScanResult:
    """The pasted fixtures (many runs) as one input and each fixture as its own, findings in a
    plain list or a FindingStore that compresses every `store_block` findings."""
    checks = [r for r in ruleset.rules if r.kind == "check"]
    findings = [] if store_block is None else FindingStore(block=store_block)
    inputs = ["pasted.log", *[p.name for p in sorted((ROOT / "fixtures").glob("*.log"))][:6]]
    for name in inputs:
        text = PASTED if name == "pasted.log" else (ROOT / "fixtures" / name).read_text(errors="replace")
        diagnoser = Diagnoser(checks, fact_names=ruleset.fact_names, keep_runs=False, sink=findings)
        for event in scan_events(matcher, name, text):
            diagnoser.add(event, render=False)
        diagnoser.result()
    return ScanResult(findings, inputs, rules=list(ruleset.rules))


def test_findings_kept_compressed_give_every_format_the_same_report(ruleset, matcher):
    listed = scanned(matcher, ruleset, None)
    assert len(listed.findings) > 20
    for block in (1, 3, 64):
        stored = scanned(matcher, ruleset, block)
        assert [asdict(f) for f in stored.findings] == [asdict(f) for f in listed.findings]
        for format_name in format_names():
            if format_name != "rich":  # rich is the plain report's panels (and depends on the terminal)
                assert render(stored, format_name) == render(listed, format_name), (block, format_name)
        assert render(redact_result(stored), "json") == render(redact_result(listed), "json")
    assert "== pasted.log: run 2 ==" in render(stored, "text")  # headings come from the stored places


def test_a_redacted_store_masks_every_finding_and_where_it_is():
    secret = "sk-" + "a1B2c3D4" * 4
    store = FindingStore([finding(i, "error", f"key {secret}") for i in range(1, 6)], block=2)
    store.append(replace(finding(6, "error", "x"), source=f"/logs/{secret}.log", run=2))
    redacted = redact_result(ScanResult(store, ["a.log"]))
    assert isinstance(redacted.findings, FindingStore)
    assert secret not in render(redacted, "text") and secret not in render(redacted, "json")
    assert all(place.source == "a.log" or secret not in place.source for place in redacted.findings.places)
