"""Where a scan's time goes, in-process (no start-up, no report): reading the log, the
anchor pass, reading the records it points at, and diagnosing their events.

    python benchmarks/inprocess.py benchmarks/data/access-log-256M.log
    VLLM_TRIAGE_ENGINE=re python benchmarks/inprocess.py benchmarks/data/access-log-256M.log

The scan is timed whole (best of --repeat) and its parts by a clock around each: "read"
is reading the log alone (measured apart), "pass" the anchor pass that finds the next
candidate row, "match" assembling and reading a record (one the anchor pass points at, or
any of the input's first 256 KiB), "diagnose" the diagnosis taking the events. Reading the
clock adds about 0.2 µs a call.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

try:  # the installed vllm-triage: run with another checkout's python, it measures that build
    import triage  # noqa: F401
except ImportError:  # this checkout, not installed
    sys.path.append(str(Path(__file__).resolve().parent.parent))

from triage.input.reader import iter_chunks, open_input
from triage.match.matcher import Matcher
from triage.pipeline import Phases, ScanOptions, scan
from triage.rules.ruleset import load_rules


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--without", metavar="FILE", action="append", default=[],
                        help="leave out the built-in rules of this rule file (e.g. lifecycle.yaml): what its rules cost")
    args = parser.parse_args(argv)
    ruleset = load_rules()
    rules = [rule for rule in ruleset.rules if Path(rule.file).name not in args.without]

    def read() -> float:
        started = time.perf_counter()
        for chunk in iter_chunks(open_input(args.log)[1]):
            chunk.lines = 0
        return time.perf_counter() - started

    def timed_scan() -> tuple[float, Phases, Matcher]:
        phases, matcher = Phases(), Matcher(ruleset, rules)
        started = time.perf_counter()
        scan([args.log], ScanOptions(ruleset, matcher=matcher, phases=phases))
        return time.perf_counter() - started, phases, matcher

    reading = min(read() for _ in range(args.repeat))
    total, spent, matcher = min((timed_scan() for _ in range(args.repeat)), key=lambda run: run[0])
    size = Path(args.log).stat().st_size / 2**20
    records, events = max(spent.calls["match"], 1), spent.calls["diagnose"]
    left_out = f"; without {', '.join(args.without)} ({len(ruleset.rules) - len(rules)} rules)" if args.without else ""
    print(f"engine {matcher.engine.name if matcher.engine else 'none'}; {size:.0f} MiB; best of {args.repeat}{left_out}")
    print(f"scan {total:.3f} s ({size / total:.0f} MiB/s): read {reading:.3f} s, pass {spent['pass']:.3f} s, "
          f"match {spent['match']:.3f} s, diagnose {spent['diagnose']:.3f} s")
    print(f"{spent.calls['match']:,} records read, {events:,} events: {spent['match'] / records * 1e6:.1f} µs a record to "
          f"read, {spent['diagnose'] / records * 1e6:.1f} µs to diagnose its events")
    return 0


if __name__ == "__main__":
    sys.exit(main())
