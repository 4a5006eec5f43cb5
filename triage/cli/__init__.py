"""The command line: the `vllm-triage` group, and one module per command group (scan, gate,
plan and budget, rules, explain, mcp, probe, rules export) that parses options and wires the
stages together; it computes nothing. common.py holds what they share."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from triage import __version__
from triage.cli.common import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, fail, silence_stdout
from triage.match.engines import EngineError


# The module of each command, imported when the command is run or listed: `scan` reads no
# other command's options. Each registers its command on `main` (export adds `rules export`).
COMMAND_MODULES = {
    "budget": ("plan",), "explain": ("explain",), "gate": ("gate",), "mcp": ("mcp",), "plan": ("plan",),
    "probe": ("probe",), "rules": ("rules", "export"), "scan": ("scan",),
}


class TriageGroup(click.Group):
    """Ends quietly when the reader of stdout goes away (`| head`) and on Ctrl-C.

    Every command writes through QuietStdout, so a closed pipe drops the rest of the output
    and the command still runs to its end: its exit code (a gate's verdict, a rules test's
    outcome) is the one it would have had."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMAND_MODULES)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands:
            # a name that is no command loads them all: click suggests the close ones it has
            every = [module for modules in COMMAND_MODULES.values() for module in modules]
            for module in COMMAND_MODULES.get(name, every):
                importlib.import_module(f"triage.cli.{module}")
        return super().get_command(ctx, name)

    def invoke(self, ctx: click.Context) -> None:
        original = sys.stdout
        if original is not None:
            sys.stdout = QuietStdout(original)
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # a write that did not go through sys.stdout
            silence_stdout()
            ctx.exit(EXIT_BROKEN_PIPE)
        except KeyboardInterrupt:
            click.echo("vllm-triage: interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)
        except EngineError as exc:  # VLLM_TRIAGE_ENGINE names one that cannot run here
            fail(str(exc))
        finally:
            if original is not None:
                sys.stdout.flush()  # still quiet: what is buffered may meet the closed pipe
                sys.stdout = original


class QuietStdout:
    """stdout (text, or its .buffer) whose write or flush on a closed pipe points stdout at
    /dev/null instead of raising BrokenPipeError."""

    def __init__(self, stream: Any):
        self._stream = stream

    def write(self, data: Any) -> int:
        try:
            return self._stream.write(data)
        except BrokenPipeError:
            silence_stdout()
            return len(data)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            silence_stdout()
            self._stream.flush()  # what was buffered now goes to /dev/null

    @property
    def buffer(self) -> QuietStdout:
        return QuietStdout(self._stream.buffer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@click.group(cls=TriageGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="vllm-triage")
def main() -> None:
    """Diagnose vLLM context-length and KV-cache failures from logs, tracebacks and client errors."""

