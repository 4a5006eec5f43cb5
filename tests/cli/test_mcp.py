"""`vllm-triage mcp` as an agent meets it: a subprocess spoken to by the MCP SDK's own stdio client.

One server is started for the module and one scripted session runs every call in order (so
"a bad path, then a call that succeeds" is what the server really lived through), bounded by
SESSION_SECONDS; the tests then read the recorded answers. Each tool's answer is compared with
the JSON the CLI prints for the same request, over every fixture log for the scans.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from triage import cli
from triage.rules.cache import CACHE_VARIABLE

from conftest import FIXTURES, ROOT

# The installed command, as an agent starts it: `python -m triage` in the checkout would import
# the source tree, which does not hold triage.rules.builtin (the package maps it from rules/).
CONSOLE_SCRIPT = Path(sys.executable).parent / "vllm-triage"
SESSION_SECONDS = 120  # the whole scripted session; about 5 s here
TOOLS = {"scan_log", "scan_text", "plan", "budget", "explain_knob", "show_rule"}
FIXTURE_LOGS = sorted(
    str(path.relative_to(ROOT)) for path in FIXTURES.rglob("*")
    if path.name.endswith((".log", ".log.gz")) and "models" not in path.parts
)
LLAMA = "fixtures/models/llama-3.1-8b-instruct/config.json"
TINY = "fixtures/models/tiny-llama"
SECRET_KEY = "sk-proj-A1b2C3d4E5f6G7h8I9j0KLmn"
PROMPT_WORDS = "PROMPT-zebra-umbrella-42"
OVERFLOW = (
    "This model's maximum context length is 8192 tokens. However, you requested 9100 tokens "
    "(8100 in the messages, 1000 in the completion). Please reduce the length of the messages or completion."
)
PASTED = (
    "INFO 03-02 09:14:05 logger.py:37] Received request chat-1: prompt: '" + PROMPT_WORDS + "', params: None\n"
    f"ERROR 03-02 09:14:11 gateway.py:90] key={SECRET_KEY} upstream said: {OVERFLOW}\n"
)


class Outcome:
    """One call's answer: the JSON document, or the error text."""

    def __init__(self, result: Any):
        self.is_error = bool(result.is_error)
        self.text = " ".join(part.text for part in result.content if getattr(part, "text", None))
        self.document = result.structured_content if not self.is_error else None


