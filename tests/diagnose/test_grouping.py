"""group_by: which fields tell two findings of a rule apart."""

import textwrap

import pytest

from triage.diagnose.diagnoser import diagnose
from triage.rules.ruleset import RuleError, load_rules
from conftest import scan_events

METRICS = (
    "(APIServer pid=731) INFO 01-09 13:{minute:02d}:00 [loggers.py:257] Engine 000: Avg prompt throughput: "
    "2211.4 tokens/s, Avg generation throughput: 388.0 tokens/s, Running: 12 reqs, Waiting: {waiting} reqs, "
    "GPU KV cache usage: {usage}%, Prefix cache hit rate: 41.2%\n"
)


def test_saturated_metrics_lines_with_other_numbers_are_one_finding_with_a_count(matcher):
    lines = [METRICS.format(minute=i, waiting=i + 1, usage=95 + i / 10) for i in range(40)]
    lines.insert(10, METRICS.format(minute=59, waiting=0, usage=99.9))  # nobody waits: not saturated
    findings = diagnose(scan_events(matcher, "metrics.log", "".join(lines))).findings
    [saturated] = [f for f in findings if f.code == "VT303"]
    assert (saturated.count, saturated.line, saturated.last_line) == (40, 1, 41)
    assert saturated.fields["waiting"] == 1  # the first line's numbers are the ones shown


def test_group_by_must_name_captured_fields(tmp_path):
    rule_file = tmp_path / "mine.yaml"
    rule_file.write_text(textwrap.dedent("""\
        rules:
          - code: VT991
            name: my-rule
            title: Mine
            stage: runtime
            keywords: ["my marker"]
            patterns: ["my marker {count_of_things:int}"]
            group_by: [no_such_field]
            examples:
              match: ["my marker 3"]
        """))
    with pytest.raises(RuleError, match="group_by names 'no_such_field'"):
        load_rules([rule_file])
