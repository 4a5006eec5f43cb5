"""Every fixture log through the whole pipe (CLI to report): numbers, stage, place, fix text, exit code.

Each fixture is one scenario in one kind of messy input (see its name). The table
says what a user must see for it; negatives must give no finding at all.
"""

import json
from dataclasses import dataclass, field

import pytest
from click.testing import CliRunner

from triage.cli import main

from conftest import FIXTURES


pytestmark = pytest.mark.usefixtures("builtin_rules_loaded_once")


@dataclass
class Expect:
    code: str
    stage: str
    line: int
    fields: dict
    derived: dict = field(default_factory=dict)
    fixes: tuple[str, ...] = ()  # fragments that must appear in the numbered fixes
    severity: str = "error"
    hosted: bool = False
    process: str | None = None
    rank: str | None = None
    count: int = 1


CASES = {
    # --- request stage, every era --------------------------------------------------------
    "request-overflow-v072-compose-crlf.log": [  # docker compose, 0.7 prefix, CR LF + prefix continuations
        Expect("VT101", "request", 31, {"max_model_len": 16384, "prompt_tokens": 14877, "completion_tokens": 2048},
               {"over_by": 541, "max_tokens_fit": 1507}, ("served all 3", "--max-model-len 17008 to serve 99%"),
               count=3),
    ],
    "request-overflow-v092-rotated.log.gz": [  # gzip, 0.9 brackets, traceback in "Error in preprocessing"
        Expect("VT101", "request", 26, {"max_model_len": 4096, "prompt_tokens": 3850, "completion_tokens": 512},
               {"over_by": 266, "max_tokens_fit": 246}, ("served all 2", "--max-model-len 4368 to serve 99%"), count=2),
    ],
    "request-many-rejections-v0110.log": [  # 36 refusals of different lengths: the histogram's input
        Expect("VT101", "request", 10, {"max_model_len": 16384, "prompt_tokens": 12706, "completion_tokens": 4096},
               {"rejected": 36, "requested_p50": 16598, "requested_p99": 17004, "requested_max": 17004,
                "recommended_max_model_len": 17008,
                "requested_histogram": [[16535, 16593, 17], [16594, 16652, 5], [16653, 16711, 4], [16712, 16770, 4],
                                        [16771, 16829, 2], [16830, 16888, 1], [16889, 16947, 2], [16948, 17004, 1]]},
               ("served all 36", "--max-model-len 17008 to serve 99%"), process="APIServer pid=512", count=36),
    ],
    "request-max-tokens-too-large-v0110-kubectl.log": [  # kubectl --prefix --timestamps
        Expect("VT101", "request", 25, {"max_model_len": 32768, "prompt_tokens": 29873, "completion_tokens": 4096},
               {"max_tokens_fit": 2895, "over_by": 1201}, ("of at most 2895 for this prompt", "--max-model-len 33984"),
               process="APIServer pid=1"),
    ],
    "request-you-passed-v017-terminal-wrapped.log": [  # a terminal cut words at column 120, over 3 lines
        Expect("VT101", "request", 12, {"prompt_tokens": 30977, "completion_tokens": 4096, "max_model_len": 32768,
                                        "max_input_tokens": 28672},
               {"max_tokens_fit": 1791}, ("of at most 1791 for this prompt",), process="APIServer pid=2231"),
    ],
    "request-output-plus-input-v024-issue-wrapped.log": [  # an issue comment re-flowed at spaces, indented
        Expect("VT101", "request", 4, {"max_model_len": 8192, "prompt_tokens": 7420, "completion_tokens": 1024,
                                       "at_least": False},
               {"over_by": 252, "max_tokens_fit": 772}, ("of at most 772 for this prompt",)),
    ],
    "request-at-least-gateway-json.log": [  # JSON log line holding the JSON body with \" escapes; "at least"
        Expect("VT101", "request", 4, {"max_model_len": 40960, "prompt_tokens": 32769, "completion_tokens": 8192,
                                       "at_least": True}, {"requested_total": 40961}),
    ],
    "request-prompt-only-v033-issue-markdown.log": [  # markdown fences and backticks, 0.32+ "at least"
        Expect("VT102", "request", 19, {"max_model_len": 32768, "prompt_tokens": 32769, "at_least": True}),
    ],
    "client-openai-python-traceback.log": [  # the logged error and its traceback: one refused request
        Expect("VT102", "request", 4, {"max_model_len": 8192, "prompt_tokens": 9120},
               {"prompt_cut": 929}, ("(929 fewer leaves room", "--max-model-len 9136 or more")),
    ],
    "request-decoder-prompt-offline-torchrun.log": [  # offline LLM.generate under torchrun: [rank0]: / [rank1]:
        Expect("VT102", "request", 21, {"prompt_type": "decoder", "prompt_tokens": 17406, "max_model_len": 16384},
               {"prompt_cut": 1023, "window_needed": 17408}, ("(1,023 fewer leaves room",), rank="rank=0", count=2),
    ],
    "request-v0-scheduler-ignored-v033.log": [  # V0 ignores the prompt; the request log quoting it is skipped
        Expect("VT110", "request", 7, {"prompt_tokens": 9216, "prompt_limit": 8192}, {"prompt_cut": 1024},
               ("Cut at least 1,024 tokens",), severity="warning"),
    ],
    # --- hosted APIs with vLLM's sentence: no server flags --------------------------------
    "hosted-openai-context-length-exceeded.log": [
        Expect("VT101", "request", 6, {"max_model_len": 8192, "prompt_tokens": 7801, "completion_tokens": 1000},
               {"max_tokens_fit": 391}, ("of at most 391 for this prompt",), hosted=True),
        Expect("VT102", "request", 17, {"max_model_len": 8192, "prompt_tokens": 9001}, {"prompt_cut": 810},
               ("(810 fewer",), hosted=True),
    ],
    "hosted-together-same-wording.log": [
        Expect("VT101", "request", 3, {"max_model_len": 32768, "prompt_tokens": 33162, "completion_tokens": 2048},
               {"prompt_cut": 395}, ("(395 fewer)",), hosted=True),
    ],
    # --- startup -------------------------------------------------------------------------
    "startup-kv-too-small-v1.log": [  # GiB form with vLLM's estimate
        Expect("VT201", "startup", 24, {"max_model_len": 65536, "kv_gib_needed": 8.0, "kv_gib_available": 5.31,
                                        "estimated_max_model_len": 43488},
               {"fit_max_model_len": 43488, "bytes_per_token": 131072, "shortfall_gib": 2.69},
               ("--max-model-len 43488", "--kv-cache-dtype fp8"), process="EngineCore_DP0 pid=3117", rank="DP0"),
        # count 1: the second copy (line 29) is EngineCore's re-raise of the same failure
    ],
    "startup-kv-gib-no-estimate-v085-ansi-tags.log": [  # GiB form without estimate; coloured process tags
        Expect("VT201", "startup", 16, {"max_model_len": 131072, "kv_gib_needed": 16.0, "kv_gib_available": 11.73},
               {"fit_max_model_len": 96080, "bytes_per_token": 131072, "fp8_max_model_len": 192176},
               ("--max-model-len 96080",), process="EngineCore_0 pid=1411", rank="DP0"),  # its re-raise not counted
    ],
    "startup-kv-tokens-v066-journald.log": [  # token form, V0, through journald
        Expect("VT201", "startup", 18, {"max_model_len": 131072, "kv_tokens": 41120},
               {"fit_max_model_len": 41120, "fp8_max_model_len": 82240, "kv_gib_for_window": 16.0,
                "utilization_to_fit": 1.37, "budget_gib": 21.28, "other_gib": 1.27},  # 21.28 - 14.99 - 5.02
               ("--max-model-len 41120", "cannot close this gap on this card: it would need 1.37")),
    ],
    "startup-no-cache-blocks-v0101-ray.log": [  # Ray actor tags with ip, "[repeated Nx across cluster]"
        Expect("VT202", "startup", 20, {}, {}, ("--tensor-parallel-size",), process="EngineCore_0 pid=311",
               rank="DP0"),
    ],
    "startup-auto-fit-reduced-v0141-tty-colour.log": [  # the served window capped; vLLM's TTY colours
        Expect("VT403", "config", 10, {"user_max_model_len": 262144, "max_model_len": 247712,
                                       "kv_gib_available": 11.34},
               {"lost_tokens": 14432}, ("--max-model-len 247712",), severity="warning",
               process="EngineCore_DP0 pid=214", rank="DP0"),
    ],
    # --- config --------------------------------------------------------------------------
    "config-user-gt-derived-v0110-pydantic.log": [  # inside pydantic's 3-line ValidationError
        Expect("VT401", "config", 15, {"user_max_model_len": 49152, "derived_max_model_len": 40960},
               {"over_by": 8192}, ("--max-model-len 40960",), process="APIServer pid=1"),
    ],
    "config-batched-below-len-v043-nul-bytes.log": [  # NUL padding and invalid UTF-8 around it
        Expect("VT402", "config", 10, {"max_num_batched_tokens": 8192, "max_model_len": 32768}, {},
               ("--max-num-batched-tokens to 32768", "--enable-chunked-prefill")),
    ],
    # --- negatives -----------------------------------------------------------------------
    "normal-startup-v0110.log": [],
    "normal-serving-v0110-request-log.log": [],  # its request log quotes two error messages
    "cuda-oom-unrelated-finetune.log": [],
    "tokenizer-length-warning-offline.log": [],  # transformers' warning is not vLLM refusing anything
}
ISSUE_2_FAMILIES = {"VT10", "VT11", "VT20", "VT40"}  # request, startup shortfall, config codes
SERVER_FLAGS = ("--max-model-len", "--gpu-memory-utilization", "restart vLLM", "--kv-cache-dtype")


