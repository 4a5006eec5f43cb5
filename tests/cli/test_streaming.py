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
from pathlib import Path

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
    added = out[out.index("== what the end of the input added =="):]
    # the end adds only what changed: the count and the run's figures, under the finding's first line
    assert added.split("\n\n")[1].startswith("VT101 context-length-exceeded")
    assert "(2 lines, last at line" in added
    assert "It is the first of 2 requests refused alike in this run" in added
    assert "vLLM said:" not in added  # printed above already
    assert out.rstrip().endswith("1 finding (1 error) in 1 input")


def test_a_stream_whose_findings_were_all_printed_ends_with_the_summary_alone():
    triage = Triage("--format", "text")
    triage.write(STARTUP + overflow(1, 7500) + ACCESS * 3)
    triage.wait_for("VT101 context-length-exceeded")
    triage.process.stdin.close()
    code, out, _ = triage.finish()
    assert code == 1
    assert out.count("VT101 context-length-exceeded") == 1
    assert "== what the end of the input added" not in out
    assert out.endswith("\n\n1 finding (1 error) in 1 input\n")


def test_jsonl_streams_on_a_pipe_like_text():
    triage = Triage("--format", "jsonl")
    triage.write(STARTUP + overflow(1, 7500) + ACCESS * 3)
    [line] = triage.wait_for('"code": "VT101"')  # before the input ends
    assert triage.process.poll() is None
    assert json.loads(line)["fields"]["prompt_tokens"] == 7500
    triage.process.stdin.close()
    code, out, _ = triage.finish()
    assert code == 1 and [json.loads(x)["code"] for x in out.splitlines()] == ["VT101"]  # nothing new at the end


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
    assert "== what the end of the input added ==" in out and out.rstrip().endswith("in 1 input")
    assert out.count("vLLM said:") == 4  # each refusal quoted once, as it was read; the end adds no quote
    assert "Traceback" not in err


def test_follow_needs_one_file(tmp_path):
    run = subprocess.run([sys.executable, "-m", "triage", "scan", "--follow", "a.log", "b.log"], capture_output=True,
                         text=True, timeout=WAIT, cwd=tmp_path)
    assert run.returncode == 2 and run.stderr.startswith("vllm-triage: error: --follow reads one file")


# --- a finished input piped in: one report ---------------------------------------------

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CLIENT_ERROR = (
    "openai.BadRequestError: Error code: 400 - {'object': 'error', 'message': \"This model's maximum context "
    "length is 8192 tokens. However, you requested 9121 tokens (8121 in the messages, 1000 in the completion). "
    "Please reduce the length of the messages or completion.\", 'type': 'BadRequestError', 'param': None, 'code': 400}\n"
)


def piped(data: bytes, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "triage", "scan", *args], input=data, capture_output=True,
                          timeout=WAIT, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"})


def test_a_piped_single_error_yields_one_finding_block():
    run = piped(CLIENT_ERROR.encode(), "--format", "text")
    out = run.stdout.decode()
    blocks = out.split("\n\n")
    assert run.returncode == 1
    assert out.count("VT101 context-length-exceeded") == 1 and out.count("vLLM said:") == 1
    assert blocks[0].startswith("VT101 context-length-exceeded [request, error]")
    assert "  at <stdin>:1\n" in blocks[0]
    assert blocks[-1] == "1 finding (1 error) in 1 input\n"
    assert "==" not in out  # no second report under a heading


def test_a_client_error_and_its_traceback_are_one_refused_request():
    data = (FIXTURES / "client-openai-python-traceback.log").read_bytes()
    text = piped(data, "--format", "text").stdout.decode()
    assert text.count("VT102 prompt-exceeds-context") == 1
    assert "  at <stdin>:4 (printed again at line 22)\n" in text
    assert "refused alike" not in text and "p50" not in text and "median" not in text
    [finding] = json.loads(piped(data, "--format", "json").stdout)["findings"]
    assert (finding["count"], finding["line"], finding["also_at"]) == (1, 4, [22])


def test_two_refusals_logged_alike_stay_two():
    """Only an exception line after a logged one is its echo: two logged refusals (or two raised) are two."""
    logged = "2025-10-14 16:20:31,416 ERROR app: request failed: " + CLIENT_ERROR
    for data in (logged * 2, CLIENT_ERROR * 2):
        [finding] = json.loads(piped(data.encode(), "--format", "json").stdout)["findings"]
        assert (finding["count"], finding["also_at"]) == (2, [])


# one log of each shape: a startup error, a client traceback, many refusals, ranks failing, hosted
SHAPES = ["startup-kv-too-small-v1.log", "client-openai-python-traceback.log", "request-many-rejections-v0110.log",
          "runs/tp-workers-fail-in-turn-v0102.log", "hosted-openai-context-length-exceeded.log"]


@pytest.mark.parametrize("name", SHAPES)
def test_a_finished_log_piped_in_gives_the_one_report_a_file_gets(name):
    """What a pipe that ends gives is exactly the report without live output: nothing twice."""
    data = (FIXTURES / name).read_bytes()
    assert piped(data, "--format", "text").stdout == piped(data, "--format", "text", "--no-live").stdout
