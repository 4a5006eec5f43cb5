"""`vllm-triage mcp`: starts the MCP server (mcp_server.py), which only this command imports."""

from __future__ import annotations

from triage.cli import main
from triage.cli.common import fail


MCP_MISSING = "vllm-triage mcp needs the MCP SDK, an optional extra: pip install 'vllm-triage[mcp]'"


@main.command("mcp")
def mcp_command() -> None:
    """Serve scan, plan, budget, explain and rules show to a coding agent: an MCP server on stdio."""
    import importlib.util

    if importlib.util.find_spec("mcp") is None:
        fail(MCP_MISSING)
    from triage.cli.mcp_server import serve  # the SDK: imported only by this command

    serve()