def run_scan(*args, stdin=None):
    return CliRunner().invoke(main, ["scan", *map(str, args)], input=stdin)


def test_every_fixture_log_has_a_case_and_there_are_enough():
    logs = {p.name for p in FIXTURES.glob("*.log")} | {p.name for p in FIXTURES.glob("*.log.gz")}
    assert logs == set(CASES)
    assert len(logs) >= 15


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixture_findings(name):
    path = FIXTURES / name
    result = run_scan("--format", "json", "--fail-on", "info", path)
    document = json.loads(result.stdout)
    expected = CASES[name]
    # Issue 2's rules must fire exactly as listed; capacity summaries (VT21x) and runtime rules
    # have their own tests and may add to a log, but never an error to a negative.
    ours = [f for f in document["findings"] if f["code"][:4] in ISSUE_2_FAMILIES]
    assert sorted({f["code"] for f in ours}) == sorted(e.code for e in expected)
    if not expected:
        assert not [f["code"] for f in document["findings"] if f["severity"] == "error"]
    for want in expected:
        # repeated rejections may be merged into one finding or kept per distinct numbers: the first one
        # is where the user looks, and the counts must add up to every rejection in the log
        same = sorted((f for f in document["findings"] if f["code"] == want.code), key=lambda f: f["line"])
        finding = same[0]
        assert finding["line"] == want.line
        assert sum(f["count"] for f in same) == want.count
        assert (finding["stage"], finding["severity"], finding["hosted"]) == (want.stage, want.severity, want.hosted)
        assert (finding["process"], finding["rank"]) == (want.process, want.rank)
        assert finding["source"] == str(path)
        assert {k: finding["fields"].get(k) for k in want.fields} == want.fields
        assert {k: finding["derived"].get(k) for k in want.derived} == want.derived
        fixes = " ".join(finding["fixes"])
        for fragment in want.fixes:
            assert fragment in fixes, f"{fragment!r} not in {finding['fixes']}"
        if want.hosted:
            assert not any(flag in fixes for flag in SERVER_FLAGS)
    assert result.exit_code == (1 if document["findings"] else 0)