async def script(tmp_path) -> dict[str, Any]:
    fifo = tmp_path / "a.fifo"
    os.mkfifo(fifo)
    params = StdioServerParameters(
        command=str(CONSOLE_SCRIPT), args=["mcp"], cwd=str(ROOT), env={CACHE_VARIABLE: os.environ[CACHE_VARIABLE]},
    )
    answers: dict[str, Any] = {}
    with open(tmp_path / "server.stderr", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            answers["tools"] = (await session.list_tools()).tools

            async def call(label: str, tool: str, arguments: dict[str, Any]) -> None:
                answers[label] = Outcome(await session.call_tool(tool, arguments))

            for path in FIXTURE_LOGS:
                await call(f"scan_log {path}", "scan_log", {"path": path})
            await call("missing log", "scan_log", {"path": "fixtures/no-such.log"})
            await call("after the missing log", "scan_log", {"path": "fixtures/startup-kv-too-small-v1.log"})
            await call("a folder", "scan_log", {"path": "fixtures"})
            await call("a fifo", "scan_log", {"path": str(fifo)})
            await call("stdin", "scan_log", {"path": "/dev/stdin"})
            await call("a binary file", "scan_log", {"path": "fixtures/models/tiny-llama/model.safetensors"})
            await call("pasted fixture", "scan_text", {"text": (FIXTURES / "startup-kv-too-small-v1.log").read_text()})
            await call("pasted secrets", "scan_text", {"text": PASTED})
            await call("pasted unredacted", "scan_text", {"text": PASTED, "redact": False})
            await call("pasted too big", "scan_text", {"text": "x" * (4 * 1024 * 1024 + 1)})
            await call("plan", "plan", {"config_path": LLAMA, "gpu": "H100"})
            await call("plan folder", "plan", {"config_path": os.path.dirname(LLAMA), "gpu": "L4", "max_model_len": 131072})
            await call("plan unknown gpu", "plan", {"config_path": LLAMA, "gpu": "Voodoo 2"})
            await call("plan missing", "plan", {"config_path": "fixtures/models/none/config.json", "gpu": "H100"})
            await call("budget", "budget", {"max_model_len": 8192, "prompt_tokens": 7801})
            await call("budget file", "budget", {
                "max_model_len": 20, "prompt_file": f"{TINY}/prompt.txt", "tokenizer": f"{TINY}/tokenizer.json", "margin": 2,
            })
            await call("budget neither", "budget", {"max_model_len": 8192})
            await call("explain one", "explain_knob", {"topic": "max_model_len"})
            await call("explain all", "explain_knob", {})
            await call("explain unknown", "explain_knob", {"topic": "warp-drive"})
            await call("rule", "show_rule", {"code_or_name": "vt201"})
            await call("rule by name", "show_rule", {"code_or_name": "kv-cache-too-small"})
            await call("rule unknown", "show_rule", {"code_or_name": "VT999"})
            await call("wrong argument type", "budget", {"max_model_len": "many"})
            await call("last", "show_rule", {"code_or_name": "VT101"})
    answers["stderr"] = (tmp_path / "server.stderr").read_text()
    return answers


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("mcp")
    return asyncio.run(asyncio.wait_for(script(tmp_path), SESSION_SECONDS))


def cli_json(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli.main, list(args))
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


@pytest.fixture
def in_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_lists_the_tools_with_their_arguments(answers):
    tools = {tool.name: tool for tool in answers["tools"]}
    assert set(tools) == TOOLS
    assert tools["scan_log"].input_schema["required"] == ["path"]
    assert tools["scan_text"].input_schema["required"] == ["text"]
    assert tools["plan"].input_schema["required"] == ["config_path"]
    assert {"gpu", "gpu_memory", "max_model_len"} <= set(tools["plan"].input_schema["properties"])
    assert all(tool.description for tool in tools.values())


@pytest.mark.parametrize("path", FIXTURE_LOGS)
def test_scan_log_answers_the_json_report_of_every_fixture(answers, in_root, path):
    outcome = answers[f"scan_log {path}"]
    assert not outcome.is_error, outcome.text
    assert outcome.document == cli_json("scan", "--format", "json", "--redact", path)


def test_scan_log_numbers(answers):
    document = answers["scan_log fixtures/startup-kv-too-small-v1.log"].document
    (finding,) = document["findings"]
    assert (finding["code"], finding["line"], finding["count"]) == ("VT201", 24, 1)  # the re-raised copy is not a second failure
    assert finding["fields"]["max_model_len"] == 65536 and finding["derived"]["fit_max_model_len"] == 43488
    assert document["summary"]["error"] == 1


def test_a_bad_path_is_a_tool_error_and_the_server_keeps_serving(answers):
    missing = answers["missing log"]
    assert missing.is_error and "fixtures/no-such.log: no such file" in missing.text
    assert "Traceback" not in missing.text and "\n" not in missing.text
    after = answers["after the missing log"]
    assert not after.is_error and after.document["findings"][0]["code"] == "VT201"
    assert not answers["last"].is_error and answers["last"].document["code"] == "VT101"
    assert "Traceback" not in answers["stderr"]


@pytest.mark.parametrize(("label", "message"), [
    ("a folder", "fixtures: is a directory"),
    ("a fifo", "not a regular file"),  # never opened: it would wait for a writer for ever
    ("stdin", "not a regular file"),  # the protocol's own pipe
    ("a binary file", "not a log"),
    ("pasted too big", "more than 4 MiB"),
    ("plan unknown gpu", "Voodoo 2"),
    ("plan missing", "no such file"),
    ("budget neither", "--prompt-tokens"),
    ("explain unknown", "no topic 'warp-drive'"),
    ("rule unknown", "no rule 'VT999'"),
    ("wrong argument type", "max_model_len"),
])
def test_bad_input_is_a_one_line_tool_error(answers, label, message):
    outcome = answers[label]
    assert outcome.is_error and message in outcome.text, outcome.text
    assert "\n" not in outcome.text.strip() and "Traceback" not in outcome.text


def test_scan_text_reads_pasted_text_as_a_file(answers):
    pasted = answers["pasted fixture"].document
    from_file = answers["scan_log fixtures/startup-kv-too-small-v1.log"].document
    assert pasted["inputs"] == ["<pasted>"]
    assert [(f["code"], f["line"], f["fields"]) for f in pasted["findings"]] == [
        (f["code"], f["line"], f["fields"]) for f in from_file["findings"]
    ]


def test_redacted_by_default_and_never_the_prompt(answers):
    masked, plain = answers["pasted secrets"], answers["pasted unredacted"]
    for outcome in (masked, plain):
        (finding,) = outcome.document["findings"]
        assert finding["code"] == "VT101" and finding["fields"]["prompt_tokens"] == 8100
        assert PROMPT_WORDS not in json.dumps(outcome.document)
    assert SECRET_KEY not in json.dumps(masked.document)


def test_plan_is_the_cli_plan(answers, in_root):
    document = answers["plan"].document
    assert document == cli_json("plan", LLAMA, "--gpu", "H100", "--format", "json")
    assert [s["bytes_per_token"] for s in document["plan"]["scenarios"]] == [131_072, 65_536, 65_536]
    assert document["plan"]["gpu_name"] == "H100 80GB"
    folder = answers["plan folder"].document
    assert folder == cli_json("plan", os.path.dirname(LLAMA), "--gpu", "L4", "--max-model-len", "131072", "--format", "json")


def test_budget_is_the_cli_budget(answers):
    assert answers["budget"].document["budget"]["max_tokens"] == 391
    counted = answers["budget file"].document["budget"]
    assert counted["prompt_tokens"] == 15 and counted["max_tokens"] == 3
    assert "kv cache holds" not in answers["budget file"].text  # the prompt is never echoed


def test_explain_and_rules(answers, in_root):
    assert answers["explain one"].document == cli_json("explain", "max-model-len", "--format", "json")
    assert answers["explain all"].document == cli_json("explain", "--format", "json")
    rule = answers["rule"].document
    assert rule == cli_json("rules", "show", "VT201", "--format", "json") == answers["rule by name"].document
    assert rule["severity"] == "error"


def test_the_cli_does_not_import_the_sdk(in_root):
    """mcp and its dependencies (pydantic, anyio, httpx) would cost every scan's start-up."""
    process = subprocess.run(
        [str(CONSOLE_SCRIPT), "scan", "--format", "json", "fixtures/startup-kv-too-small-v1.log"],
        capture_output=True, text=True, timeout=60, check=False, env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"},
    )
    assert process.returncode == 1, process.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in process.stderr.splitlines() if line.startswith("import time:")}
    assert "triage.report" in imported  # importtime did list the modules
    assert not {name for name in imported if name.split(".")[0] in ("mcp", "pydantic", "anyio", "httpx")}


