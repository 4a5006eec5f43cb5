"""`probe URL|FILE|-`: the figures equal those worked out by hand from the requests served."""

from __future__ import annotations

import json
import math
import time

import fake_servers
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from vllm_exposition import (
    SHAPES,
    Request,
    Served,
    buckets_1_2_5,
    exposition,
    upper_bound,
)

from triage.cli import main

PERCENTS = (50, 90, 99)
SHORTS = {"prompt": "prompt", "max_tokens": "max_tokens", "generation": "generated"}

servers = fake_servers.servers  # the fixture


def probe(*args, stdin: str | None = None):
    return CliRunner().invoke(main, ["probe", *map(str, args)], input=stdin)


def values_of(served: Served, short: str) -> list[int]:
    return [getattr(r, SHORTS[short]) for r in served.requests]


def expected_model(served: Served, window: int | None, kv_tokens: int | None) -> dict:
    """By hand from the raw requests: each percentile's bucket bound, the stand-in, the advice."""
    bounds = served.custom_buckets or buckets_1_2_5(served.max_model_len)
    found = {short: {p: upper_bound(values_of(served, short), p, bounds, window) for p in PERCENTS} for short in SHORTS}
    expected = {"percentiles": found, "stand_in": None, "stand_in_above": None}
    if found["prompt"][99] is None or found["max_tokens"][99] is None:
        top = bounds[-1]  # a p99 in +Inf with no window known: the stand-in is only known to exceed this
        expected["stand_in_above"] = int(sum(top if b is None else b for b in (found["prompt"][99], found["max_tokens"][99])))
    else:
        stand_in = int(found["prompt"][99] + found["max_tokens"][99])
        stand_in = min(stand_in, window) if window else stand_in
        recommended = math.ceil(stand_in / served.block_size) * served.block_size
        expected.update(stand_in=stand_in, recommended=recommended)
        if kv_tokens:
            expected["concurrency"] = round(kv_tokens / recommended, 2)
    return expected


def check_model(report: dict, expected: dict) -> None:
    for short, found in expected["percentiles"].items():
        for percent, bound in found.items():
            assert report["percentiles"][short][f"p{percent}"]["bound"] == bound, (short, percent)
    assert report["stand_in"] == expected["stand_in"]
    assert report["stand_in_above"] == expected["stand_in_above"]
    if expected["stand_in"] is not None:
        assert report["recommended_max_model_len"] == expected["recommended"]
        assert report.get("recommended_concurrency") == expected.get("concurrency")


requests = st.builds(
    lambda prompt, share, used, window: Request(min(prompt, window - 2), *budget(prompt, share, used, window)),
    st.integers(1, 40000), st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.sampled_from([4096, 32768]),
)


def budget(prompt: int, share: float, used: float, window: int) -> tuple[int, int]:
    room = max(1, window - min(prompt, window - 2))
    max_tokens = max(1, int(room * share))
    return max_tokens, max(1, int(max_tokens * used))


@settings(max_examples=40, deadline=None)
@given(
    shape=st.sampled_from(sorted(SHAPES)),
    workload=st.lists(requests, min_size=1, max_size=60),
    window=st.sampled_from([4096, 32768]),
    rounds=st.integers(1, 5),
    give_window=st.booleans(),
)
def test_saved_text_figures_equal_the_hand_worked_ones(tmp_path_factory, shape, workload, window, rounds, give_window):
    """Every shape by version, any workload that fits the window, any number of rounds (the
    counters scale, the percentiles do not): bounds, stand-in, window and concurrency."""
    workload = [Request(min(r.prompt, window - 2), min(r.max_tokens, window - min(r.prompt, window - 2)),
                        min(r.generated, r.max_tokens)) for r in workload]
    served = Served("org/model-a", window, workload, num_gpu_blocks=5000)
    path = tmp_path_factory.mktemp("scrape") / f"metrics-{shape}.txt"
    path.write_text(exposition(shape, [served], rounds))
    args = ["--format", "json", path] + (["--max-model-len", window] if give_window else [])
    result = probe(*args)
    assert result.exit_code == 0, result.output
    model = json.loads(result.stdout)["models"][0]
    kv_tokens = 5000 * 16 if SHAPES[shape].blocks_filled else None  # 0.8.5 writes num_gpu_blocks=None
    assert model["kv_tokens"] == kv_tokens
    assert model["requests"] == len(workload) * rounds
    check_model(model, expected_model(served, window if give_window else None, kv_tokens))