@pytest.mark.parametrize("name", sorted(n for n, e in CASES.items() if e))
def test_text_report_says_where_and_what_vllm_said(name):
    path = FIXTURES / name
    text = run_scan("--format", "text", path).stdout
    first = CASES[name][0]
    assert f"at {path}:{first.line}" in text
    assert f"{first.code} " in text and f"[{first.stage}, {first.severity}]" in text
    said = [line for line in text.splitlines() if line.strip().startswith("vLLM said:")]
    assert said and all(len(line) < 700 for line in said)


def test_default_threshold_exit_codes():
    assert run_scan("--format", "text", FIXTURES / "startup-kv-too-small-v1.log").exit_code == 1
    assert run_scan("--format", "text", FIXTURES / "startup-auto-fit-reduced-v0141-tty-colour.log").exit_code == 0
    assert run_scan("--format", "text", FIXTURES / "normal-serving-v0110-request-log.log").exit_code == 0


def test_the_lower_bound_is_reported_as_a_bound():
    text = run_scan("--format", "text", FIXTURES / "request-at-least-gateway-json.log").stdout
    assert "at least 32,769 tokens" in text
    assert "40,961 or more" in text


def test_hosted_findings_say_so_and_name_no_server_flag():
    text = run_scan("--format", "text", FIXTURES / "hosted-openai-context-length-exceeded.log").stdout
    assert text.count("hosted API") == 2
    assert not any(flag in text for flag in SERVER_FLAGS)


