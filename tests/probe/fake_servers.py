"""Local servers on 127.0.0.1 for the probe tests: vLLM-format /metrics and /v1/models of
three servers (different versions and workloads), one that answers 500, one that hangs,
one that serves something else; and a real Prometheus scraping the three.

Everything binds to loopback on a free port and stops in the fixtures' finalizers."""

from __future__ import annotations

import json
import random
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from vllm_exposition import Request, Served, exposition, models_json

ROUNDS_PER_SECOND = 2  # the served counters grow by one workload every half second
HANG_SECONDS = 3.0


def workload(seed: int, count: int, window: int, prompt_scale: float, budget_choices: list[int]) -> list[Request]:
    """Requests a server finished: prompts spread over a few decades, max_tokens from a
    client's choices (0: the client sent none, so vLLM counts the rest of the window)."""
    rng = random.Random(seed)
    requests = []
    for _ in range(count):
        prompt = min(window - 64, max(1, int(rng.lognormvariate(0, 1.1) * prompt_scale)))
        budget = rng.choice(budget_choices) or window - prompt
        budget = min(budget, window - prompt)
        generated = max(1, min(budget, int(rng.expovariate(1 / 300))))
        requests.append(Request(prompt, budget, generated, "length" if generated == budget else "stop"))
    return requests


@dataclass
class FakeServer:
    kind: str  # vllm, error, hang, other
    shape: str = ""
    served: list[Served] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    stop: threading.Event = field(default_factory=threading.Event)
    httpd: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def target(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"{host}:{port}"

    def rounds(self) -> int:
        return 1 + int((time.monotonic() - self.started) * ROUNDS_PER_SECOND)

    def text(self, rounds: int = 1) -> str:
        return exposition(self.shape, self.served, rounds)


def handler_for(server: FakeServer):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet test output
            pass

        def answer(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if server.kind == "hang":
                server.stop.wait(HANG_SECONDS)  # longer than the probe's timeout; ends at teardown
                self.close_connection = True  # the client has given up: nothing to answer
                return None
            if server.kind == "error":
                return self.answer(500, b"Internal Server Error", "text/plain")
            if server.kind == "other":
                return self.answer(200, b"<html><body><h1>It works</h1></body></html>", "text/html")
            if self.path == "/metrics":
                text = server.text(server.rounds()).encode()
                return self.answer(200, text, "text/plain; version=0.0.4; charset=utf-8")
            if self.path == "/v1/models":
                return self.answer(200, json.dumps(models_json(server.served)).encode(), "application/json")
            return self.answer(404, b'{"detail":"Not Found"}', "application/json")

    return Handler


def start(server: FakeServer) -> FakeServer:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(server))
    httpd.daemon_threads = True
    server.httpd = httpd
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    return server


WINDOW_A, WINDOW_C = 32768, 8192


def fleet_servers() -> dict[str, FakeServer]:
    """A and B serve the same model (0.8.5 and 0.10.2, their own workloads); C another (0.33.0)."""
    model_a, model_c = "Qwen/Qwen2.5-14B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"
    a = Served(model_a, WINDOW_A, workload(11, 400, WINDOW_A, 900, [0, 1024, 2048]), usage=0.41, running=7,
               waiting=0, preemptions_per_round=0, refused_per_round=2)
    b = Served(model_a, WINDOW_A, workload(12, 400, WINDOW_A, 1500, [1024, 4096]), num_gpu_blocks=9000,
               usage=0.97, running=12, waiting=4, preemptions_per_round=3)
    c = Served(model_c, WINDOW_C, workload(13, 300, WINDOW_C, 300, [256, 512]), num_gpu_blocks=6200, usage=0.12,
               running=2, waiting=0, preemptions_per_round=0)
    return {
        "a": FakeServer("vllm", "0.8.5", [a]),
        "b": FakeServer("vllm", "0.10.2", [b]),
        "c": FakeServer("vllm", "0.33.0", [c]),
    }


@pytest.fixture(scope="session")
def servers():
    made = {**fleet_servers(), "error": FakeServer("error"), "hang": FakeServer("hang"), "other": FakeServer("other")}
    for server in made.values():
        start(server)
    yield made
    for server in made.values():
        server.stop.set()
        server.httpd.shutdown()
        server.httpd.server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get_json(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return json.loads(answer.read())
    except (OSError, ValueError):
        return None


SCRAPE_WAIT = 45.0  # seconds at most for Prometheus to start and scrape each target 5 times


@pytest.fixture(scope="session")
def prometheus(servers):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("the prometheus binary is not installed (apt-get install prometheus)")
    folder = Path(tempfile.mkdtemp(prefix="vllm-triage-prometheus-"))
    targets = [servers[name].target for name in ("a", "b", "c")]
    config = folder / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: vllm\n    static_configs:\n"
        f"      - targets: {json.dumps(targets)}\n"
    )
    port = free_port()
    process = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_scrapes(url, process, len(targets))
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        shutil.rmtree(folder, ignore_errors=True)


def wait_for_scrapes(url: str, process: subprocess.Popen, targets: int) -> None:
    query = "count(count_over_time(up{job=\"vllm\"}[1m]) >= 5)"
    deadline = time.monotonic() + SCRAPE_WAIT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"prometheus exited with {process.returncode}")
        answer = get_json(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": query}))
        result = (answer or {}).get("data", {}).get("result", [])
        if result and float(result[0]["value"][1]) >= targets:
            return
        time.sleep(0.5)
    pytest.fail(f"prometheus did not scrape the {targets} servers 5 times within {SCRAPE_WAIT:g} s")



