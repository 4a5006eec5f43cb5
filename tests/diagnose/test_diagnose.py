"""Aggregation: exact nearest-rank percentiles, one finding per rule and run, the sizing advice."""

import itertools
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triage.diagnose.diagnoser import HISTOGRAM_BINS, histogram, percentile, rejection_figures, requested_length
from triage.rules.ruleset import load_rules
from triage.diagnose.diagnoser import diagnose
from conftest import scan_events

STARTUP = (
    "(APIServer pid=11) INFO 02-03 09:00:00 [api_server.py:1896] vLLM API server version 0.11.0\n"
    "(APIServer pid=11) INFO 02-03 09:00:00 [utils.py:233] non-default args: {'model_tag': 'm', 'model': 'm'}\n"
    "(APIServer pid=11) INFO 02-03 09:00:04 [model.py:1510] Using max model len 8192\n"
    "(EngineCore_DP0 pid=12) INFO 02-03 09:00:20 [gpu_worker.py:298] Available KV cache memory: 20.0 GiB\n"
    "(EngineCore_DP0 pid=12) INFO 02-03 09:00:21 [kv_cache_utils.py:1087] GPU KV cache size: 163,840 tokens\n"
)
OVERFLOW = (
    "(APIServer pid=11) ERROR 02-03 10:{minute:02d}:00 [serving_chat.py:283] ValueError: This model's maximum context "
    "length is 8192 tokens. However, you requested {total} tokens ({prompt} in the messages, {completion} in the "
    "completion). Please reduce the length of the messages or completion.\n"
)


def test_nearest_rank_percentile_of_a_known_list():
    values = [15, 20, 35, 40, 50]
    assert [percentile(values, p) for p in (5, 30, 40, 50, 100)] == [15, 20, 20, 35, 50]
    assert percentile([7], 99) == 7
    assert percentile(list(range(1, 101)), 99) == 99
    assert percentile(list(range(1, 201)), 99) == 198
    with pytest.raises(ValueError):
        percentile([], 50)


def test_requested_length_prefers_what_the_error_states():
    assert requested_length({"requested": 9000, "prompt_tokens": 8000, "completion_tokens": 500}) == 9000
    assert requested_length({"prompt_tokens": 8000, "completion_tokens": 500}) == 8500
    assert requested_length({"prompt_tokens": 9000}) == 9001  # the prompt alone was refused
    assert requested_length({"completion_tokens": 12000}) == 12000
    assert requested_length({"max_model_len": 8192}) is None


def test_rejection_figures_count_prompts_over_the_window_and_smaller_max_tokens():
    figures = rejection_figures([
        {"max_model_len": 8192, "prompt_tokens": 8000, "completion_tokens": 500},
        {"max_model_len": 8192, "prompt_tokens": 8192, "completion_tokens": 100},
        {"max_model_len": 8192, "prompt_tokens": 9000},
    ])
    assert figures == {
        "rejected": 3, "requested_p50": 8500, "requested_p90": 9001, "requested_p99": 9001,
        "requested_max": 9001, "prompt_over_window": 2, "fit_with_smaller_max_tokens": 1,
        # 8292, 8500 and 9001 in eight bins of 89 tokens from the shortest to the longest
        "requested_histogram": [[8292, 8380, 1], [8381, 8469, 0], [8470, 8558, 1], [8559, 8647, 0],
                                [8648, 8736, 0], [8737, 8825, 0], [8826, 8914, 0], [8915, 9001, 1]],
    }
    assert "requested_histogram" not in rejection_figures([{"requested": 9000}, {"requested": 9000}])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 300_000), min_size=1, max_size=60))
def test_the_histogram_counts_every_length_once_in_the_bin_that_holds_it(lengths):
    bins = histogram(Counter(lengths))
    assert 1 <= len(bins) <= HISTOGRAM_BINS
    assert bins[0][0] == min(lengths) and bins[-1][1] == max(lengths)
    assert all(low <= high for low, high, _ in bins)
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(bins))  # contiguous, no overlap
    for low, high, count in bins:
        assert count == sum(low <= length <= high for length in lengths)


