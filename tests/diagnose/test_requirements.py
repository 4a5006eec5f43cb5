"""A rule's `require` has one evaluator: an event is judged name by name over its run's
facts (Requirement), a check over one mapping (derived_when_met), and both say the same of
the same values, for every built-in rule that has one."""

from hypothesis import given, settings
from hypothesis import strategies as st

from triage.diagnose.facts import DEFAULTS
from triage.diagnose.requirements import Requirement, derived_when_met
from triage.rules.ruleset import load_rules

RULESET = load_rules(())
REQUIRING = [rule for rule in RULESET.rules if rule.require is not None]
FACT_NAMES = {*RULESET.fact_names, *DEFAULTS}
VALUES = st.one_of(st.integers(0, 300_000), st.floats(0, 300_000, allow_nan=False), st.sampled_from([0, 1, 0.5, 95.0]))


@st.composite
def rule_and_values(draw, rules=REQUIRING):
    """A rule, and values for some of the names its require reads: some the event's own, some facts."""
    rule = draw(st.sampled_from(rules))
    names = Requirement.of(rule).names
    fields = draw(st.dictionaries(st.sampled_from(names), VALUES, max_size=len(names)))
    facts = draw(st.dictionaries(st.sampled_from(names), VALUES, max_size=len(names)))
    return rule, fields, facts


def test_both_kinds_of_rule_are_drawn():
    assert {"finding", "check"} <= {rule.kind for rule in REQUIRING}
    assert any(set(rule.derived) & rule.require.names for rule in REQUIRING)  # a require that reads a derived number


@settings(max_examples=400, deadline=None)
@given(rule_and_values())
def test_an_event_and_a_check_are_judged_alike(drawn):
    rule, fields, facts = drawn
    as_event = Requirement.of(rule, FACT_NAMES).holds(fields, facts)
    as_check = derived_when_met(rule, {**DEFAULTS, **facts, **fields}) is not None
    assert as_event == as_check, (rule.code, rule.require.source, fields, facts)


@settings(max_examples=300, deadline=None)
@given(rule_and_values([rule for rule in REQUIRING if rule.kind == "finding"]), st.data())
def test_a_settled_event_ignores_the_facts(drawn, data):
    """The diagnosis drops an event that fails and is settled: no later fact may make it hold."""
    rule, fields, _ = drawn
    requirement = Requirement.of(rule, FACT_NAMES)
    if not requirement.settled(fields):
        return
    settable = [name for name in requirement.names if name in FACT_NAMES]  # what a run's facts can hold
    other = data.draw(st.dictionaries(st.sampled_from(settable), VALUES, max_size=len(settable))) if settable else {}
    assert requirement.holds(fields, {}) == requirement.holds(fields, other), (rule.code, fields, other)
