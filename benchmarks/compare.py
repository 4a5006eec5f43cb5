"""CPU time of `vllm-triage scan` from two or more installs on the same log, run in turns.

Wall time on a shared machine moves by a third between identical runs; the CPU time a
scan takes (user and system, of that child alone) moves much less, and running the builds
one after another in each round gives them the same state of the machine. For a change's
cost: an install of the code before it and one after, each in its own venv.

    git worktree add --detach ../before <rev> && python -m venv ../before/.venv \\
        && ../before/.venv/bin/pip install -e ../before
    python benchmarks/compare.py benchmarks/data/mix-256M.log ../before/.venv .venv
    python benchmarks/compare.py --rounds 20 some.log ../before/.venv .venv

Each install's vllm-triage runs `scan --format json --fail-on never LOG` (VLLM_TRIAGE_ENGINE
as in the environment); it prints the least and the median CPU time of the rounds, and the
least wall time.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def scan_command(venv: Path, log: str) -> list[str]:
    return [str(venv / "bin" / "vllm-triage"), "scan", "--format", "json", "--fail-on", "never", log]


def timed(command: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of the command."""
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log")
    parser.add_argument("venvs", nargs="+", type=Path, help="the installs to compare (venv folders)")
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args(argv)
    missing = [str(v) for v in args.venvs if not (v / "bin" / "vllm-triage").exists()]
    if missing or not os.path.isfile(args.log):
        print(f"compare.py: no vllm-triage in {', '.join(missing)}" if missing else f"compare.py: no such log {args.log}",
              file=sys.stderr)
        return 2
    runs: dict[Path, list[tuple[float, float]]] = {venv: [] for venv in args.venvs}
    for _ in range(args.rounds):
        for venv in args.venvs:
            runs[venv].append(timed(scan_command(venv, args.log)))
    print(f"{Path(args.log).name}, {args.rounds} rounds, engine {os.environ.get('VLLM_TRIAGE_ENGINE', 'default')}")
    for venv, times in runs.items():
        cpu = [c for c, _ in times]
        print(f"  {str(venv):<40} CPU least {min(cpu) * 1e3:7.0f} ms, median {statistics.median(cpu) * 1e3:7.0f} ms; "
              f"wall least {min(w for _, w in times) * 1e3:7.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
