"""Severity that means something: a full KV cache with requests waiting is how a busy server
looks (info); only harm the log itself shows (preemptions, a dropped or a refused request)
is a warning or worse, and only that makes `--fail-on warning` fail."""

from hypothesis import given, settings
from hypothesis import strategies as st

from triage.cli.common import exit_code
from triage.model import severity_rank
from triage.pipeline import ScanOptions, Text, scan

V1_METRICS = (
    "(APIServer pid=731) INFO 01-09 13:51:{second:02d} [loggers.py:257] Engine 000: Avg prompt throughput: "
    "2211.4 tokens/s, Avg generation throughput: 388.0 tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, "
    "{preempted}GPU KV cache usage: {usage:.1f}%, Prefix cache hit rate: 41.2%"
)
V0_METRICS = (
    "INFO 12-20 14:09:{second:02d} metrics.py:467] Avg prompt throughput: 1611.0 tokens/s, Avg generation "
    "throughput: 377.2 tokens/s, Running: {running} reqs, Swapped: {swapped} reqs, Pending: {waiting} reqs, "
    "GPU KV cache usage: {usage:.1f}%, CPU KV cache usage: 0.0%."
)
# The harm, each in vLLM's words, and the rule that reports it.
HARM = {
    "preempted-v0": ("VT301", "WARNING 12-20 14:09:33 scheduler.py:1555] Sequence group cmpl-77a1-0 is preempted by "
                     "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the "
                     "end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more "
                     "KV cache memory. total_num_cumulative_preemption=51"),
    "dropped": ("VT302", "WARNING 09-02 02:13:50 scheduler.py:632] Failing the request cmpl-5e6f-0 because there's not "
                "enough kv cache blocks to run the entire sequence."),
    "ignored-prompt": ("VT110", "WARNING 03-14 09:21:07 scheduler.py:149] Input prompt (6100 tokens) is too long and "
                       "exceeds limit of 4096"),
    "refused": ("VT101", "(APIServer pid=731) ERROR 01-09 13:52:03 [serving_chat.py:210] Error in preprocessing prompt "
                "inputs: This model's maximum context length is 16384 tokens. However, you requested 17210 tokens "
                "(15210 in the messages, 2000 in the completion). Please reduce the length of the messages or completion."),
}

saturated = st.builds(
    dict, running=st.integers(1, 512), waiting=st.integers(1, 300), usage=st.floats(95, 100), swapped=st.integers(0, 9),
)
unsaturated = st.one_of(
    st.builds(dict, running=st.integers(0, 512), waiting=st.just(0), usage=st.floats(0, 100), swapped=st.just(0)),
    st.builds(dict, running=st.integers(0, 512), waiting=st.integers(0, 300), usage=st.floats(0, 94.8),
              swapped=st.just(0)),
)


def metrics_line(numbers: dict, second: int, v1: bool, preemptions: int) -> str:
    if v1:
        preempted = f"Preemptions: {preemptions}, " if preemptions else ""
        return V1_METRICS.format(second=second, preempted=preempted, **numbers)
    return V0_METRICS.format(second=second, **numbers)


@st.composite
def logs(draw):
    """Metrics lines (full or not, V0 or V1, with or without a V1 interval's preemptions) and
    any subset of the harm lines, shuffled: (log text, whether a line shows harm)."""
    v1 = draw(st.booleans())
    lines, harm = [], False
    for second, numbers in enumerate(draw(st.lists(st.one_of(saturated, unsaturated), min_size=1, max_size=8))):
        if not v1:
            numbers = {**numbers, "swapped": numbers["swapped"] if numbers["waiting"] else 0}
        preemptions = draw(st.integers(0, 40)) if v1 and draw(st.booleans()) else 0
        harm = harm or preemptions > 0
        lines.append(metrics_line(numbers, second, v1, preemptions))
    chosen = draw(st.lists(st.sampled_from(sorted(HARM)), unique=True, max_size=len(HARM)))
    lines.extend(HARM[name][1] for name in chosen)
    return "\n".join(draw(st.permutations(lines))) + "\n", harm or bool(chosen), {HARM[name][0] for name in chosen}


@settings(max_examples=60, deadline=None)
@given(logs())
def test_a_full_cache_with_requests_waiting_is_info_and_only_harm_warns(drawn):
    text, harmed, harm_codes = drawn
    result = scan([Text("server.log", text.encode())], ScanOptions())
    findings = list(result.findings)
    assert {f.severity for f in findings if f.code == "VT303"} <= {"info"}
    assert harm_codes <= {f.code for f in findings}
    worst = max((severity_rank(f.severity) for f in findings), default=-1)
    assert (worst >= severity_rank("warning")) == harmed, [(f.code, f.severity) for f in findings]
    assert exit_code(result, "warning", had_input_error=False) == (1 if harmed else 0)
    assert exit_code(result, "info", had_input_error=False) == (1 if findings else 0)


def test_a_busy_server_alone_is_one_info_finding_and_exits_clean(tmp_path):
    """The whole command: full cache and a queue in every line, nothing lost: exit 0 even at
    --fail-on warning, and the finding says info."""
    from click.testing import CliRunner

    from triage.cli import main

    lines = [metrics_line({"running": 64, "waiting": 9 + i, "usage": 99.0, "swapped": 0}, i, True, 0) for i in range(5)]
    log = tmp_path / "busy.log"
    log.write_text("\n".join(lines) + "\n")
    run = CliRunner().invoke(main, ["scan", "--format", "concise", "--fail-on", "warning", str(log)])
    assert run.exit_code == 0, run.output
    assert f"{log}:1: info: VT303 " in run.output
