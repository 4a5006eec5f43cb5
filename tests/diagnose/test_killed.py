"""A process killed without a traceback (SIGKILL, the OOM killer, a segfault) is the first
failure of its run, at the line of another process that reports its death, in every shape
vLLM reports one (the shared lifecycle catalog: V0 and V1 multiproc, Ray, the engine core,
the frontend's summaries), before or after ready, whatever its consequences print afterwards.
"""

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from triage.pipeline import ScanOptions, Text, scan


@dataclass(frozen=True)
class Numbers:
    api_pid: int
    engine_pid: int
    dead_pid: int
    rank: int
    exit_code: int  # negative: the signal that killed it


def header(process: str | None, level: str, second: int, where: str) -> str:
    tag = f"({process}) " if process else ""
    return f"{tag}{level} 05-21 11:{second // 60:02d}:{second % 60:02d} [{where}]"


@dataclass(frozen=True)
class Death:
    """A death line as vLLM prints it, templates over Numbers: the process that prints it
    (None: untagged), its level and logger place, the message, and the process the analysis
    must name. where "v0:...": V0's header (no bracket before the place); None: no header at
    all (an exception line the frontend prints on its own)."""

    printer: str | None
    level: str
    where: str | None
    message: str
    named: str

    def __call__(self, n: Numbers, second: int) -> tuple[str, str]:
        values = vars(n)
        message, named = self.message.format(**values), self.named.format(**values)
        printer = self.printer.format(**values) if self.printer else None
        if self.where is None:
            return f"({printer}) {message}", named
        if self.where.startswith("v0:"):
            return f"{self.level} 05-21 11:{second // 60:02d}:{second % 60:02d} {self.where[3:]}] {message}", named
        return f"{header(printer, self.level, second, self.where)} {message}", named


ENGINE, API = "EngineCore_DP0 pid={engine_pid}", "APIServer pid={api_pid}"
# V0's engine process is untagged; V1's frontend is APIServer and its engine core EngineCore_DP0.
SHAPES = [
    Death(None, "ERROR", "v0:multiproc_worker_utils.py:116", "Worker VllmWorkerProcess pid {dead_pid} died, exit code: {exit_code}",
          "VllmWorkerProcess pid={dead_pid}"),
    Death(ENGINE, "ERROR", "multiproc_executor.py:154", "Worker proc VllmWorker-{rank} died unexpectedly, shutting down executor.",
          "VllmWorker-{rank}"),
    Death(ENGINE, "ERROR", "multiproc_executor.py:314",
          "Worker proc VllmWorker-{rank} died unexpectedly (exit code: {exit_code}), shutting down executor.", "VllmWorker-{rank}"),
    Death(ENGINE, "ERROR", "ray_executor_v2.py:522", "RayWorkerProc rank=[{rank}] died unexpectedly, shutting down executor.",
          "RayWorkerProc rank=[{rank}]"),
    Death(API, "ERROR", "core_client.py:564", "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
          ENGINE),  # the tag its own lines carry
    Death(API, "WARNING", "core_client.py:702", "[shutdown] MPClient: engine core exited unexpectedly; starting cleanup",
          "engine core"),  # the line names no process: as it says it
    Death(None, "ERROR", "utils.py:288",
          "Exception occurred while running API servers: Process EngineCore_DP1 (PID: {dead_pid}) died with exit code {exit_code}",
          "EngineCore_DP1 pid={dead_pid}"),
    Death(API, "", None, "RuntimeError: Engine core initialization failed. See root cause above. "
          "Failed core proc(s): {{'EngineCore_DP0': {exit_code}}}", ENGINE),
]


def preamble(n: Numbers) -> list[str]:
    """What a start prints before anything dies: its version and the engine core's KV cache."""
    return [
        f"{header(f'APIServer pid={n.api_pid}', 'INFO', 1, 'api_server.py:1896')} vLLM API server version 0.10.2",
        f"{header(f'EngineCore_DP0 pid={n.engine_pid}', 'INFO', 20, 'kv_cache_utils.py:1087')} GPU KV cache size: 98,304 tokens",
    ]


def ready(n: Numbers) -> list[str]:
    return [
        f"{header(f'APIServer pid={n.api_pid}', 'INFO', 30, 'api_server.py:1971')} Starting vLLM API server 0 on http://0.0.0.0:8000",
        f"(APIServer pid={n.api_pid}) INFO:     Application startup complete.",
    ]


