"""`| head` ends quietly; Ctrl-C prints what was found so far and exits 130."""

import array
import fcntl
import os
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="uses /proc and FIONREAD")

MESSAGE = (
    "This model's maximum context length is {window} tokens. However, you requested {total} tokens "
    "({prompt} in the messages, 1000 in the completion). Please reduce the length of the messages or completion."
)


def overflow_line(number: int) -> str:
    window, prompt = 8192, 8000 + number
    message = MESSAGE.format(window=window, total=prompt + 1000, prompt=prompt)
    return f"ERROR 03-02 09:14:11 serving_chat.py:158] ValueError: {message}\n"


def triage(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "triage", "scan", *args], **kwargs)


def test_a_closed_stdout_ends_quietly_with_the_scan_exit_code(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("".join(overflow_line(n) for n in range(300)))
    process = triage("--format", "json", str(log), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader is gone before anything is written
    stderr = process.stderr.read()
    assert process.wait(timeout=120) == 1  # findings: the scan itself completed
    assert stderr == b""


def test_pipe_into_head_ends_quietly(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("".join(overflow_line(n) for n in range(300)))  # ~300 findings: far more than a pipe holds
    command = f"{sys.executable} -m triage scan --format text {log} 2>{tmp_path / 'stderr'} | head -n 1"
    run = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    assert run.stdout.startswith("VT101")
    assert (tmp_path / "stderr").read_text() == ""  # no traceback, no "Exception ignored"


def unread_bytes(pipe) -> int:
    count = array.array("i", [0])
    fcntl.ioctl(pipe.fileno(), termios.FIONREAD, count)
    return count[0]


def wait_until_idle_on_stdin(process: subprocess.Popen) -> None:
    """Until the scanner has read all we wrote and sleeps waiting for more (no timing assertions)."""
    deadline = time.monotonic() + 60
    while unread_bytes(process.stdin) and time.monotonic() < deadline:
        time.sleep(0.05)
    stat = Path(f"/proc/{process.pid}/stat")
    while time.monotonic() < deadline:
        first = stat.read_text().rsplit(")", 1)[1].split()[0]
        time.sleep(0.2)
        if first == "S" and stat.read_text().rsplit(")", 1)[1].split()[0] == "S":
            return
    pytest.fail("the scanner never went idle")


def interrupt(data: bytes) -> tuple[int, str, str]:
    process = triage("--format", "text", "-", stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdin.write(data)
    process.stdin.flush()
    wait_until_idle_on_stdin(process)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    return process.returncode, stdout.decode(), stderr.decode()


def test_ctrl_c_prints_the_findings_so_far_and_exits_130():
    filler = "".join(f"INFO 03-02 09:14:{n:02d} metrics.py:345] Avg prompt throughput: 0.0 tokens/s\n" for n in range(5))
    code, stdout, stderr = interrupt((overflow_line(1) + filler).encode())  # the stream stays open
    assert code == 130
    assert stdout.startswith("VT101 context-length-exceeded")
    assert "1 finding (1 error) in 1 input" in stdout
    assert "interrupted" in stderr and "Traceback" not in stderr


def test_ctrl_c_before_anything_was_found_still_prints_a_summary():
    code, stdout, stderr = interrupt(b"INFO 03-02 09:14:00 api_server.py:1] starting\n")
    assert code == 130
    assert stdout.strip() == "no findings in 1 input"
    assert "Traceback" not in stderr


# --- every command, not only scan -------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
GATE_FAILS = ["gate", "fixtures/gate/short-window.log", "--min-max-model-len", "65536", "--format", "json"]
COMMANDS = [  # (arguments, the exit code the command has when its output is read)
    (GATE_FAILS, 1),
    (["gate", "fixtures/gate/healthy.log", "--require-ready"], 0),
    (["plan", "fixtures/models/llama-3.1-8b-instruct", "--gpu", "H100", "--format", "json"], 0),
    (["budget", "--max-model-len", "8192", "--prompt-tokens", "9000"], 1),  # the prompt must be cut
    (["rules", "list"], 0),
    (["rules", "show", "VT201"], 0),
    (["rules", "test", "fixtures"], 0),
    (["explain"], 0),
    (["explain", "kv-cache", "--format", "json"], 0),
]


def run_into_closed_pipe(args: list[str]) -> tuple[int, bytes]:
    """The command with its stdout a pipe whose reader is gone before it writes anything
    (`| head -1` that has its line: a reader that leaves while a big report is written in one
    write goes unnoticed by Python, a later write or the flush at exit does not)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        run = subprocess.run([sys.executable, "-m", "triage", *args], stdout=write_end, stderr=subprocess.PIPE,
                             cwd=ROOT, timeout=120)
    finally:
        os.close(write_end)
    return run.returncode, run.stderr


@pytest.mark.parametrize(("args", "code"), COMMANDS, ids=[" ".join(a[:2]) for a, _ in COMMANDS])
def test_every_command_ends_quietly_with_its_own_exit_code_when_the_reader_is_gone(args, code):
    read = subprocess.run([sys.executable, "-m", "triage", *args], capture_output=True, cwd=ROOT, timeout=120)
    assert read.returncode == code and read.stdout  # the same command, read to the end
    assert run_into_closed_pipe(args) == (code, b"")  # no traceback, no "Exception ignored", not 141

