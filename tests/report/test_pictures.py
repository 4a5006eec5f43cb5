"""The pictures: golden files of each fixture kind at two widths (plain text and markdown),
and as properties: every line fits the width, a part that is not empty is always seen,
and a picture whose number is missing is left out rather than drawn."""

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from triage.pipeline import ScanOptions, make_matcher, scan
from triage.report import ordered
from triage.report.markdown import picture_block
from triage.report.pictures import (
    PARTS,
    finding_pictures,
    histogram,
    memory,
    overflow,
    plain_block,
    plain_lines,
    rich_text,
    run_summaries,
    sequences,
    shortfall,
)

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "pictures"
WIDTHS = (60, 100)
CASES = {  # one fixture of each kind of picture
    "request-overflow": "fixtures/request-output-plus-input-v024-issue-wrapped.log",
    "request-prompt-alone": "fixtures/request-prompt-only-v033-issue-markdown.log",
    "request-hosted-prompt-over": "fixtures/hosted-together-same-wording.log",
    "many-rejections": "fixtures/request-many-rejections-v0110.log",
    "startup-shortfall-full-budget": "fixtures/startup-kv-tokens-v066-journald.log",
    "startup-shortfall-kv-only": "fixtures/startup-kv-too-small-v1.log",
    "healthy-run": "fixtures/gate/healthy.log",
}


@pytest.fixture(scope="module")
def results():
    os.chdir(ROOT)
    options = ScanOptions(matcher=make_matcher(ScanOptions()))
    return {case: scan([path], options) for case, path in CASES.items()}


def drawn(result, width: int, markdown: bool) -> str:
    """Every picture of a scan, under the finding or run it belongs to."""
    blocks = []
    for finding in ordered(result.findings):
        pictures = finding_pictures(finding)
        if pictures:
            body = picture_block(pictures) if markdown else "\n".join(plain_block(pictures, width))
            blocks.append(f"== {finding.code} at {finding.source}:{finding.line}\n{body}")
    for source, pictures in run_summaries(result):
        body = picture_block(pictures) if markdown else "\n".join(plain_block(pictures, width))
        blocks.append(f"== run of {source}\n{body}")
    return "\n\n".join(blocks) + "\n"


@pytest.mark.parametrize("markdown", [False, True], ids=["text", "markdown"])
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_pictures_match_golden(results, update_golden, monkeypatch, case, width, markdown):
    monkeypatch.setenv("COLUMNS", str(width))  # markdown draws to the terminal's width too
    output = drawn(results[case], width, markdown)
    assert output.strip(), f"{case}: no picture"
    golden = GOLDEN / f"{case}.{width}.{'markdown' if markdown else 'text'}"
    if update_golden:
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(output, encoding="utf-8")
    assert golden.exists(), f"no golden {golden.name}: run pytest --update-golden and review it"
    assert output == golden.read_text(encoding="utf-8")
    assert all(len(line) <= width for line in output.splitlines() if not line.startswith(("```", "== ")))


def test_the_pictures_carry_the_diagnosis_numbers(results):
    """What each kind must show, read from the plain lines."""
    text = drawn(results["request-overflow"], 100, False)
    assert "prompt 7,420" in text and "completion (max_tokens) 1,024" in text and "over the window by 252" in text
    assert "at most 772 instead of 1,024" in text
    text = drawn(results["many-rejections"], 100, False)
    assert "p50 16,598, p90 16,859, p99 17,004, max 17,004 tokens, of 36 refused" in text
    assert "suggested --max-model-len 17,008" in text and "16,594-16,652" in text
    text = drawn(results["startup-shortfall-full-budget"], 100, False)
    for words in ("weights 14.99 GiB", "other 1.27 GiB", "KV cache 5.02 GiB = 41,120 tokens", "short by 10.98 GiB",
                  "gpu_memory_utilization 0.90 = 21.28 GiB", "card 23.64 GiB", "131,072-token sequence 16.00 GiB"):
        assert words in text
    text = drawn(results["healthy-run"], 100, False)
    assert "KV cache 11.38 GiB = 213,072 tokens" in text and "at once: 6.50" in text


SEGMENT_CHARS = {part: char for part, (char, _, _) in PARTS.items()}


def visible(picture, width: int) -> None:
    """Every part in the legend is drawn at least once, and no line is wider than width."""
    lines = plain_lines(picture, width)
    assert all(len(line) <= width for line in lines)
    bars = "".join(line.split("[", 1)[1] for line in lines if "[" in line and "]" in line)
    for row in picture.rows:
        for segment in row.segments:
            if segment.end > segment.start:
                assert SEGMENT_CHARS[segment.part] in bars, (segment, lines)
    assert bars.count("|") == len(picture.marks) * len(picture.rows)


@settings(max_examples=150, deadline=None)
@given(
    window=st.integers(16, 1_000_000), prompt=st.integers(1, 1_200_000), completion=st.integers(0, 200_000),
    width=st.integers(40, 120),
)
def test_an_overflow_shows_its_prompt_completion_and_overflow_at_any_width(window, prompt, completion, width):
    requested = prompt + completion
    values = {"max_model_len": window, "prompt_tokens": prompt, "completion_tokens": completion,
              "over_by": requested - window, "max_tokens_fit": window - prompt, "requested_total": requested}
    picture = overflow(values)
    if requested <= window:
        assert picture is None  # not a refusal: nothing to draw
        return
    visible(picture, width)
    assert any(s.part == "over" for row in picture.rows for s in row.segments)
    for name in ("max_model_len", "prompt_tokens"):
        assert overflow({k: v for k, v in values.items() if k != name}) is None


