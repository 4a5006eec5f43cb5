"""A yes/no fact is what a line states, never a default: a setting the log never prints is
absent from the run's facts, not False (chunked prefill is on by default in V1, so a False
made up from silence would be wrong as well as unfounded)."""

import pytest

from triage.pipeline import ScanOptions, Text, scan
from conftest import scan_events

STATED = {"true": True, "false": False}


def fact_examples(ruleset):
    for rule in ruleset.rules:
        if rule.kind == "fact":
            for example in rule.examples:
                yield rule, example.text


def counters(rule) -> set[str]:
    """Flags the rule's own arithmetic counts (collect-env's one per GPU line): 0 on its other lines."""
    return {name for expression in rule.derived.values() for name in expression.names}


def test_every_fact_example_reads_a_yes_no_only_from_its_own_words(ruleset, matcher):
    """Over every fact rule's examples: a bool is the True/False the line prints; a flag is
    set only by a pattern that captures it (another line of the rule says nothing of it)."""
    checked = 0
    for rule, text in fact_examples(ruleset):
        for event in scan_events(matcher, "example", text):
            if event.rule is not rule:
                continue
            captured = set(next(p.fields for p in rule.patterns if p.id == event.pattern_id))
            for name, value in event.fields.items():
                kind = rule.field_types.get(name)
                if kind == "bool":
                    assert value is STATED[str(value).lower()] and str(value) in text, (rule.code, name, text)
                    checked += 1
                elif kind == "flag" and name not in counters(rule):
                    assert name in captured, (rule.code, event.pattern_id, name)
                    checked += 1
    assert checked > 10


def summary_facts(*lines: str) -> dict:
    result = scan([Text("s.log", ("\n".join(lines) + "\n").encode())], ScanOptions())
    (run,) = result.runs["s.log"]
    return {name: (value, run.summary.fact_lines[name]) for name, value in run.summary.facts.items()}


ARGS = "(APIServer pid=31) INFO 02-11 07:40:02 [utils.py:233] non-default args: {{'model': 'Qwen/Qwen3-8B'{extra}}}"
CONFIG = (
    "(EngineCore_DP0 pid=52) INFO 02-11 07:40:09 [core.py:77] Initializing a V1 LLM engine (v0.10.2) with config:"
    " model='Qwen/Qwen3-8B', speculative_config=None, dtype=torch.bfloat16, max_seq_len=40960,"
    " tensor_parallel_size=1{extra}, enforce_eager=False"
)
NAMESPACE = "INFO 02-11 07:40:02 api_server.py:585] args: Namespace(model='Qwen/Qwen3-8B', max_model_len=None, tensor_parallel_size=1)"


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ([ARGS.format(extra=""), CONFIG.format(extra="")], None),  # never printed: absent
        ([NAMESPACE, CONFIG.format(extra="")], None),  # V0's Namespace has no such field
        ([ARGS.format(extra=", 'enable_chunked_prefill': False"), CONFIG.format(extra="")], (False, 1)),
        ([ARGS.format(extra=""), CONFIG.format(extra=", chunked_prefill_enabled=False")], (False, 2)),
        ([NAMESPACE, CONFIG.format(extra=", enable_chunked_prefill=True")], (True, 2)),
    ],
)
def test_chunked_prefill_is_a_fact_only_where_a_line_states_it(lines, expected):
    assert summary_facts(*lines).get("chunked_prefill") == expected


def test_a_collect_env_listing_without_a_gpu_line_counts_no_gpu():
    facts = summary_facts("Nvidia driver version        : 570.133.20", "CUDA runtime version         : 12.8.93")
    assert facts.get("gpu_count", (0, None))[0] == 0 and "gpu_name" not in facts
    assert facts["driver_version"] == ("570.133.20", 1)


def test_an_auto_fit_line_states_nothing_of_a_full_window_it_did_not_print():
    facts = summary_facts(
        "(EngineCore_DP0 pid=2210) INFO 01-09 13:44:02 [kv_cache_utils.py:1442] Auto-fit max_model_len: reduced from"
        " 131072 to 79216 to fit in available GPU memory (9.67 GiB available for KV cache)"
    )
    assert "auto_fit_full" not in facts and facts["auto_fit_from"] == (131072, 1)
