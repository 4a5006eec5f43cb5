"""Every vLLM message about length and KV cache, in every wording we list, fires its rule.

tests/data/catalog_coverage.yaml maps each catalog template id (and each version variant of
its wording) to the rule and pattern that cover it, with a sample in that wording written by
us; ids judged out of scope carry a reason.
"""

from pathlib import Path

import pytest
import yaml

from triage.match.matcher import Matcher
from triage.rules.ruleset import load_rules
from triage.rules.ruletest import fires
from conftest import scan_events

COVERAGE = yaml.safe_load((Path(__file__).resolve().parents[1] / "data" / "catalog_coverage.yaml").read_text())
RULES = load_rules()
MATCHER = Matcher(RULES)


def _id(entry):
    return f"{entry['id']}[{entry['variant']}]" if "variant" in entry else entry["id"]


@pytest.mark.parametrize("entry", COVERAGE["covered"], ids=_id)
def test_the_named_rule_fires_on_the_sample_with_the_named_pattern(entry):
    events = [e for e in scan_events(MATCHER, "catalog", entry["sample"]) if fires(e, {})]
    hits = {(e.rule.code, e.pattern_id) for e in events}
    assert (entry["rule"], entry["pattern"]) in hits, f"{_id(entry)}: got {sorted(hits)}"


def test_every_entry_names_a_rule_and_pattern_that_exist():
    for entry in COVERAGE["covered"]:
        rule = RULES.by_code(entry["rule"])
        assert rule is not None, entry["rule"]
        assert entry["pattern"] in {p.id for p in rule.patterns}, _id(entry)


def test_out_of_scope_wordings_say_why_and_are_not_also_claimed():
    covered_ids = {e["id"] for e in COVERAGE["covered"]}
    covered = {_id(e) for e in COVERAGE["covered"]}
    for entry in COVERAGE["out_of_scope"]:
        assert len(entry["reason"]) > 20
        assert _id(entry) not in covered
        if "variant" not in entry:  # a whole id out of scope: no wording of it is claimed
            assert entry["id"] not in covered_ids


def test_every_finding_rule_of_ours_is_reached_by_some_catalog_wording():
    reached = {entry["rule"] for entry in COVERAGE["covered"]}
    ours = {r.code for r in RULES.rules if r.kind == "finding" and r.code[2] in "1234"}
    # VT304 (CUDA OOM in warm-up) has no catalog wording: its text is tested by its own examples.
    assert ours - reached <= {"VT304"}
