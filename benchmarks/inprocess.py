"""Where a scan's time goes, in-process (no start-up, no report): reading the log, the
anchor pass, and matching and diagnosing the candidate lines.

    python benchmarks/inprocess.py benchmarks/data/access-log-256M.log
    VLLM_TRIAGE_ENGINE=re python benchmarks/inprocess.py benchmarks/data/access-log-256M.log

Each figure is the best of --repeat runs. "pass" is a scan whose matcher leaves every
candidate line unmatched: reading, the anchor pass, line counting and listing each
candidate's anchors. What the full scan takes beyond it, divided by the candidate lines,
is the cost of one line's matching and diagnosis.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from triage.diagnose import Diagnoser  # noqa: E402
from triage.matcher import Matcher  # noqa: E402
from triage.reader import iter_chunks, open_input  # noqa: E402
from triage.ruleset import load_rules  # noqa: E402


class PassOnly(Matcher):
    """Finds and lists the candidate lines, matches none."""

    def _match_line(self, *args, **kwargs):  # type: ignore[override]
        self.candidates += 1
        return []

    candidates = 0


def best_of(repeat: int, run) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    ruleset = load_rules()
    checks = [rule for rule in ruleset.rules if rule.kind == "check"]
    events = 0

    def read() -> None:
        for chunk in iter_chunks(open_input(args.log)[1]):
            chunk.lines = 0

    def scan(matcher: Matcher) -> None:
        nonlocal events
        name, stream = open_input(args.log)
        diagnoser = Diagnoser(checks, False, ruleset.fact_names, keep_runs=False)
        events = 0
        for event in matcher.scan(name, iter_chunks(stream)):
            diagnoser.add(event, render=False)
            events += 1
        diagnoser.result()

    counted = PassOnly(ruleset)
    scan(counted)
    candidates = counted.candidates
    reading = best_of(args.repeat, read)
    passing = best_of(args.repeat, lambda: scan(PassOnly(ruleset)))
    full = best_of(args.repeat, lambda: scan(Matcher(ruleset)))
    size = Path(args.log).stat().st_size / 2**20
    print(f"engine {Matcher(ruleset).engine.name}; {size:.0f} MiB; best of {args.repeat}")
    print(f"read {reading:.3f} s, pass {passing:.3f} s, full scan {full:.3f} s ({size / full:.0f} MiB/s)")
    print(f"{candidates:,} candidate lines, {events:,} events: "
          f"{(full - passing) / max(candidates, 1) * 1e6:.1f} us a candidate line to match and diagnose")
    return 0


if __name__ == "__main__":
    sys.exit(main())
