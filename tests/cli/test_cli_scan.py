"""The scan command as users run it: files, stdin, gzip, several inputs, JSON, exit codes."""

import gzip
import json
import subprocess
import sys

import jsonschema
import pytest
from click.testing import CliRunner

from triage.cli import main
from triage.cli.scan import paste_hint

from conftest import FIXTURES, ROOT

KV_STARTUP = FIXTURES / "startup-kv-too-small-v1.log"
AUTO_FIT = FIXTURES / "startup-auto-fit-reduced-v0141-tty-colour.log"
NORMAL = FIXTURES / "normal-startup-v0110.log"
CLIENT = FIXTURES / "client-openai-python-traceback.log"
PYTHON_M_ENV = {"NO_COLOR": "1", "PATH": "/usr/bin:/bin"}

# The stable contract of --format json (README, "JSON output").
FINDING_SCHEMA = {
    "type": "object",
    "required": [
        "code", "name", "title", "stage", "severity", "source", "line", "process", "rank", "time",
        "count", "excerpt", "fields", "derived", "facts", "cause", "fixes", "hosted", "references",
    ],
    "properties": {
        "code": {"type": "string", "pattern": "^VT[0-9]{3}$"},
        "name": {"type": "string", "pattern": "^[a-z0-9-]+$"},
        "title": {"type": "string"},
        "stage": {"enum": ["request", "startup", "runtime", "config"]},
        "severity": {"enum": ["info", "warning", "error"]},
        "source": {"type": "string"},
        "line": {"type": "integer", "minimum": 1},
        "last_line": {"type": ["integer", "null"]},
        "count": {"type": "integer", "minimum": 1},
        "process": {"type": ["string", "null"]},
        "rank": {"type": ["string", "null"]},
        "time": {"type": ["string", "null"]},
        "excerpt": {"type": "string"},
        "fields": {"type": "object"},
        "derived": {"type": "object"},
        "facts": {"type": "object"},
        "cause": {"type": "array", "items": {"type": "string"}},
        "fixes": {"type": "array", "items": {"type": "string"}},
        "hosted": {"type": "boolean"},
        "references": {"type": "array", "items": {"type": "string"}},
    },
}
FAILURE_SCHEMA = {
    "type": ["object", "null"],
    "required": ["process", "line", "error_line", "error", "time", "stage", "same_error"],
    "properties": {
        "process": {"type": ["string", "null"]},
        "line": {"type": "integer", "minimum": 1},
        "error_line": {"type": "integer", "minimum": 1},
        "error": {"type": "string"},
        "stage": {"enum": ["startup", "runtime"]},
        "same_error": {"type": "boolean"},
    },
}
RUN_SCHEMA = {
    "type": "object",
    "required": ["input", "run", "first_line", "last_line", "outcome", "outcome_line", "facts", "first_failure", "consequences"],
    "properties": {
        "input": {"type": "string"},
        "run": {"type": "integer", "minimum": 1},
        "first_line": {"type": "integer", "minimum": 1},
        "last_line": {"type": "integer", "minimum": 1},
        "outcome": {"enum": ["ready", "failed", "unknown"]},
        "outcome_line": {"type": ["integer", "null"]},
        "facts": {
            "type": "object",
            "additionalProperties": {"type": "object", "required": ["value", "line"]},
        },
        "first_failure": FAILURE_SCHEMA,
        "consequences": {"type": "array", "items": FAILURE_SCHEMA},
    },
}
SCAN_SCHEMA = {
    "type": "object",
    "required": ["schema_version", "tool", "inputs", "errors", "summary", "runs", "findings"],
    "properties": {
        "schema_version": {"const": 2},
        "runs": {"type": "array", "items": RUN_SCHEMA},
        "tool": {"type": "object", "required": ["name", "version"]},
        "inputs": {"type": "array", "items": {"type": "string"}},
        "errors": {"type": "array", "items": {"type": "string"}},
        "summary": {
            "type": "object",
            "required": ["error", "warning", "info"],
            "additionalProperties": {"type": "integer"},
        },
        "findings": {"type": "array", "items": FINDING_SCHEMA},
    },
}


pytestmark = pytest.mark.usefixtures("builtin_rules_loaded_once")


def scan(*args, stdin=None):
    return CliRunner().invoke(main, ["scan", *map(str, args)], input=stdin)


def scan_json(*args, stdin=None):
    result = scan("--format", "json", *args, stdin=stdin)
    return result, json.loads(result.stdout)


def test_a_file_gives_the_numbers_stage_fix_and_exit_1():
    result = scan("--format", "text", KV_STARTUP)
    assert result.exit_code == 1
    assert "VT201 kv-cache-too-small [startup, error]" in result.stdout
    assert f"{KV_STARTUP}:24" in result.stdout
    assert "--max-model-len 43488" in result.stdout
    assert "2.69 GiB short" in result.stdout
    assert "1 finding (1 error) in 1 input" in result.stdout


def test_json_output_follows_the_documented_schema():
    result, document = scan_json(KV_STARTUP, CLIENT, NORMAL)
    jsonschema.validate(document, SCAN_SCHEMA)
    assert result.exit_code == 1
    assert document["summary"] == {"error": 2, "warning": 0, "info": 0}
    by_code = {f["code"]: f for f in document["findings"]}
    startup = by_code["VT201"]
    assert (startup["stage"], startup["line"], startup["process"]) == ("startup", 24, "EngineCore_DP0 pid=3117")
    assert startup["fields"]["estimated_max_model_len"] == 43488
    assert startup["derived"]["fit_max_model_len"] == 43488
    assert startup["derived"]["bytes_per_token"] == 131072
    assert any("--max-model-len 43488" in fix for fix in startup["fixes"])


