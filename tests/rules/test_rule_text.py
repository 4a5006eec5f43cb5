"""The words a person reads: every rule's cause and fixes, rendered over every rule example
and every fixture, are short, do not repeat themselves and name nothing internal.

These are properties over all of the rules' own examples and all of the fixtures, not one
case: a new rule or a new wording is held to them as soon as it has an example.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

from triage.model import Finding
from triage.pipeline import ScanOptions, Text, scan
from triage.report import ScanResult, render
from triage.rules.ruleset import load_rules

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
RULES = load_rules()

# Names that vLLM itself prints or takes (engine arguments in their config spelling, request
# parameters, config.json keys, finish reasons): prose may use them as they are. Anything
# else spelt with underscores is one of our own field names and must read as words.
VLLM_NAMES = {
    "max_model_len", "max_tokens", "max_completion_tokens", "truncate_prompt_tokens", "truncation_side",
    "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens", "kv_cache_dtype", "block_size",
    "tensor_parallel_size", "pipeline_parallel_size", "max_position_embeddings", "rope_scaling", "max_seq_len",
    "finish_reason", "enable_chunked_processing", "profile_run", "swap_space", "kv_cache_memory_bytes",
    "use_sliding_window", "sliding_window", "original_max_position_embeddings", "n_positions", "seq_length",
}
SNAKE = re.compile(r"(?<![\w./-])[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")
# A sentence ends at . ! or ? (maybe closed by a quote or bracket) before a space or the end;
# "0.6.4+", "8.00 GiB" and "config.json" end none.
SENTENCE_END = re.compile(r"[.!?][\"')\]]*(?=\s|$)")
FLAG_VALUE = re.compile(r"(--[a-z][a-z-]+)[ =](\d+)")


def sentences(text: str) -> int:
    return len(SENTENCE_END.findall(text.strip()))


def fixture_paths() -> list[Path]:
    return sorted(p for p in FIXTURES.rglob("*.log*") if "models" not in p.parts)


@cache
def example_findings() -> list[tuple[str, Finding]]:
    """Every finding each rule's own examples give when pasted alone."""
    found = []
    for rule in RULES.rules:
        for number, example in enumerate(rule.examples, 1):
            text = getattr(example, "text", None)
            if text:
                where = f"{rule.code} example {number}"
                found.extend((where, f) for f in scan([Text(where, text.encode())], ScanOptions(RULES)).findings)
    return found


@cache
def fixture_findings() -> list[tuple[str, Finding]]:
    """Every finding of every fixture: with its run's facts, aggregated and attached to."""
    found = []
    for path in fixture_paths():
        found.extend((str(path.relative_to(ROOT)), f) for f in scan([str(path)], ScanOptions(RULES)).findings)
    return found


def all_findings() -> list[tuple[str, Finding]]:
    return example_findings() + fixture_findings()


def test_every_rule_with_examples_is_seen_rendered():
    """The properties below are only as good as their coverage: every finding rule shows up."""
    seen = {f.code for _, f in all_findings()}
    finding_rules = {r.code for r in RULES.rules if r.kind == "finding" and r.examples}
    assert finding_rules <= seen, sorted(finding_rules - seen)


def test_every_cause_is_one_or_two_sentences():
    too_long = [(where, f.code, " ".join(f.cause)) for where, f in all_findings() if sentences(" ".join(f.cause)) > 2]
    assert not too_long, "\n".join(map(str, too_long))


def test_every_finding_has_a_cause():
    empty = [(where, f.code) for where, f in all_findings() if not " ".join(f.cause).strip()]
    assert not empty


def test_fixes_do_not_repeat_a_setting():
    """Two fixes that give the same flag the same value say one thing twice."""
    repeated = []
    for where, finding in all_findings():
        settings = [pair for fix in finding.fixes for pair in set(FLAG_VALUE.findall(fix))]
        doubled = {pair for pair in settings if settings.count(pair) > 1}
        if doubled:
            repeated.append((where, finding.code, sorted(doubled)))
    assert not repeated, "\n".join(map(str, repeated))


def test_the_first_fix_is_not_an_alternative():
    """'Or ...' reads as an alternative to something above it; the first fix has nothing above."""
    dangling = [(where, f.code, f.fixes[0]) for where, f in all_findings() if f.fixes and f.fixes[0].startswith("Or ")]
    assert not dangling, "\n".join(map(str, dangling))


def test_no_text_a_person_reads_names_an_internal_field():
    """Over the plain report of every fixture and every example: what vLLM prints or takes
    may be named; our own field names (max_model_len_set, bytes_per_token...) may not."""
    leaks = []
    for where, finding in all_findings():
        report = render(ScanResult([finding], [where]), "text")
        said = report.split("vLLM said: ", 1)
        # vLLM's own words are quoted as they are; everything else is ours
        ours = said[0] + (said[1].split("\n", 1)[1] if len(said) > 1 and "\n" in said[1] else "")
        unknown = set(SNAKE.findall(ours)) - VLLM_NAMES
        if unknown:
            leaks.append((where, finding.code, sorted(unknown)))
    assert not leaks, "\n".join(map(str, leaks))


def test_hosted_api_findings_give_client_side_fixes_only():
    hosted = [(where, f) for where, f in all_findings() if f.hosted]
    assert hosted, "no hosted finding among the examples and fixtures"
    for where, finding in hosted:
        for fix in finding.fixes:
            assert "--" not in fix, (where, fix)  # no server flag
            assert not re.search(r"\bvLLM\b", fix), (where, fix)  # no vLLM version or setting
            assert "truncate_prompt_tokens" not in fix, (where, fix)  # a vLLM request extension


@pytest.mark.parametrize("words", ["0 had a prompt", "0 would have fit", "1 tokens", "1 requests", "1.00 sequences", "0 of them"])
def test_no_sentence_says_what_a_person_would_not(words):
    said = re.compile(rf"(?<![\d,.]){re.escape(words)}")
    found = [(where, f.code) for where, f in all_findings() if said.search(" ".join([*f.cause, *f.fixes]))]
    assert not found, found


def test_equal_percentiles_are_said_once():
    for where, finding in all_findings():
        text = " ".join(finding.cause + finding.fixes)
        figures = re.findall(r"p(?:50|90|99) ([\d,]+)", text)
        if len(figures) > 1:
            assert len(set(figures)) > 1, (where, text)