def test_custom_buckets_are_read_from_the_scrape(tmp_path):
    """0.32+ --custom-histogram-buckets: the bounds come from the text, not from 1-2-5."""
    workload = [Request(p, 300, 100) for p in (700, 1300, 1900, 2600, 3100, 3900, 5200, 6000, 7000, 7600)]
    served = Served("org/custom", 8192, workload, custom_buckets=[512.0, 1024.0, 3000.0, 6144.0, 8192.0])
    path = tmp_path / "custom.txt"
    path.write_text(exposition("0.33.0", [served]))
    model = json.loads(probe("--format", "json", path).stdout)["models"][0]
    assert {p: model["percentiles"]["prompt"][p]["bound"] for p in ("p50", "p90", "p99")} == {
        "p50": 6144, "p90": 8192, "p99": 8192}
    check_model(model, expected_model(served, None, 20000 * 16))


def test_url_reads_metrics_and_the_served_window(servers):
    """Each server's figures as by hand, the window from /v1/models, KV from cache_config_info."""
    for name in ("a", "b", "c"):
        server = servers[name]
        served = server.served[0]
        result = probe("--format", "json", "--fail-on", "never", server.url)
        assert result.exit_code == 0, result.output
        model = json.loads(result.stdout)["models"][0]
        assert model["max_model_len"] == served.max_model_len
        assert model["max_model_len_source"] == f"{server.url}/v1/models"
        kv_tokens = served.num_gpu_blocks * served.block_size if server.shape != "0.8.5" else None
        assert model["kv_tokens"] == kv_tokens
        assert model["kv_usage"] == served.usage and model["waiting"] == served.waiting
        check_model(model, expected_model(served, served.max_model_len, kv_tokens))


def test_url_of_the_metrics_page_itself_works_too(servers):
    result = probe("--format", "json", "--fail-on", "never", servers["c"].url + "/metrics")
    assert json.loads(result.stdout)["models"][0]["max_model_len"] == servers["c"].served[0].max_model_len


def test_exit_code_says_whether_there_is_pressure(servers):
    """B preempts (a warning, exit 1) and is full with requests waiting (VT303, a note); C: 0."""
    pressed = probe(servers["b"].url)
    assert pressed.exit_code == 1
    assert "VT301" in pressed.stdout and "VT303" in pressed.stdout
    calm = probe(servers["c"].url)
    assert calm.exit_code == 0 and "no warnings" in calm.stdout


@settings(max_examples=25, deadline=None)
@given(usage=st.sampled_from([0.2, 0.94, 0.95, 0.99, 1.0]), waiting=st.sampled_from([0, 1, 40]),
       preemptions=st.sampled_from([0, 1, 7]))
def test_a_full_cache_with_requests_waiting_is_a_note_and_only_preemptions_warn(tmp_path_factory, usage, waiting,
                                                                                 preemptions):
    """A busy server (VT303: the cache at 95% or more, requests waiting) is how one looks under
    load: a note, exit 0; only harm the server counted (VT301 preemptions) is a warning, exit 1."""
    served = Served("m", 4096, [Request(100, 200, 50)], usage=usage, waiting=waiting, preemptions_per_round=preemptions)
    saved = tmp_path_factory.mktemp("scrape") / "metrics.txt"
    saved.write_text(exposition("0.33.0", [served]))
    result = probe("--format", "json", saved)
    model = json.loads(result.stdout)["models"][0]
    busy = usage >= 0.95 and waiting > 0
    assert [w.split(":")[0] for w in model["warnings"]] == (["VT301"] if preemptions else [])
    assert [n.split(":")[0] for n in model["notes"] if n.startswith("VT")] == (["VT303"] if busy else [])
    assert result.exit_code == (1 if preemptions else 0), result.output
    text = probe(saved).stdout
    assert ("note: VT303" in text) == busy and ("no warnings" in text) == (not preemptions)


def test_text_report_says_the_percentiles_are_upper_bounds(servers):
    text = probe("--fail-on", "never", servers["c"].url).stdout
    assert "upper bounds" in text and "conservative stand-in" in text
    assert "--max-model-len" in text and "HTTP 400" in text


