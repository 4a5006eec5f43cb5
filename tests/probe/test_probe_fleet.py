"""`probe --prometheus`: a real Prometheus scrapes three local vLLM-format servers; the fleet's
figures equal the ones worked out by hand from the buckets served, and the single-server ones."""

from __future__ import annotations

import json
import math

import fake_servers
import pytest
from click.testing import CliRunner
from vllm_exposition import buckets_1_2_5, exposition

from triage.cli import main

PERCENTS = (50, 90, 99)
SHORTS = {"prompt": "prompt", "max_tokens": "max_tokens", "generation": "generated"}
# Prometheus extrapolates each target's rate on its own: two servers' shares of a model's
# rate are equal only up to timing. The hand-worked figures must hold for any share in this band.
SHARE_RATIOS = [0.7 + 0.05 * i for i in range(15)]  # B's weight over A's, 0.7 ... 1.4
RANGE = "1m"

prometheus = fake_servers.prometheus  # the fixture
servers = fake_servers.servers  # the fixture


def probe(*args):
    return CliRunner().invoke(main, ["probe", *map(str, args)])


def cumulative(values: list[int], bounds: list[float]) -> list[float]:
    return [float(sum(1 for v in values if v <= b)) for b in [*bounds, math.inf]]


def mixed(parts: list[tuple[float, list[int]]], bounds: list[float]) -> list[float]:
    """The cumulative bucket counts of several servers' values, each weighted."""
    columns = [cumulative(values, bounds) for _, values in parts]
    return [sum(weight * column[i] for (weight, _), column in zip(parts, columns, strict=True)) for i in range(len(bounds) + 1)]


def bound_by_hand(counts: list[float], bounds: list[float], percent: int) -> float | None:
    """Nearest rank over bucket counts: the first bound holding percent% of the requests."""
    rank = percent * counts[-1] / 100
    for bound, count in zip([*bounds, math.inf], counts, strict=True):
        if count >= rank:
            return bound if bound != math.inf else None
    return None


def quantile_by_hand(counts: list[float], bounds: list[float], percent: int) -> float:
    """What histogram_quantile does: linear inside the bucket; in +Inf, the top finite bound."""
    rank = percent / 100 * counts[-1]
    for i, count in enumerate(counts):
        if count >= rank:
            if i == len(bounds):
                return bounds[-1]
            lower, below = (bounds[i - 1], counts[i - 1]) if i else (0.0, 0.0)
            return lower + (bounds[i] - lower) * (rank - below) / (count - below)
    raise AssertionError("unreachable")


def values(server, short: str) -> list[int]:
    return [getattr(r, SHORTS[short]) for r in server.served[0].requests]


@pytest.fixture(scope="module")
def fleet(prometheus):
    result = probe("--prometheus", prometheus, "--selector", '{job="vllm"}', "--range", RANGE, "--format", "json",
                   "--show-queries", "--fail-on", "never")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    return {m["model"]: m for m in report["models"]}, report


def test_model_on_two_servers_sums_their_buckets(fleet, servers):
    models, _ = fleet
    a, b = servers["a"], servers["b"]
    model = models[a.served[0].model]
    bounds = buckets_1_2_5(a.served[0].max_model_len)
    for short in SHORTS:
        for percent in PERCENTS:
            by_share = {bound_by_hand(mixed([(1.0, values(a, short)), (r, values(b, short))], bounds), bounds, percent)
                        for r in SHARE_RATIOS}
            assert len(by_share) == 1, f"test data: {short} p{percent} depends on the share {by_share}"
            expected = by_share.pop()
            assert model["percentiles"][short][f"p{percent}"]["bound"] == (int(expected) if expected else None)
            estimates = [quantile_by_hand(mixed([(1.0, values(a, short)), (r, values(b, short))], bounds), bounds, percent)
                         for r in SHARE_RATIOS]
            estimate = model["histogram_quantile"][short][f"p{percent}"]
            assert min(estimates) * 0.999 <= estimate <= max(estimates) * 1.001, (short, percent, estimate)