def consequences(n: Numbers, second: int) -> dict[str, list[str]]:
    """What the other processes print after a death (each a consequence, never the root)."""
    engine, api = f"EngineCore_DP0 pid={n.engine_pid}", f"APIServer pid={n.api_pid}"
    fatal = header(engine, "ERROR", second, "core.py:700")
    dead = header(api, "ERROR", second + 1, "async_llm.py:480")
    return {
        "killing": [f"INFO 05-21 11:{second // 60:02d}:{second % 60:02d} multiproc_worker_utils.py:120] Killing local vLLM worker processes"],
        "fatal error": [
            f"{fatal} EngineCore encountered a fatal error.",
            f"{fatal} Traceback (most recent call last):",
            f'{fatal}   File "/opt/venv/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 691, in run_engine_core',
            f"{fatal} RuntimeError: Executor failed.",
        ],
        "engine dead": [
            f"{dead} AsyncLLM output_handler failed.",
            f"{dead} Traceback (most recent call last):",
            f'{dead}   File "/opt/venv/lib/python3.12/site-packages/vllm/v1/engine/async_llm.py", line 439, in output_handler',
            f"{dead} vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.",
        ],
        "request failed": [f"{header(api, 'INFO', second + 2, 'async_llm.py:421')} Request chatcmpl-{n.rank}a7 failed (engine dead)."],
        "terminated": [f"{header(f'Worker_TP0 pid={n.dead_pid + 1}', 'WARNING', second + 2, 'multiproc_executor.py:866')} WorkerProc was terminated"],
    }


numbers = st.builds(
    Numbers, api_pid=st.integers(100, 9999), engine_pid=st.integers(10000, 19999), dead_pid=st.integers(20000, 29999),
    rank=st.integers(0, 7), exit_code=st.sampled_from([-9, -11, -6]),
)


def summary_and_findings(lines: list[str]):
    result = scan([Text("killed.log", ("\n".join(lines) + "\n").encode())], ScanOptions())
    (run,) = [run.summary for run in result.runs["killed.log"]]
    return run, list(result.findings)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.sampled_from(SHAPES), n=numbers, after_ready=st.booleans(),
    later=st.lists(st.sampled_from(["killing", "fatal error", "engine dead", "request failed", "terminated"]), unique=True),
)
def test_a_process_killed_without_a_traceback_is_the_root_at_the_line_that_reports_it(shape, n, after_ready, later):
    death, process = shape(n, 40)
    lines = preamble(n) + (ready(n) if after_ready else [])
    death_line = len(lines) + 1
    lines.append(death)
    printed = consequences(n, 41)
    for name in later:
        lines.extend(printed[name])
    run, findings = summary_and_findings(lines)

    first = run.first_failure
    assert (first.process, first.line, first.error_line, first.died) == (process, death_line, death_line, True)
    assert first.stage == ("runtime" if after_ready else "startup")
    assert all(not c.died and c.process != process for c in run.consequences)
    assert run.outcome == ("ready" if after_ready else "failed")
    code = "VT306" if after_ready else "VT207"
    (failed,) = [f for f in findings if f.code == code]
    assert (failed.line, failed.process) == (death_line, process)
    assert f"{process} failed first: it died without a traceback of its own, as line {death_line} reports" in " ".join(failed.cause)
    if not after_ready:
        assert any("exit code -9 is SIGKILL" in fix for fix in failed.fixes)


@settings(max_examples=30, deadline=None)
@given(shape=st.sampled_from(SHAPES), n=numbers)
def test_a_traceback_printed_before_the_death_stays_the_root(shape, n):
    """A process that raised and then died printed its traceback first: that is the root."""
    worker = header(f"Worker_TP1 pid={n.dead_pid}", "ERROR", 35, "multiproc_executor.py:671")
    raised = [
        f"{worker} WorkerProc hit an exception.",
        f"{worker} Traceback (most recent call last):",
        f'{worker}   File "/opt/venv/lib/python3.12/site-packages/vllm/v1/worker/gpu_worker.py", line 212, in determine_available_memory',
        f"{worker} RuntimeError: CUDA error: an illegal memory access was encountered",
    ]
    lines = preamble(n) + raised + [shape(n, 40)[0]]
    run, _ = summary_and_findings(lines)
    first = run.first_failure
    assert (first.process, first.line, first.error_line, first.died) == (f"Worker_TP1 pid={n.dead_pid}", 3, 6, False)
    assert first.error == "RuntimeError: CUDA error: an illegal memory access was encountered"


def test_a_frontend_summary_with_a_python_exit_code_names_no_kill():
    """'Failed core proc(s)' with a code 1 among them: that engine raised (its traceback is the
    root, or out of the window); the negative codes beside it are teardown victims."""
    n = Numbers(4242, 10001, 20002, 1, -9)
    line = (f"(APIServer pid={n.api_pid}) RuntimeError: Engine core initialization failed. See root cause above. "
            "Failed core proc(s): {'EngineCore_DP0': -15, 'EngineCore_DP1': 1}")
    run, _ = summary_and_findings(preamble(n) + [line])
    assert run.first_failure is None or not run.first_failure.died