def test_several_files_each_finding_names_its_source():
    result, document = scan_json(KV_STARTUP, CLIENT)
    sources = {f["code"]: f["source"] for f in document["findings"]}
    assert sources == {"VT201": str(KV_STARTUP), "VT102": str(CLIENT)}
    assert document["inputs"] == [str(KV_STARTUP), str(CLIENT)]
    text = scan("--format", "text", KV_STARTUP, CLIENT).stdout
    assert f"at {KV_STARTUP}:24" in text and f"at {CLIENT}:4" in text
    assert "2 findings (2 errors) in 2 inputs" in text


@pytest.mark.parametrize("args", [["-"], []], ids=["dash", "no-argument"])
def test_stdin_with_dash_or_no_argument(args):
    pasted = CLIENT.read_text()
    result, document = scan_json(*args, stdin=pasted)
    assert result.exit_code == 1
    [finding] = document["findings"]
    assert finding["source"] == "<stdin>"
    assert (finding["code"], finding["fields"]["prompt_tokens"], finding["derived"]["prompt_cut"]) == ("VT102", 9120, 929)


def test_gzip_is_read_by_content_from_a_file_and_from_stdin(tmp_path):
    packed = gzip.compress(KV_STARTUP.read_bytes())
    renamed = tmp_path / "server.log.1"  # logrotate names without .gz exist too
    renamed.write_bytes(packed)
    _, document = scan_json(renamed)
    assert [f["derived"]["fit_max_model_len"] for f in document["findings"]] == [43488]
    _, piped = scan_json("-", stdin=packed)
    assert [f["code"] for f in piped["findings"]] == ["VT201"]


@pytest.mark.parametrize(
    "fail_on, path, code",
    [
        ("error", KV_STARTUP, 1),
        ("never", KV_STARTUP, 0),
        ("error", AUTO_FIT, 0),  # a warning does not fail the default threshold
        ("warning", AUTO_FIT, 1),
        ("info", AUTO_FIT, 1),
        ("info", NORMAL, 0),  # capacity facts are not findings
    ],
)
def test_fail_on_thresholds(fail_on, path, code):
    assert scan("--format", "text", "--fail-on", fail_on, path).exit_code == code


def test_a_missing_file_is_one_line_exit_2_and_the_others_are_still_reported(tmp_path):
    missing = tmp_path / "absent.log"
    result = scan("--format", "json", KV_STARTUP, missing, CLIENT)
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line]
    assert errors == [f"vllm-triage: error: {missing}: no such file"]
    document = json.loads(result.stdout)
    assert {f["code"] for f in document["findings"]} == {"VT201", "VT102"}
    assert "Traceback" not in result.stderr


def test_usage_errors_exit_2():
    assert scan("--fail-on", "sometimes", KV_STARTUP).exit_code == 2
    assert scan("--format", "yaml", KV_STARTUP).exit_code == 2


def test_python_dash_m_triage_is_the_same_command():
    run = subprocess.run(
        [sys.executable, "-m", "triage", "scan", "--format", "json", str(KV_STARTUP)],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )
    assert run.returncode == 1, run.stderr
    assert json.loads(run.stdout)["findings"][0]["derived"]["fit_max_model_len"] == 43488


def test_python_dash_m_reads_a_pipe():
    run = subprocess.run(
        [sys.executable, "-m", "triage", "scan"], input=CLIENT.read_bytes(),
        capture_output=True, cwd=ROOT, timeout=60, env={**PYTHON_M_ENV},
    )
    assert run.returncode == 1, run.stderr
    assert b"Cut the prompt to at most 8,191 tokens (929 fewer" in run.stdout
    assert b"paste the log" not in run.stderr  # a pipe is not a terminal: no hint


def test_the_finding_never_echoes_prompt_text_from_the_same_line():
    line = (
        '{"level":"error","msg":"upstream 400","prompt":"SECRET-CONTRACT-TEXT please summarise",'
        '"body":"{\\"error\\":{\\"message\\":\\"This model\'s maximum context length is 8192 tokens. However, your '
        'request has 9120 input tokens. Please reduce the length of the input messages.\\",\\"code\\":400}}"}\n'
    )
    for format_name in ("text", "json"):
        result = scan("--format", format_name, "-", stdin=line)
        assert result.exit_code == 1
        assert "9120" in result.stdout
        assert "SECRET" not in result.stdout


def test_a_request_log_line_quoting_an_error_is_not_a_finding_but_the_next_line_is():
    quoted = (
        "(APIServer pid=1) INFO 10-06 09:14:03 [logger.py:41] Received request chatcmpl-1: prompt: "
        "'ValueError: This model\\'s maximum context length is 4096 tokens. However, you requested 5230 tokens "
        "(4230 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.', "
        "params: SamplingParams(max_tokens=1000), lora_request: None.\n"
    )
    real = (
        "(APIServer pid=1) ERROR 10-06 09:14:03 [serving_chat.py:197] ValueError: This model's maximum context "
        "length is 8192 tokens. However, you requested 9000 tokens (8000 in the messages, 1000 in the completion). "
        "Please reduce the length of the messages or completion.\n"
    )
    _, document = scan_json("-", stdin=quoted + real)
    assert [(f["line"], f["fields"]["max_model_len"]) for f in document["findings"]] == [(2, 8192)]


def test_the_paste_hint_only_when_stdin_is_a_terminal_and_no_file_is_given():
    assert paste_hint(["-"], stdin_is_terminal=True) == "vllm-triage: paste the log, then Ctrl-D"
    assert paste_hint(["-"], stdin_is_terminal=False) is None  # a pipe
    assert paste_hint(["server.log"], stdin_is_terminal=True) is None
    assert paste_hint(["server.log", "-"], stdin_is_terminal=True) is None