def test_model_on_one_server_equals_the_single_server_probe(fleet, servers, tmp_path):
    """The same buckets, read once by `probe FILE` and once through Prometheus's rates."""
    models, _ = fleet
    c = servers["c"]
    saved = tmp_path / "c.txt"
    saved.write_text(c.text(7))
    single = json.loads(probe("--format", "json", "--fail-on", "never", saved).stdout)["models"][0]
    model = models[c.served[0].model]
    assert model["percentiles"] == single["percentiles"]
    for key in ("stand_in", "recommended_max_model_len", "recommended_concurrency", "kv_tokens"):
        assert model[key] == single[key], key
    bounds = buckets_1_2_5(c.served[0].max_model_len)
    for short in SHORTS:
        counts = cumulative(values(c, short), bounds)
        for percent in PERCENTS:
            assert model["histogram_quantile"][short][f"p{percent}"] == pytest.approx(
                quantile_by_hand(counts, bounds, percent), rel=1e-6)


def test_instances_worst_first(fleet, servers):
    """B preempts and runs full: first. Peak usage is each server's gauge, whichever name it has."""
    models, report = fleet
    rows = report["worst_instances"]
    by_instance = {row["instance"]: row for row in rows}
    assert rows[0]["instance"] == servers["b"].target and rows[0]["preemptions"] > 0
    for name in ("a", "b", "c"):
        row = by_instance[servers[name].target]
        assert row["peak_usage"] == servers[name].served[0].usage
        assert row["peak_waiting"] == servers[name].served[0].waiting
        if name != "b":
            assert row["preemptions"] == 0
    assert any("VT301" in w for w in models[servers["a"].served[0].model]["warnings"])
    assert not models[servers["c"].served[0].model]["warnings"]


def test_capacity_is_the_smallest_instance_that_states_it(fleet, servers):
    """A (0.8.5) writes num_gpu_blocks=None; B's blocks x block size stand for the model."""
    models, _ = fleet
    b = servers["b"].served[0]
    assert models[b.model]["kv_tokens"] == b.num_gpu_blocks * b.block_size


def test_show_queries_prints_what_ran(fleet):
    _, report = fleet
    queries = report["queries"]
    assert 'histogram_quantile(0.99, sum by (le, model_name) (rate(vllm:request_prompt_tokens_bucket{job="vllm"}[1m])))' in queries
    assert any(q.startswith("sum by (instance, model_name) (increase(vllm:num_preemptions_total") for q in queries)


def test_text_report(prometheus, servers):
    result = probe("--prometheus", prometheus, "--range", RANGE, "--show-queries")
    assert result.exit_code == 1  # B's preemptions
    text = result.stdout
    assert text.startswith("queries:\n  sum by (le, model_name)")
    assert "worst instances" in text and servers["b"].target in text and "histogram_quantile" in text
    models = [line for line in text.splitlines() if line.startswith("  ") and "requests/s" in line]
    assert len(models) == 2  # one line per model
    c = servers["c"].served[0]
    (line_c,) = [line for line in models if line.startswith(f"  {c.model}:")]
    assert "--max-model-len" in line_c and "p99 prompt <= " in line_c
    details = probe("--prometheus", prometheus, "--range", RANGE, "--details").stdout
    assert details.count("percentiles are upper bounds") == 2 and "percentiles are upper bounds" not in text


def test_bad_prometheus_input(prometheus, servers):
    cases = [
        (["--prometheus", prometheus, "--selector", '{job="nothing"}'], "no vLLM series"),
        (["--prometheus", prometheus, "--selector", 'job="vllm"'], "label matchers in braces"),
        (["--prometheus", prometheus, "--range", "7 days"], "Prometheus duration"),
        (["--prometheus", prometheus, "--selector", '{job=~"("}'], "Prometheus refused"),
        (["--prometheus", servers["c"].url], "not a Prometheus API answer"),
        (["--prometheus", "http://127.0.0.1:9", "--timeout", "0.5"], "cannot connect"),
        (["--prometheus", servers["hang"].url, "--timeout", "0.5"], "within 0.5 s"),
    ]
    for args, words in cases:
        result = probe(*args)
        assert result.exit_code == 2, (args, result.output)
        assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)


def test_exposition_of_a_fleet_server_is_what_prometheus_scraped(servers):
    """The servers' texts parse as Prometheus reads them (a guard on the test data itself)."""
    from prometheus_client.parser import text_string_to_metric_families

    for name in ("a", "b", "c"):
        text = exposition(servers[name].shape, servers[name].served, 3)
        assert any(f.name == "vllm:request_prompt_tokens" for f in text_string_to_metric_families(text))
