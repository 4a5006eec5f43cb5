"""What the scan keeps while it reads a big log: bounded, whatever the number of lines."""

from dataclasses import asdict
from pathlib import Path

from triage.diagnose.diagnoser import Diagnoser
from conftest import scan_events

ROOT = Path(__file__).resolve().parents[2]

METRICS = (
    "INFO 09-13 18:27:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: 5865.9 tokens/s, "
    "Avg generation throughput: 731.8 tokens/s, Running: 46 reqs, Waiting: {waiting} reqs, "
    "GPU KV cache usage: {usage}%, Prefix cache hit rate: 75.7%"
)


def test_metrics_lines_that_are_no_problem_are_not_kept(ruleset, matcher):
    diagnoser = Diagnoser([r for r in ruleset.rules if r.kind == "check"], fact_names=ruleset.fact_names)
    log = "\n".join(METRICS.format(s=i % 60, waiting=i % 7, usage=20 + i % 50) for i in range(500))
    for event in scan_events(matcher, "metrics.log", log):
        diagnoser.add(event)
    assert sum(len(run.problems) for run in diagnoser.splitter.runs) == 0
    saturated = METRICS.format(s=1, waiting=12, usage=98.5)
    findings = [diagnoser.add(e) for e in scan_events(matcher, "metrics.log", saturated)]
    assert [f.code for f in findings if f is not None] == ["VT303"]
    assert [f.code for f in diagnoser.result().findings if f.code == "VT303"] == ["VT303"]


REJECTED = (
    "ERROR 05-01 11:29:{s:02d} [serving_chat.py:222] This model's maximum context length is 8192 tokens. "
    "However, you requested {total} tokens ({prompt} in the messages, {completion} in the completion). "
    "Please reduce the length of the messages or completion."
)


def test_rejections_are_counted_not_kept_and_give_the_same_figures(ruleset, matcher):
    startup = (ROOT / "fixtures").glob("*.log")
    head = next(iter(sorted(startup))).read_text()
    lines = [head]
    for i in range(400):
        prompt, completion = 6000 + (i * 37) % 4000, 500 + (i * 11) % 3000
        lines.append(REJECTED.format(s=i % 60, total=prompt + completion, prompt=prompt, completion=completion))
    events = scan_events(matcher, "rejections.log", "\n".join(lines) + "\n")
    checks = [r for r in ruleset.rules if r.kind == "check"]
    kept_all, folding = Diagnoser(checks), Diagnoser(checks, fact_names=ruleset.fact_names)
    for event in events:
        kept_all.add(event)
        folding.add(event)
    assert sum(len(run.problems) for run in folding.splitter.runs) < 10
    expected, found = kept_all.result().findings, folding.result().findings
    assert [asdict(f) for f in found] == [asdict(f) for f in expected]
    assert sum(f.count for f in found if f.code == "VT101") == 400
