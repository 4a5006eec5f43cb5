"""Where a scan's time goes, in-process (no start-up, no report): reading the log, the
anchor pass, matching the candidate lines, and diagnosing their events.

    python benchmarks/inprocess.py benchmarks/data/access-log-256M.log
    VLLM_TRIAGE_ENGINE=re python benchmarks/inprocess.py benchmarks/data/access-log-256M.log

The scan is timed whole (best of --repeat) and its parts by a clock around each: "read"
is reading the log alone (measured apart), "pass" the anchor pass that lists a chunk's
candidates and counts its lines, "match" matching the candidate lines away from chunk
edges (nearly all of them), "diagnose" the diagnosis taking the events. Reading the clock
adds about 0.2 µs a call.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))  # an installed vllm-triage first

from triage.diagnose.diagnoser import Diagnoser  # noqa: E402
from triage.match.matcher import Matcher  # noqa: E402
from triage.input.reader import iter_chunks, open_input  # noqa: E402
from triage.rules.ruleset import load_rules  # noqa: E402


class TimedMatcher(Matcher):
    """The matcher, with the time of its phases (and of the diagnosis it feeds) added up."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.spent: Counter[str] = Counter()
        self.lines = 0

    def timed(self, phase: str, call, *args, **kwargs):
        """call(*args, **kwargs), its time added to the phase's."""
        started = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            self.spent[phase] += time.perf_counter() - started

    def _candidates(self, *args, **kwargs):  # type: ignore[override]
        return self.timed("pass", super()._candidates, *args, **kwargs)

    def _match_line(self, *args, **kwargs):  # type: ignore[override]
        self.lines += 1
        return self.timed("match", super()._match_line, *args, **kwargs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    ruleset = load_rules()
    checks = [rule for rule in ruleset.rules if rule.kind == "check"]

    def read() -> float:
        started = time.perf_counter()
        for chunk in iter_chunks(open_input(args.log)[1]):
            chunk.lines = 0
        return time.perf_counter() - started

    def scan() -> tuple[float, TimedMatcher, int]:
        matcher = TimedMatcher(ruleset)
        name, stream = open_input(args.log)
        diagnoser = Diagnoser(checks, False, ruleset.fact_names, keep_runs=False)
        events = 0
        started = time.perf_counter()
        for event in matcher.scan(name, iter_chunks(stream)):
            matcher.timed("diagnose", diagnoser.add, event, render=False)
            events += 1
        diagnoser.result()
        return time.perf_counter() - started, matcher, events

    reading = min(read() for _ in range(args.repeat))
    total, matcher, events = min((scan() for _ in range(args.repeat)), key=lambda run: run[0])
    size = Path(args.log).stat().st_size / 2**20
    spent, lines = matcher.spent, max(matcher.lines, 1)
    print(f"engine {matcher.engine.name if matcher.engine else 'none'}; {size:.0f} MiB; best of {args.repeat}")
    print(f"scan {total:.3f} s ({size / total:.0f} MiB/s): read {reading:.3f} s, pass {spent['pass']:.3f} s, "
          f"match {spent['match']:.3f} s, diagnose {spent['diagnose']:.3f} s")
    print(f"{matcher.lines:,} candidate lines, {events:,} events: {spent['match'] / lines * 1e6:.1f} µs a line to "
          f"match, {spent['diagnose'] / lines * 1e6:.1f} µs to diagnose its events")
    return 0


if __name__ == "__main__":
    sys.exit(main())