def test_bad_endpoints_get_one_line_and_exit_2(servers):
    """500, a hang (the timeout ends it), another program's page, a closed port."""
    for name, words in (("error", "HTTP 500"), ("hang", "within 0.5 s"), ("other", "not a Prometheus metrics text")):
        started = time.monotonic()
        result = probe("--timeout", "0.5", servers[name].url)
        assert result.exit_code == 2, (name, result.output)
        assert words in result.stderr, (name, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output
        assert time.monotonic() - started < 2.5, name
    closed = probe("--timeout", "0.5", "http://127.0.0.1:9")
    assert closed.exit_code == 2 and "cannot connect" in closed.stderr


def test_one_target_or_prometheus(servers):
    for args in ([], [servers["c"].url, "--prometheus", servers["c"].url]):
        result = probe(*args)
        assert result.exit_code == 2 and "give a server" in result.stderr


def test_texts_that_are_not_vllm_metrics(tmp_path):
    cases = {
        "empty.txt": ("", "without any vllm:* series"),
        "node.txt": ("# TYPE node_load1 gauge\nnode_load1 0.5\n", "without any vllm:* series"),
        "page.html": ("<html><body>hello</body></html>\n", "not a Prometheus metrics text"),
        "binary.bin": (None, "not text"),
    }
    for name, (text, words) in cases.items():
        path = tmp_path / name
        if text is None:
            path.write_bytes(b"\xff\xfe\x00metrics")
        else:
            path.write_text(text)
        result = probe(path)
        assert result.exit_code == 2 and words in result.stderr, (name, result.output)
    missing = probe(tmp_path / "no-such-file.txt")
    assert missing.exit_code == 2 and "No such file" in missing.stderr


def test_metrics_without_histograms_give_a_partial_report(tmp_path):
    """A scrape that lost its histograms still reports the gauges and names what is missing."""
    text = exposition("0.33.0", [Served("org/m", 8192, [Request(100, 200, 50)])])
    kept = "\n".join(line for line in text.splitlines() if "_tokens_bucket" not in line and "_tokens_count" not in line
                     and "_tokens_sum" not in line) + "\n"
    path = tmp_path / "gauges-only.txt"
    path.write_text(kept)
    result = probe(path)
    assert result.exit_code == 0, result.output
    assert "partial report" in result.stderr and "prompt" in result.stderr
    assert "needs the prompt and max_tokens histograms" in result.stdout
    assert "KV cache 25.0% used" in result.stdout


def test_stdin(servers):
    server = servers["c"]
    result = probe("--format", "json", "-", stdin=server.text(3))
    check_model(json.loads(result.stdout)["models"][0], expected_model(server.served[0], None, 6200 * 16))


def rejection_log(window: int, kv_tokens: int, rejected: list[tuple[int, int]]) -> str:
    """A V1 server's startup lines and its 400s, in vLLM's wording, with this test's numbers."""
    lines = [
        "(APIServer pid=1) INFO 10-06 08:00:01 [api_server.py:1839] vLLM API server version 0.11.0",
        f"(APIServer pid=1) INFO 10-06 08:00:10 [model.py:1510] Using max model len {window}",
        f"(EngineCore_DP0 pid=97) INFO 10-06 08:01:12 [kv_cache_utils.py:1087] GPU KV cache size: {kv_tokens:,} tokens",
    ]
    for prompt, max_tokens in rejected:
        lines.append(
            "(APIServer pid=1) ERROR 10-06 09:00:00 [serving_chat.py:222] Error in preprocessing prompt inputs\n"
            f"(APIServer pid=1) ValueError: 'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. "
            f"This model's maximum context length is {window} tokens and your request has {prompt} input tokens "
            f"({max_tokens} > {window} - {prompt}). None"
        )
    return "\n".join(lines) + "\n"


def test_log_joins_the_refused_requests(tmp_path):
    """The 0.8.5 scrape has no KV size and no window: the log gives both, and its 400s, which
    are 10% of all requests here, move the window advice to the refused requests' p99."""
    window = 8192
    workload = [Request(p, 1000, 400) for p in range(100, 100 + 90 * 70, 70)]  # 90 finished
    refused = [(7000 + 97 * i, 2000) for i in range(10)]  # 9000 ... 9873 tokens asked
    metrics = tmp_path / "metrics.txt"
    metrics.write_text(exposition("0.8.5", [Served("org/m", window, workload)]))
    log = tmp_path / "server.log"
    log.write_text(rejection_log(window, 99040, refused))
    result = probe("--format", "json", metrics, "--log", log)
    assert result.exit_code == 1, result.output  # refused requests are a warning
    model = json.loads(result.stdout)["models"][0]
    assert model["max_model_len"] == window and model["kv_tokens"] == 99040
    asked = sorted(p + m for p, m in refused)
    p99 = asked[math.ceil(0.99 * len(asked)) - 1]
    joined = model["joined"]
    assert joined["rejected"] == 10 and joined["all_requests"] == 100
    assert joined["p99_length"] == p99
    assert joined["recommended_max_model_len"] == math.ceil(p99 / 16) * 16
    assert joined["recommended_concurrency"] == round(99040 / joined["recommended_max_model_len"], 2)
    text = probe(metrics, "--log", log).stdout
    assert "10 refused requests" in text and "never reached the histograms" in text


def test_log_without_rejections_says_the_histograms_see_everything(tmp_path):
    metrics = tmp_path / "metrics.txt"
    metrics.write_text(exposition("0.33.0", [Served("org/m", 8192, [Request(500, 500, 200)] * 10)]))
    log = tmp_path / "server.log"
    log.write_text(rejection_log(8192, 50000, []))
    result = probe(metrics, "--log", log)
    assert result.exit_code == 0 and "no refused requests" in result.stdout