def test_without_the_extra_one_line_and_exit_2(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mcp" else real(name, *a))
    result = CliRunner().invoke(cli.main, ["mcp"])
    assert result.exit_code == 2
    from triage.cli.mcp import MCP_MISSING

    assert result.stderr == "vllm-triage: error: " + MCP_MISSING + "\n"
    assert "pip install 'vllm-triage[mcp]'" in result.stderr


@pytest.mark.parametrize(("path", "cut_at_line", "codes"), [
    ("fixtures/client-openai-python-traceback.log", 12, ["VT102"]),  # the finding is at line 4
    ("fixtures/startup-kv-too-small-v1.log", 10, []),  # at line 24: past the cut
    ("fixtures/request-overflow-v092-rotated.log.gz", 5, []),  # counted after gunzip
])
def test_a_log_is_read_up_to_the_bound(in_root, monkeypatch, path, cut_at_line, codes):
    import gzip

    from triage.cli import mcp_server

    data = (gzip.open if path.endswith(".gz") else open)(path, "rb").read()
    limit = sum(len(line) for line in data.splitlines(keepends=True)[:cut_at_line])
    monkeypatch.setattr(mcp_server, "MAX_LOG_BYTES", limit)
    document = mcp_server.scan_log(path)
    assert [finding["code"] for finding in document["findings"]] == codes
    assert document["errors"] == [f"{path}: more than {limit:,} bytes; the report covers the first {limit:,} bytes (scanned what could be read)"]
    monkeypatch.setattr(mcp_server, "MAX_LOG_BYTES", len(data))  # exactly the size: all of it, no error
    assert mcp_server.scan_log(path) == cli_json("scan", "--format", "json", "--redact", path)


def test_the_readme_registers_this_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## For coding agents", 1)[1].split("\n## ", 1)[0]
    config = json.loads(section.split("```json\n", 1)[1].split("```", 1)[0])
    assert config["mcpServers"]["vllm-triage"] == {"command": "vllm-triage", "args": ["mcp"]}
    assert cli.main.get_command(None, "mcp") is not None
    named = {cell.strip("`") for row in section.splitlines() if row.startswith("| `") for cell in [row.split(" | ")[0][2:]]}
    assert named == TOOLS  # the table lists the tools the server has