@settings(max_examples=150, deadline=None)
@given(
    weights=st.floats(0.5, 200), other=st.floats(0, 20), kv=st.floats(0.01, 100), need=st.floats(0.02, 400),
    spare=st.floats(0, 50), width=st.integers(40, 120),
)
def test_a_startup_stack_shows_each_part_and_the_shortfall(weights, other, kv, need, spare, width):
    weights, other, kv = round(weights, 2), round(other, 2), round(kv, 2)
    budget = round(weights + other + kv, 2)
    values = {"kv_gib_available": kv, "kv_gib_for_window": round(kv + need, 2), "shortfall_gib": round(need, 2),
              "weights_gib": weights, "other_gib": other, "budget_gib": budget, "total_gib": round(budget + spare, 2),
              "gpu_memory_utilization": 0.9, "max_model_len": 131072}
    picture = shortfall(values)
    visible(picture, width)
    assert any(s.part == "short" for s in picture.rows[-1].segments)
    assert shortfall({k: v for k, v in values.items() if k != "shortfall_gib"}) is None
    assert memory({k: v for k, v in values.items() if k != "kv_gib_available"}, healthy=False) is None
    partial = shortfall({k: v for k, v in values.items() if k not in ("budget_gib", "total_gib", "other_gib", "weights_gib")})
    assert [s.part for s in partial.rows[0].segments] == ["kv"]  # only what the log printed


@settings(max_examples=100, deadline=None)
@given(counts=st.lists(st.integers(0, 5000), min_size=2, max_size=8), width=st.integers(40, 120))
def test_a_histogram_draws_every_bin_with_a_count(counts, width):
    if not any(counts):
        counts[0] = 1
    bins = [[8200 + 100 * i, 8299 + 100 * i, count] for i, count in enumerate(counts)]
    values = {"requested_histogram": bins, "requested_p50": bins[0][0], "requested_p90": bins[-1][0],
              "requested_p99": bins[-1][1], "requested_max": bins[-1][1], "max_model_len": 8192,
              "recommended_max_model_len": bins[-1][1] + 1, "rejected": sum(counts)}
    picture = histogram(values)
    lines = plain_lines(picture, width)
    assert all(len(line) <= width for line in lines)
    rows = [line for line in lines if "[" in line]
    assert len(rows) == len(bins)
    for row, count in zip(rows, counts, strict=True):
        assert ("#" in row) == (count > 0)
    assert histogram({k: v for k, v in values.items() if k != "requested_p99"}) is None


def test_a_run_without_its_concurrency_figure_gets_no_sequence_picture():
    facts = {"kv_tokens": 213072, "concurrency": 6.5, "concurrency_tokens": 32768}
    assert sequences(facts) is not None
    for name in facts:
        assert sequences({k: v for k, v in facts.items() if k != name}) is None


@pytest.mark.parametrize("width", WIDTHS)
def test_rich_pictures_fit_the_width_and_use_colour(results, width):
    for finding in results["startup-shortfall-full-budget"].findings:
        for picture in finding_pictures(finding):
            console = Console(width=width, force_terminal=True, color_system="truecolor", record=True)
            console.print(rich_text(picture, width))
            out = console.export_text(styles=False, clear=False)
            assert all(len(line) <= width for line in out.splitlines())
            assert "█" in out and "\x1b[" in console.export_text(styles=True)


PLANS = {  # `plan` scenarios side by side: one that refuses to start as given, one that starts everywhere
    "plan-llama-8b-l4-131072": ["plan", "fixtures/models/llama-3.1-8b-instruct", "--gpu", "L4", "--max-model-len", "131072"],
    "plan-deepseek-v3-8xh200": ["plan", "fixtures/models/deepseek-v3", "--gpu", "H200", "--gpus", "8"],
}


def plan_picture(args: list[str], width: int, monkeypatch) -> str:
    from click.testing import CliRunner

    from triage import cli

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", str(width))
    printed = CliRunner().invoke(cli.main, [*args, "--format", "text"]).stdout
    return printed[printed.index("Each scenario's GPU memory"):].split("\n\n", 1)[0] + "\n"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", sorted(PLANS))
def test_plan_pictures_match_golden(update_golden, monkeypatch, case, width):
    output = plan_picture(PLANS[case], width, monkeypatch)
    golden = GOLDEN / f"{case}.{width}.text"
    if update_golden:
        golden.write_text(output, encoding="utf-8")
    assert output == golden.read_text(encoding="utf-8")
    assert all(len(line) <= width for line in output.splitlines())


def test_each_plan_scenario_says_whether_its_sequence_fits(monkeypatch):
    import json

    from click.testing import CliRunner

    from triage import cli

    monkeypatch.chdir(ROOT)
    args = PLANS["plan-llama-8b-l4-131072"]
    scenarios = json.loads(CliRunner().invoke(cli.main, [*args, "--format", "json"]).stdout)["plan"]["scenarios"]
    picture = plan_picture(args, 100, monkeypatch)
    verdicts = [line.split()[-1] for line in picture.splitlines() if line.strip().startswith("needs")]
    assert verdicts == ["fits" if s["would_start"] else "NO" for s in scenarios] == ["NO", "NO", "fits"]
    for scenario in scenarios:
        assert scenario["label"] in picture
