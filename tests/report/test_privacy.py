"""What users typed never leaves the tool unless asked; --redact masks secrets everywhere."""

import dataclasses

import pytest
from click.testing import CliRunner

from triage.cli import main
from triage.match.fields import MAX_EXCERPT
from triage.match.matcher import Matcher
from triage.report.redact import MASK, redact, redact_result, redact_value
from triage.report import ScanResult, format_names
from triage.rules.ruleset import load_rules
from triage.model import Finding
from conftest import scan_events

PROMPT_WORDS = "PROMPT-zebra-umbrella-42"
MESSAGE = (
    "This model's maximum context length is 8192 tokens. However, you requested 9100 tokens "
    "(8100 in the messages, 1000 in the completion). Please reduce the length of the messages or completion."
)
SECRETS = [
    "alice.smith@example.com", "sk-proj-A1b2C3d4E5f6G7h8I9j0KLmn", "10.20.30.40", "hf_AbCdEfGhIjKlMnOpQrStUv",
    "2001:db8:4a1c::17",
]
LOG = (
    # vLLM's request log quotes the whole prompt, here one that quotes an error message
    "INFO 03-02 09:14:05 logger.py:37] Received request chat-1a2b: prompt: '<|user|>\\n"
    f"{PROMPT_WORDS} why does it say This model\\'s maximum context length is 4096 tokens. However, you "
    "requested 5000 tokens (4000 in the messages, 1000 in the completion).<|assistant|>\\n', "
    "params: SamplingParams(max_tokens=1000), prompt_token_ids: [128000, 882], lora_request: None.\n"
    # a gateway line that puts user data and vLLM's error on one line
    f"(APIServer pid=77, ip={SECRETS[2]}) ERROR 03-02 09:14:11 gateway.py:90] user {SECRETS[0]} "
    f"key={SECRETS[1]} token {SECRETS[3]} peer=[{SECRETS[4]}]:443 prompt={PROMPT_WORDS!r} upstream said: {MESSAGE}\n"
)


def scan(tmp_path, *options, name="server.log"):
    path = tmp_path / name
    path.write_text(LOG)
    return CliRunner().invoke(main, ["scan", *options, str(path)])


@pytest.mark.parametrize("format_name", format_names())
def test_no_format_prints_prompt_text_by_default(tmp_path, format_name):
    result = scan(tmp_path, "--format", format_name)
    assert result.exit_code == 1, result.output
    assert "8192" in result.stdout or "8,192" in result.stdout  # the finding is there ...
    assert PROMPT_WORDS not in result.stdout + result.stderr  # ... the prompt is not
    assert SECRETS[0] not in result.stdout  # nor what surrounds the matched message


@pytest.mark.parametrize("format_name", ["json", "jsonl", "text", "rich"])
def test_show_text_adds_the_whole_record(tmp_path, format_name):
    shown = scan(tmp_path, "--format", format_name, "--show-text")
    assert shown.exit_code == 1
    assert PROMPT_WORDS in shown.stdout
    assert "Received request" not in shown.stdout  # the request log line is still never a finding


def test_the_text_key_is_in_json_only_with_show_text(tmp_path):
    assert '"text":' not in scan(tmp_path, "--format", "json").stdout
    assert '"text": "user alice.smith@example.com' in scan(tmp_path, "--format", "json", "--show-text").stdout


@pytest.mark.parametrize("format_name", format_names())
def test_redact_masks_secrets_in_every_format_and_on_stderr(tmp_path, format_name):
    options = ["--format", format_name, "--show-text"]
    plain = scan(tmp_path, *options, name=f"{SECRETS[0]}.log")
    masked = scan(tmp_path, *options, "--redact", name=f"{SECRETS[0]}.log")
    assert plain.exit_code == masked.exit_code == 1
    assert any(secret in plain.stdout for secret in SECRETS)  # without --redact they are printed
    for secret in SECRETS:
        assert secret not in masked.stdout + masked.stderr, secret
    assert MASK in masked.stdout
    assert "8192" in masked.stdout or "8,192" in masked.stdout  # the numbers survive


def test_redact_reaches_error_messages(tmp_path):
    missing = tmp_path / f"{SECRETS[0]}-missing.log"
    result = CliRunner().invoke(main, ["scan", "--redact", str(missing)])
    assert result.exit_code == 2
    assert SECRETS[0] not in result.stderr and MASK in result.stderr


def test_the_excerpt_is_the_matched_message_capped_in_length(tmp_path):
    rules = tmp_path / "greedy.yaml"
    rules.write_text(
        "stage: runtime\nrules:\n  - code: VT991\n    name: greedy\n    title: t\n    keywords: [GREEDY]\n"
        "    patterns: ['GREEDY .*']\n    examples:\n      match: ['GREEDY x']\n"
    )
    matcher = Matcher(load_rules([rules]))
    events = scan_events(matcher, "x.log", f"{PROMPT_WORDS} GREEDY " + "y" * 5000)
    assert len(events) == 1
    assert events[0].excerpt.startswith("GREEDY y") and len(events[0].excerpt) == MAX_EXCERPT  # cut, with "..."
    assert events[0].excerpt.endswith("y...")
    assert PROMPT_WORDS not in events[0].excerpt


