"""A run's outcome and its first failure, read from its lifecycle lines."""

from pathlib import Path

from triage.diagnose.diagnoser import diagnose
from triage.input.reader import iter_chunks

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def summaries(matcher, path):
    with open(path, "rb") as stream:
        return [run.summary for run in diagnose(matcher.scan(path.name, iter_chunks(stream))).runs]


def test_the_first_rank_by_time_is_the_first_failure_and_each_other_process_a_consequence(matcher):
    (run,) = summaries(matcher, FIXTURES / "runs" / "tp-workers-fail-in-turn-v0102.log")
    assert (run.outcome, run.outcome_line) == ("failed", 13)
    first = run.first_failure
    assert (first.process, first.line, first.error_line, first.stage) == ("Worker_TP2 pid=1192", 12, 13, "startup")
    assert first.error.startswith("RuntimeError: CUDA out of memory occurred when warming up sampler")
    assert [(c.process, c.line, c.same_error) for c in run.consequences] == [
        ("Worker_TP0 pid=1190", 14, True), ("Worker_TP3 pid=1193", 16, True), ("Worker_TP1 pid=1191", 18, True),
        ("EngineCore_DP0 pid=1102", 20, False), ("APIServer pid=880", 21, False),
    ]
    assert (run.facts["served_max_model_len"], run.fact_lines["served_max_model_len"]) == (131072, 11)
    assert (run.facts["window_source"], run.facts["kv_tokens"], run.fact_lines["kv_tokens"]) == ("config.json", 472128, 10)


def test_a_healthy_start_is_ready_at_its_ready_line(matcher):
    (run,) = summaries(matcher, FIXTURES / "gate" / "healthy.log")
    assert run.outcome == "ready" and run.first_failure is None and run.consequences == []
    assert "Application startup complete" in (FIXTURES / "gate" / "healthy.log").read_text().splitlines()[run.outcome_line - 1] \
        or "Starting vLLM" in (FIXTURES / "gate" / "healthy.log").read_text().splitlines()[run.outcome_line - 1]


def test_a_log_cut_before_ready_is_unknown(matcher):
    (run,) = summaries(matcher, FIXTURES / "gate" / "never-ready.log")
    assert run.outcome == "unknown" and run.outcome_line is None
