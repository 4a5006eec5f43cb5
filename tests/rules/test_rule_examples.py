import pytest

from triage.rules.ruleset import load_rules
from triage.rules.ruletest import check_examples
from conftest import scan_events

RULES = load_rules()


@pytest.mark.parametrize("rule", RULES.rules, ids=lambda r: r.code)
def test_rule_matches_its_examples_with_their_numbers(rule):
    failures = [f for f in check_examples(RULES) if f.rule == rule.code]
    assert not failures, "\n".join(map(str, failures))


def test_every_pattern_has_an_example_that_uses_it(matcher):
    for rule in RULES.rules:
        used = set()
        for example in rule.examples:
            used.update(e.pattern_id for e in scan_events(matcher, "x", example.text) if e.rule.code == rule.code)
        unused = [p.id for p in rule.patterns if p.id not in used and not p.hosted]
        assert not unused, f"{rule.code}: patterns without an example: {unused}"