def hundreds_of_rejections(seed: int = 7) -> str:
    """300 rejections with requested lengths 8210, 8220, ..., 11200 in a seeded order; the first
    30 of that order have a prompt that alone fills the window."""
    totals = [8200 + 10 * k for k in range(1, 301)]
    random.Random(seed).shuffle(totals)
    lines = []
    for number, total in enumerate(totals):
        completion = 5 if number < 30 else total - 8000  # prompts of >= 8205, else of 8000 tokens
        prompt = total - completion
        lines.append(OVERFLOW.format(minute=number % 60, total=total, prompt=prompt, completion=completion))
    return STARTUP + "".join(lines)


def test_hundreds_of_rejections_become_one_finding_with_exact_figures_and_a_recommendation(matcher):
    checks = [r for r in load_rules().rules if r.kind == "check"]
    result = diagnose(scan_events(matcher, "server.log", hundreds_of_rejections()), checks=checks)
    [finding] = [f for f in result.findings if f.code == "VT101"]
    assert finding.count == 300
    assert (finding.line, finding.last_line) == (6, 305)
    derived = finding.derived
    # sorted list is 8210 + 10*i: nearest rank 150, 270, 297 of 300
    assert (derived["requested_p50"], derived["requested_p90"], derived["requested_p99"], derived["requested_max"]) == (
        9700, 10900, 11170, 11200
    )
    assert (derived["prompt_over_window"], derived["fit_with_smaller_max_tokens"]) == (30, 270)
    assert derived["recommended_max_model_len"] == 11184  # 11170 rounded up to blocks of 16
    # 20 GiB / 163,840 tokens = 131,072 bytes per token; 11,184 tokens of it = 1.365 GiB
    assert derived["recommended_kv_gib"] == 1.37
    assert derived["recommended_concurrency"] == 14.65  # 163,840 / 11,184
    assert derived["current_concurrency"] == 20.0
    text = " ".join(finding.cause + finding.fixes)
    assert "It is the first of 300 requests refused alike in this run, which asked for 9,700 tokens at the median, " \
        "11,170 at the 99th percentile and 11,200 at most." in text
    assert "Restart vLLM with --max-model-len 11184 to serve 99% of them" in text
    assert "this run's KV cache holds 14.65 such sequences at once (20.00 now)" in text
    assert "that alone would have served 270 of the 300" in text
    assert finding.facts["kv_tokens"] == 163840  # the sizing fix names the cache it was worked out on


def test_identical_findings_collapse_with_count_and_first_and_last_place(matcher):
    line = ("(EngineCore_DP0 pid=3) ERROR 07-21 09:12:{second} [core.py:708] ValueError: No available memory for the "
            "cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n")
    text = "".join(line.format(second=s) for s in ("39", "40", "41"))
    [finding] = diagnose(scan_events(matcher, "x.log", text)).findings
    assert (finding.count, finding.line, finding.last_line) == (3, 1, 3)
    assert (finding.time, finding.last_time) == ("07-21 09:12:39", "07-21 09:12:41")


def test_a_startup_shortfall_says_which_figures_it_used(matcher):
    text = (
        "(APIServer pid=1) INFO 07-21 09:11:52 [utils.py:233] non-default args: {'model': 'm', 'max_model_len': 65536, 'gpu_memory_utilization': 0.9}\n"
        "(EngineCore_DP0 pid=2) INFO 07-21 09:12:38 [gpu_worker.py:298] Free memory on device (78.10/79.19 GiB) on startup. Desired GPU memory utilization is (0.9, 71.27 GiB). Actual usage is 15.2 GiB for consumed memory\n"
        "(EngineCore_DP0 pid=2) ERROR 07-21 09:12:39 [core.py:708] ValueError: To serve at least one request with the models's max seq len (65536), (8.00 GiB KV cache is needed, which is larger than the available KV cache memory (5.31 GiB). Based on the available memory, the estimated maximum model length is 43488. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n"
    )
    [finding] = diagnose(scan_events(matcher, "x.log", text)).findings
    assert finding.derived["bytes_per_token"] == 131072  # 8 GiB over 65,536 tokens
    assert finding.derived["fit_max_model_len"] == 43488
    assert finding.derived["utilization_to_fit"] == 0.94  # 0.9 + 2.69 GiB / 79.19 GiB, rounded up
    assert finding.facts == {"gpu_memory_utilization": 0.9, "total_gib": 79.19, "requested_gib": 71.27}
    assert finding.derived["budget_gib"] == 71.27  # vLLM's own product of the two
    assert "other_gib" not in finding.derived  # the log never said what the weights take
    assert any("--gpu-memory-utilization to 0.94" in fix for fix in finding.fixes)
