"""`vllm-triage explain`: the five knobs side by side, one topic in depth, and their rules."""

import json

import pytest
from click.testing import CliRunner

from triage.cli import main
from triage.plan.explain import KNOBS, KV_CACHE, TOPICS, find_topic
from triage.rules.ruleset import load_rules

RULES = load_rules()


def cli(*args: str):
    return CliRunner().invoke(main, list(args), env={"COLUMNS": "160"})


def test_explain_shows_the_five_knobs_and_what_decides_them():
    result = cli("explain", "--format", "text")
    assert result.exit_code == 0
    out = result.stdout
    for heading in ("set where", "limits", "when exceeded"):
        assert heading in out
    for name in ("context window", "max_model_len", "max_completion_tokens", "max_num_batched_tokens", "max_num_seqs"):
        assert name in out
    assert "And the one that decides them all: KV-cache memory." in out
    assert "\x1b[" not in out  # plain text when asked for text


def test_explain_is_accurate_about_current_vllm():
    text = json.dumps(json.loads(cli("explain", "--format", "json").stdout))
    assert "deprecated max_tokens" in text and "max_completion_tokens (vLLM 0.6.4+)" in text
    assert "From 0.32 an over-large value is clamped" in text
    assert "--max-model-len auto (or -1)" in text and "From vLLM 0.14" in text
    assert "--kv-cache-memory-bytes (0.10.2+)" in text


@pytest.mark.parametrize("topic, title", [
    ("max-model-len", "max_model_len (--max-model-len)"),
    ("max_tokens", "max_tokens / max_completion_tokens"),
    ("max_completion_tokens", "max_tokens / max_completion_tokens"),
    ("max_num_seqs", "max_num_seqs (--max-num-seqs)"),
    ("gpu_memory_utilization", "KV-cache memory (decides them all)"),
])
def test_explain_topic_by_name_or_alias(topic, title):
    result = cli("explain", topic, "--format", "text")
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0] == title
    for section in ("Set where:", "Limits:", "When exceeded:", "Related rules (vllm-triage rules show CODE):"):
        assert section in result.stdout


def test_explain_topic_lists_its_related_rules_with_their_titles():
    out = cli("explain", "max-tokens", "--format", "text").stdout
    assert "VT101  Prompt plus completion is longer than the served window" in out
    assert "VT106  max_tokens is zero or negative" in out


def test_every_related_rule_exists_and_every_finding_rule_is_reachable_from_a_topic():
    codes = {r.code for r in RULES.rules}
    for knob in TOPICS:
        assert set(knob.rules) <= codes, knob.topic
    related = {code for knob in TOPICS for code in knob.rules}
    ours = {r.code for r in RULES.rules if r.kind == "finding" and r.code[2] in "1234"}
    # Rules about other settings than the five knobs and the KV cache:
    assert ours - related == {"VT404", "VT405"}


def test_explain_json_has_every_knob():
    document = json.loads(cli("explain", "--format", "json").stdout)
    assert [k["topic"] for k in document["knobs"]] == [k.topic for k in KNOBS]
    assert document["kv_cache"]["topic"] == KV_CACHE.topic
    assert document["knobs"][1]["rules"][0] == {"code": "VT101", "title": RULES.by_code("VT101").title}


def test_an_unknown_topic_is_a_usage_error_that_lists_the_topics():
    result = cli("explain", "temperature")
    assert result.exit_code == 2
    assert "no topic 'temperature'; choose one of: context-window, max-model-len" in result.stderr


def test_find_topic_ignores_case_and_underscores():
    assert find_topic("MAX_NUM_BATCHED_TOKENS").topic == "max-num-batched-tokens"
    assert find_topic("nonsense") is None


@pytest.mark.parametrize(("args", "columns"), [(("--format", "text"), "160"), (("--format", "text"), "60"),
                                               (("--format", "rich"), "80")])
def test_explain_below_a_wide_terminal_is_a_list_that_breaks_no_identifier(args, columns):
    out = CliRunner().invoke(main, ["explain", *args], env={"COLUMNS": columns}).stdout
    assert "┃" not in out and "│" not in out  # a list, not a box table
    assert all(len(line) <= max(int(columns), 60) for line in out.splitlines()), out
    source = " ".join(f"{k.title} {k.set_where} {k.limits} {k.when_exceeded} {k.notes}" for k in (*KNOBS, KV_CACHE))
    plain = out.replace("\x1b", "")
    for word in {w.strip(".,;:()") for w in plain.split()}:
        if word.startswith("--") or "_" in word:
            assert word in source, f"{word!r} was broken or invented"  # --max-model-l / en. before
    for knob in KNOBS:
        assert f"{knob.title} (vllm-triage explain {knob.topic})" in out.replace("\n", " ")


def test_explain_on_a_wide_terminal_keeps_the_table():
    out = CliRunner().invoke(main, ["explain", "--format", "rich"], env={"COLUMNS": "160"}).stdout
    assert "┃" in out
