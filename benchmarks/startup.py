"""Whole-process time of `vllm-triage scan` on small inputs, where start-up is most of it.

For each input it runs `vllm-triage scan --format json --fail-on never INPUT` from a
warm rule cache (one unmeasured run first) and prints the best of --repeat runs in ms.
With --tree, the same runs are made with other checkouts' scanners (each tree's
.venv/bin/vllm-triage), alternated run by run so a noisy machine slows them alike: the
way to compare this checkout with an older commit in a `git worktree`.

    python benchmarks/startup.py                                   # a few fixtures
    python benchmarks/startup.py fixtures/robust/cut-short.log --repeat 15
    python benchmarks/startup.py --tree /work/bench-base --tree /work/bench-mid big.log

It also counts, for this checkout, what a warm start-up does (deterministic, unlike the
times): the regexes parsed by the regex module's parser and by stdlib re's, and the modules
imported by the scan of each input.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
INPUTS = ("fixtures/runs/healthy-v0-v066-tp2.log", "fixtures/runs/failed-v1-multiproc-v0110-load-oom.log",
          "fixtures/robust/cut-short.log")
# Counts, inside one scan process: the regexes each parser parsed (the regex module's and
# stdlib re's, import-time ones included), or the modules imported (without the counting).
COUNTER = """
import sys
if sys.argv[2] == "compiled":
    import re._parser as parser, regex._main as main_module
    counts = {"regex": 0, "re": 0}
    def counting(kind, real):
        def parse(*args, **kwargs):
            counts[kind] += 1
            return real(*args, **kwargs)
        return parse
    main_module._parse_pattern = counting("regex", main_module._parse_pattern)
    parser.parse = counting("re", parser.parse)
from triage.cli import main
try:
    main(["scan", "--format", "json", "--fail-on", "never", sys.argv[1]])
except SystemExit:
    pass
print(f"regex {counts['regex']}, re {counts['re']}" if sys.argv[2] == "compiled" else len(sys.modules), file=sys.stderr)
"""


def scanner_of(tree: Path) -> str:
    found = shutil.which("vllm-triage", path=str(tree / ".venv" / "bin"))
    if found is None:
        raise SystemExit(f"{tree}: no .venv/bin/vllm-triage (python3 -m venv .venv && .venv/bin/pip install -e .)")
    return found


def timed_run(scanner: str, path: str) -> float:
    started = time.perf_counter()
    subprocess.run([scanner, "scan", "--format", "json", "--fail-on", "never", path],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started


def counts(python: str, path: str) -> str:
    """'parsed: regex N, re M; K modules' of one warm scan of `path`."""
    said = [subprocess.run([python, "-c", COUNTER, path, what], capture_output=True, text=True, check=False).stderr
            for what in ("compiled", "modules")]
    if not all(said):
        return "counts unavailable"
    return f"parsed: {said[0].splitlines()[-1]}; {said[1].splitlines()[-1]} modules"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="*", help="logs to scan (default: a few fixtures)")
    parser.add_argument("--repeat", type=int, default=9, help="runs per input and tree; the best counts")
    parser.add_argument("--tree", action="append", default=[], help="another checkout to time alongside (repeatable)")
    args = parser.parse_args(argv)
    trees = [ROOT, *(Path(tree).resolve() for tree in args.tree)]
    scanners = {tree: scanner_of(tree) for tree in trees}
    for tree in trees:  # as installed: without .pyc every run compiles the modules again
        compileall.compile_dir(str(tree / "triage"), quiet=1)
    inputs = args.inputs or [str(ROOT / name) for name in INPUTS]
    print(f"whole-process `vllm-triage scan --format json`, warm cache, best of {args.repeat}, ms")
    print(f"{'input':<48} " + " ".join(f"{tree.name[:14]:>14}" for tree in trees))
    for path in inputs:
        best = {tree: float("inf") for tree in trees}
        for tree in trees:
            timed_run(scanners[tree], path)  # the cache written, the files in the page cache
        for _ in range(args.repeat):
            for tree in trees:
                best[tree] = min(best[tree], timed_run(scanners[tree], path))
        print(f"{os.path.basename(path)[:48]:<48} " + " ".join(f"{1000 * best[tree]:>14.0f}" for tree in trees)
              + f"   ({counts(str(Path(scanners[ROOT]).parent / 'python'), path)})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