def test_a_vllm_error_next_to_a_request_log_quoting_a_hosted_error_is_not_hosted():
    quoting = (
        "(APIServer pid=1) INFO 10-06 09:14:03 [logger.py:41] Received request chatcmpl-7: prompt: 'why does "
        "api.openai.com say context_length_exceeded?', params: SamplingParams(max_tokens=512), lora_request: None.\n"
    )
    error = (
        "(APIServer pid=1) ERROR 10-06 09:14:03 [serving_chat.py:222] ValueError: This model's maximum context length "
        "is 8192 tokens. However, you requested 9000 tokens (8000 in the messages, 1000 in the completion). Please "
        "reduce the length of the messages or completion.\n"
    )
    document = json.loads(run_scan("--format", "json", "-", stdin=quoting + error).stdout)
    [finding] = document["findings"]
    assert finding["hosted"] is False
    assert any("--max-model-len" in fix for fix in finding["fixes"])


def huge_request_log_line(size: int) -> str:
    """vLLM's request log: the whole prompt, here a pasted error and traceback padded to `size` bytes."""
    quoted = (
        "My job failed with this, can you explain?\\n\\nTraceback (most recent call last):\\n  File "
        "\\\"/srv/app.py\\\", line 9, in <module>\\nValueError: This model\\'s maximum context length is 4096 tokens. "
        "However, you requested 5230 tokens (4230 in the messages, 1000 in the completion). Please reduce the "
        "length of the messages or completion.\\nand at startup: ValueError: The model\\'s max seq len (131072) is "
        "larger than the maximum number of tokens that can be stored in KV cache (41120). Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\\n"
    )
    filler = "lorem ipsum dolor sit amet " * (size // 27)
    return (
        "(APIServer pid=1) INFO 10-06 09:14:03 [logger.py:41] Received request chatcmpl-0f9e: prompt: '"
        + quoted + filler + quoted
        + "', params: SamplingParams(n=1, temperature=0.7, max_tokens=1000), prompt_token_ids: None, lora_request: None.\n"
    )


def test_a_multi_megabyte_request_log_line_quoting_errors_gives_no_finding(tmp_path):
    log = tmp_path / "serving.log"
    real = (
        "(APIServer pid=1) ERROR 10-06 09:14:04 [serving_chat.py:222] ValueError: This model's maximum context "
        "length is 8192 tokens. However, you requested 9000 tokens (8000 in the messages, 1000 in the completion). "
        "Please reduce the length of the messages or completion.\n"
    )
    log.write_text(
        "(APIServer pid=1) INFO 10-06 09:14:00 [loggers.py:127] Engine 000: Running: 1 reqs\n"
        + huge_request_log_line(5 * 1024 * 1024)
        + real
        + huge_request_log_line(3 * 1024 * 1024)
    )
    assert log.stat().st_size > 8 * 1024 * 1024
    result = run_scan("--format", "json", log)
    findings = json.loads(result.stdout)["findings"]
    assert [(f["code"], f["line"], f["fields"]["max_model_len"]) for f in findings] == [("VT101", 3, 8192)]
    assert "lorem" not in result.stdout and "explain" not in result.stdout