def test_a_kept_event_holds_no_text_of_its_line():
    """The diagnosis keeps a run's problems to the end without their lines' text (a prompt may
    be in it): nothing the event holds keeps that text, its excerpt made from it included. For
    every finding rule's example, the writer's words before it on its line."""
    from triage.diagnose.diagnoser import Diagnoser

    rules = load_rules()
    matcher = Matcher(rules)
    kept = []
    for rule in rules.rules:
        for example in rule.examples if rule.kind == "finding" else []:
            diagnoser = Diagnoser(rules.rules)
            for event in scan_events(matcher, "server.log", f"{PROMPT_WORDS} said: {example.text.strip()}\n"):
                diagnoser.add(event, render=False)  # (as a scan adds them: findings are made when the run ends)
            kept += diagnoser.run.problems
    assert len({event.rule.code for event in kept}) > 20
    assert all(event.record.text == "" and isinstance(event.quoted, str) for event in kept)
    assert all(PROMPT_WORDS not in event.excerpt for event in kept)


# --- the redaction function ------------------------------------------------------


@pytest.mark.parametrize(
    "text, secret",
    [
        ("Authorization: Bearer eyJ0eXAiOiJKV1QiLCJhbGc.abc-def", "eyJ0eXAiOiJKV1QiLCJhbGc.abc-def"),
        ("OPENAI_API_KEY=sk-proj-A1b2C3d4E5f6G7h8I9j0KLmn used", "sk-proj-A1b2C3d4E5f6G7h8I9j0KLmn"),
        ("key sk-ant-api03-AbCdEfGhIjKlMnOpQr", "sk-ant-api03-AbCdEfGhIjKlMnOpQr"),
        ("HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUv", "hf_AbCdEfGhIjKlMnOpQrStUv"),
        ("aws AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE"),
        ("ghp_0123456789abcdefghijABCDEFGHIJ012345", "ghp_0123456789abcdefghijABCDEFGHIJ012345"),
        ("xoxb-123456789012-abcdefABCDEF", "xoxb-123456789012-abcdefABCDEF"),
        ('{"api_key": "s3cr3t-value"}', "s3cr3t-value"),
        ("password=hunter22 next", "hunter22"),
        ("clone https://bob:pa55w0rd@git.example.org/x", "bob:pa55w0rd"),
        ("contact alice.smith+vllm@example.co.uk today", "alice.smith+vllm@example.co.uk"),
        ('INFO:     192.168.1.20:51234 - "POST /v1/completions HTTP/1.1" 400', "192.168.1.20"),
        ("(RayWorkerWrapper pid=5, ip=10.0.0.7) ERROR", "10.0.0.7"),
        ('INFO:     [2001:db8:85a3::8a2e:370:7334]:51234 - "POST /v1/chat/completions HTTP/1.1" 400',
         "2001:db8:85a3::8a2e:370:7334"),
        ("peer 2001:0db8:0000:0000:0000:ff00:0042:8329 closed", "2001:0db8:0000:0000:0000:ff00:0042:8329"),
        ("(RayWorkerWrapper pid=5, ip=fe80::1ff:fe23:4567:890a%eth0) ERROR", "fe80::1ff:fe23:4567:890a"),
        ("Uvicorn running on http://[::1]:8000 (Press CTRL+C to quit)", "::1"),
        ("client ::ffff:10.0.0.7 sent", "10.0.0.7"),
    ],
)
def test_redact_masks_what_looks_like_a_secret(text, secret):
    masked = redact(text)
    assert secret not in masked and MASK in masked


@pytest.mark.parametrize(
    "text",
    [
        "max_tokens=8192 prompt_tokens: 900 max_num_batched_tokens=2048",
        "Available KV cache memory: 52.33 GiB; GPU KV cache size: 1,234,567 tokens",
        "vLLM API server version 0.6.4.post1 at 09:14:11, max_model_len 131072",
        "tokenizer='meta-llama/Llama-3.1-8B-Instruct' kv_cache_dtype=auto",
        "'max_tokens' or 'max_completion_tokens' is too large: 8192.",
        # what looks a little like IPv6: times, file:line tags, versions, hex ids, MACs, C++ names
        "(EngineCore_DP0 pid=3117) ERROR 07-21 09:12:40 [core.py:700] at 2025-07-21T09:12:40.123Z",
        "time 23:59:59.999 ratio 1:2:3 vLLM 0.11.0 (v0.10.1.1) request cmpl-3f2a9c8d1e0b4a7f9c2d5e6f7a8b9c0d",
        "mac 00:1a:2b:3c:4d:5e std::vector<int> add::beef listening on [::]:8000",
        # a four-part vLLM version is not an IPv4 address
        "vLLM API server version 0.10.1.1",
        "vLLM Version                 : 0.10.1.1",
    ],
)
def test_redact_leaves_vllm_numbers_and_words_alone(text):
    assert redact(text) == text


def test_redact_value_masks_strings_and_keeps_numbers_keys_and_rules():
    finding = Finding(
        code="VT101", name="n", title="t", stage="request", severity="error", source="alice@example.com.log",
        line=3, excerpt="x", fields={"max_model_len": 8192, "model": "hf_AbCdEfGhIjKlMnOpQrStUv"}, derived={},
        cause=[], fixes=["mail alice@example.com"], text="Bearer abcdefgh12345678",
    )
    rule = object()
    result = redact_result(ScanResult([finding], ["alice@example.com.log"], ["alice@example.com: gone"], [rule]))
    masked = result.findings[0]
    assert masked.fields == {"max_model_len": 8192, "model": MASK}
    assert masked.source == MASK and masked.fixes == [f"mail {MASK}"] and masked.text == f"Bearer {MASK}"
    assert result.inputs == [MASK] and result.errors == [f"{MASK}: gone"]
    assert result.rules[0] is rule
    assert finding.source == "alice@example.com.log"  # the original is not changed
    assert redact_value((1, 2.5, True, None)) == (1, 2.5, True, None)
    assert dataclasses.is_dataclass(masked)
