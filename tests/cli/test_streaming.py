"""Live streams: a finding is printed while the input is still open; --tee; --follow.

Each test drives the real command through pipes. Waits are bounded (a generous timeout
per expected line) so a broken build fails instead of hanging; nothing asserts a duration.
"""

import json
import os
import queue
import signal
import subprocess
import sys
import threading

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pipes and signals as on Linux/macOS")

WAIT = 30  # seconds: a safety net, not a measurement
STARTUP = (
    "(APIServer pid=5) INFO 03-02 09:00:00 [api_server.py:1896] vLLM API server version 0.11.0\n"
    "(APIServer pid=5) INFO 03-02 09:00:01 [model.py:1510] Using max model len 8192\n"
)
OVERFLOW = (
    "(APIServer pid=5) ERROR 03-02 09:14:{second:02d} [serving_chat.py:283] ValueError: This model's maximum context "
    "length is 8192 tokens. However, you requested {total} tokens ({prompt} in the messages, 1000 in the completion). "
    "Please reduce the length of the messages or completion.\n"
)
ACCESS = '(APIServer pid=5) INFO:     10.0.0.1:4000 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request\n'


def overflow(second: int, prompt: int) -> str:
    return OVERFLOW.format(second=second, total=prompt + 1000, prompt=prompt)


class Triage:
    """The command in a subprocess, its stdout and stderr read line by line in threads."""

    def __init__(self, *args: str, stdin=subprocess.PIPE):
        env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "triage", "scan", *args], stdin=stdin, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=env,
        )
        self.out, self.err = queue.Queue(), queue.Queue()
        self.seen = {"out": [], "err": []}
        for stream, sink in ((self.process.stdout, self.out), (self.process.stderr, self.err)):
            threading.Thread(target=_pump, args=(stream, sink), daemon=True).start()

    def write(self, text: str) -> None:
        self.process.stdin.write(text.encode())
        self.process.stdin.flush()

    def wait_for(self, text: str, stream: str = "out") -> list[str]:
        """Lines read until one holds text; fails after WAIT seconds without it."""
        source = self.out if stream == "out" else self.err
        while True:
            try:
                line = source.get(timeout=WAIT)
            except queue.Empty:
                pytest.fail(f"no {text!r} on std{stream}; got {self.seen[stream]!r}")
            if line is None:
                pytest.fail(f"std{stream} ended without {text!r}; got {self.seen[stream]!r}")
            self.seen[stream].append(line)
            if text in line:
                return self.seen[stream]

    def finish(self) -> tuple[int, str, str]:
        code = self.process.wait(timeout=WAIT)
        return code, "".join(self.seen["out"] + _drain(self.out)), "".join(self.seen["err"] + _drain(self.err))


def _pump(stream, sink):
    for raw in iter(stream.readline, b""):
        sink.put(raw.decode())
    sink.put(None)


def _drain(source):
    lines = []
    while True:
        try:
            line = source.get(timeout=WAIT)
        except queue.Empty:
            return lines
        if line is None:
            return lines
        lines.append(line)


def test_a_finding_is_printed_before_the_input_ends_and_the_summary_at_eof():
    triage = Triage("--format", "text")
    triage.write(STARTUP + overflow(1, 7500) + ACCESS * 3)  # the server keeps logging after the error
    before_eof = triage.wait_for("VT101 context-length-exceeded")
    assert triage.process.poll() is None  # still reading: the input is open
    assert not any("in 1 input" in line for line in before_eof)  # no summary yet
    triage.write(overflow(2, 7600) + ACCESS * 3)
    triage.wait_for("VT101 context-length-exceeded")  # the second one, live too
    triage.process.stdin.close()
    code, out, _ = triage.finish()
    assert code == 1
    summary = out[out.index("== the whole picture"):]
    assert "(x2, last at line" in summary  # aggregated at the end: one finding with its count
    assert "It is the first of 2 requests refused alike in this run" in summary
    assert out.rstrip().endswith("1 finding (1 error) in 1 input")


def test_tee_passes_the_log_through_unchanged_and_reports_on_stderr():
    log = STARTUP + overflow(1, 7500) + ACCESS * 3 + "a line without a newline"
    run = subprocess.run([sys.executable, "-m", "triage", "scan", "--tee", "--format", "text"], input=log.encode(),
                         capture_output=True, timeout=WAIT, env={**os.environ, "NO_COLOR": "1"})
    assert run.stdout == log.encode()
    assert b"VT101 context-length-exceeded" in run.stderr and b"1 finding (1 error) in 1 input" in run.stderr
    assert run.returncode == 1


def test_json_stays_one_document_even_when_live_is_asked():
    run = subprocess.run([sys.executable, "-m", "triage", "scan", "--format", "json", "--live"],
                         input=(STARTUP + overflow(1, 7500)).encode(), capture_output=True, timeout=WAIT)
    document = json.loads(run.stdout)
    assert [f["code"] for f in document["findings"]] == ["VT101"]


def test_follow_reads_a_growing_file_through_truncation_and_rotation(tmp_path):
    path = tmp_path / "server.log"
    path.write_text(STARTUP)
    triage = Triage("--follow", "--format", "text", str(path), stdin=subprocess.DEVNULL)
    started = triage.wait_for("vllm-triage: following", stream="err")  # said before any finding
    assert started == [f"vllm-triage: following {path}; findings print as they are read, Ctrl-C ends with the summary\n"]
    with open(path, "a") as log:
        log.write(overflow(1, 7501) + ACCESS * 3)
    triage.wait_for("7,501 prompt +")
    path.write_text(overflow(2, 7602) + ACCESS * 3)  # truncated (copytruncate): shorter than what was read
    triage.wait_for("7,602 prompt +")
    path.rename(tmp_path / "server.log.1")  # rotated: a new file takes the name
    with open(tmp_path / "server.log.1", "a") as old:
        old.write(overflow(3, 7703) + ACCESS * 3)  # the old file's last words, read before the new file
    path.write_text(STARTUP + overflow(4, 7804) + ACCESS * 3)
    lines = triage.wait_for("7,804 prompt +")
    assert any("7,703 prompt +" in line for line in lines)
    triage.process.send_signal(signal.SIGINT)  # how --follow ends
    code, out, err = triage.finish()
    assert code == 1  # findings at or above --fail-on: Ctrl-C ends --follow like the end of a file
    assert "== the whole picture" in out and "in 1 input" in out
    assert "Traceback" not in err


def test_follow_needs_one_file(tmp_path):
    run = subprocess.run([sys.executable, "-m", "triage", "scan", "--follow", "a.log", "b.log"], capture_output=True,
                         text=True, timeout=WAIT, cwd=tmp_path)
    assert run.returncode == 2 and run.stderr.startswith("vllm-triage: error: --follow reads one file")
