"""Several startup runs in one log stay apart; the first rank to fail is the root."""

import json
import subprocess
import sys
from pathlib import Path

from triage.diagnose.diagnoser import diagnose
from triage.input.reader import iter_chunks
from triage.rules.ruleset import load_rules
from conftest import scan_events

RUNS = Path(__file__).resolve().parents[2] / "fixtures" / "runs"
CHECKS = [r for r in load_rules().rules if r.kind == "check"]


def diagnose_fixture(matcher, name):
    with open(RUNS / name, "rb") as stream:
        return diagnose(matcher.scan(name, iter_chunks(stream)), checks=CHECKS)


def test_a_restart_starts_a_second_run_and_facts_do_not_cross(matcher):
    result = diagnose_fixture(matcher, "restart-after-kv-shortfall-v0110.log")
    assert len(result.runs) == 2
    first, second = (run.facts for run in result.runs)
    assert (first["max_model_len"], second["max_model_len"]) == (65536, 40960)
    assert "kv_tokens" not in first  # the capacity lines belong to the second run only
    by_code = {f.code: f for f in result.findings}
    assert (by_code["VT201"].run, by_code["VT101"].run, by_code["VT211"].run) == (1, 2, 2)
    assert by_code["VT201"].facts == {"gpu_memory_utilization": 0.88}
    window = by_code["VT101"]
    assert window.count == 3
    assert "It is the first of 3 requests refused alike in this run" in " ".join(window.cause)
    assert "VT210" not in by_code  # 1.10 sequences at full length: the warning, not the info
    assert "only 1.10 sequences of full length fit" in " ".join(by_code["VT211"].cause)


def test_the_markers_of_one_startup_make_one_run(matcher):
    text = (
        "(APIServer pid=1) INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.9.2\n"
        "(APIServer pid=1) INFO 01-01 00:00:00 [utils.py:1] non-default args: {'model': 'm'}\n"
        "(EngineCore_DP0 pid=2) INFO 01-01 00:00:09 [core.py:1] Initializing a V1 LLM engine (v0.9.2) with config: model='m', max_seq_len=4096, tensor_parallel_size=1\n"
        "(EngineCore_DP1 pid=3) INFO 01-01 00:00:09 [core.py:1] Initializing a V1 LLM engine (v0.9.2) with config: model='m', max_seq_len=4096, tensor_parallel_size=1\n"
    )
    assert len(diagnose(scan_events(matcher, "x", text)).runs) == 1


def test_lines_before_any_startup_are_a_run_of_their_own_when_they_hold_problems(matcher):
    text = (
        "ERROR 01-01 00:00:00 [serving_chat.py:1] ValueError: This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.\n"
        "INFO 01-01 00:10:00 [api_server.py:1] vLLM API server version 0.9.2\n"
        "INFO 01-01 00:10:01 [model.py:1] Using max model len 8192\n"
    )
    result = diagnose(scan_events(matcher, "x", text))
    assert [f.run for f in result.findings] == [1]
    assert result.runs[0].facts == {} and result.runs[1].facts["max_model_len"] == 8192


def test_the_first_rank_to_fail_is_the_root_and_the_others_its_consequences(matcher):
    result = diagnose_fixture(matcher, "tp-workers-fail-in-turn-v0102.log")
    failed = sorted((f for f in result.findings if f.code == "VT304"), key=lambda f: f.line)
    assert [f.rank for f in failed] == ["TP2", "TP0", "TP3", "TP1"]
    assert [f.root for f in failed] == [True, False, False, False]
    assert all(f.consequence_of == "VT304 at tp-workers-fail-in-turn-v0102.log:13 (TP2)" for f in failed[1:])


def test_without_timestamps_line_order_decides_the_root(matcher):
    line = "(Worker_TP{rank} pid=9{rank}) RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests. Please try lowering `max_num_seqs`.\n"
    result = diagnose(scan_events(matcher, "x", line.format(rank=3) + line.format(rank=1)))
    assert [(f.rank, f.root) for f in sorted(result.findings, key=lambda f: f.line)] == [("TP3", True), ("TP1", False)]


def test_text_and_json_show_runs_and_the_root():
    log = str(RUNS / "tp-workers-fail-in-turn-v0102.log")
    text = _scan("--format", "text", str(RUNS / "restart-after-kv-shortfall-v0110.log"))
    first, second = (str(RUNS / "restart-after-kv-shortfall-v0110.log") + f" run {n} (lines" for n in (1, 2))
    assert text.index(first) < text.index("VT201") < text.index(second) < text.index("VT101")
    assert "figures from this run's log: --gpu-memory-utilization 0.88" in text
    assert "(failed first: the root)" in _scan("--format", "text", log)
    document = json.loads(_scan("--format", "json", log))
    roots = {f["rank"]: (f["root"], f["consequence_of"], f["run"]) for f in document["findings"] if f["code"] == "VT304"}
    assert roots["TP2"] == (True, None, 1)
    assert roots["TP1"][0] is False and roots["TP1"][1].endswith("tp-workers-fail-in-turn-v0102.log:13 (TP2)")


def _scan(*args):
    run = subprocess.run([sys.executable, "-m", "triage", "scan", "--fail-on", "never", *args],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout
