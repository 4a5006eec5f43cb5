"""What the scan keeps while it reads a big log: bounded, whatever the number of lines."""

from triage.diagnose import Diagnoser

METRICS = (
    "INFO 09-13 18:27:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: 5865.9 tokens/s, "
    "Avg generation throughput: 731.8 tokens/s, Running: 46 reqs, Waiting: {waiting} reqs, "
    "GPU KV cache usage: {usage}%, Prefix cache hit rate: 75.7%"
)


def test_metrics_lines_that_are_no_problem_are_not_kept(ruleset, matcher):
    diagnoser = Diagnoser([r for r in ruleset.rules if r.kind == "check"], fact_names=ruleset.fact_names)
    log = "\n".join(METRICS.format(s=i % 60, waiting=i % 7, usage=20 + i % 50) for i in range(500))
    for event in matcher.scan_text("metrics.log", log):
        diagnoser.add(event)
    assert sum(len(run.problems) for run in diagnoser.splitter.runs) == 0
    saturated = METRICS.format(s=1, waiting=12, usage=98.5)
    findings = [diagnoser.add(e) for e in matcher.scan_text("metrics.log", saturated)]
    assert [f.code for f in findings if f is not None] == ["VT303"]
    assert [f.code for f in diagnoser.result().findings if f.code == "VT303"] == ["VT303"]
