"""Throughput, peak memory and exactness of `vllm-triage scan`, against grep -F.

For each log shape (the realistic mix first, then the stress shapes: request logging
on, and short access lines with dense metrics) and for 30 and 300 rules, it runs
`LC_ALL=C grep -c -F -f anchors.txt` and the whole `vllm-triage scan --format json`
process with each engine (VLLM_TRIAGE_ENGINE=re, =hyperscan) on the same input, where
anchors.txt is the tool's own list of literal anchors for that rule set (warm cache,
whole process time, best of --repeat rounds; a round runs grep and each engine once,
so a noisy machine slows them alike). It prints MiB/s, the multiple of grep's time,
the scan's peak RSS (ru_maxrss of that child alone, from wait4: an upper bound, since
Linux carries this parent's high-water mark into the child), and whether the findings
counted per rule equal what the generator injected.

    python benchmarks/run.py                      # 256 MiB per shape, in benchmarks/data/
    python benchmarks/run.py --size 1G --repeat 3
    python benchmarks/run.py --size 10G --stdin   # generated on the fly into a pipe
    python benchmarks/run.py --engine re          # one engine only

The extra rules for the 300-rule runs are generated (plausible runtime messages,
each with its example) and never match the injected events. The rule sets are the
built-in rules and ten times as many (the issue's "30 and 300 rules": the built-in
set has grown past 30).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
try:  # the installed vllm-triage first (an editable one's finder comes after sys.path): its anchors
    import triage  # noqa: F401
except ImportError:  # the source tree lacks triage.rules.builtin
    sys.path.append(str(ROOT))
sys.path.insert(0, str(HERE))

from generate import MIX_ENGINES, MIX_METRICS_EVERY, MIX_REQUESTS_PER_SECOND, SHAPES, parse_size  # noqa: E402

from triage.match.engines import ENGINE_VARIABLE  # noqa: E402
from triage.match.matcher import Matcher  # noqa: E402
from triage.rules.ruleset import load_rules  # noqa: E402

RULE_SCALES = (1, 10)  # the built-in rules, and ten times as many
SUBJECTS = ("Tokenizer pool", "Speculative decoder", "LoRA adapter cache", "Prefix cache evictor",
            "Detokenizer", "Structured output backend", "Multimodal processor", "Sampler",
            "Block allocator", "Async output processor", "Guided decoding FSM", "Pipeline stage",
            "Expert router", "KV connector", "Prometheus exporter", "Request scheduler")
VERBS = ("rejected", "dropped", "throttled", "could not reserve", "gave up on", "deferred",
         "truncated", "failed to compile", "timed out waiting for", "evicted")
OBJECTS = ("queued adapters", "draft tokens", "grammar states", "image embeddings", "cached prefixes",
           "pinned buffers", "detokenized chunks", "expert slots", "transfer handles", "audio frames")


def extra_rules(count: int, path: Path) -> Path:
    """`count` plausible rules that match nothing in the generated logs."""
    rng = random.Random(count)
    seen: set[str] = set()
    rules = []
    used = {rule.code for rule in load_rules().rules}
    free = iter(c for c in [*range(500, 1000), *range(100, 500)] if f"VT{c}" not in used)
    while len(rules) < count:
        subject, verb, thing = rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(OBJECTS)
        message = f"{subject} {verb} {thing}"
        if message in seen:
            continue
        seen.add(message)
        code = next(free)
        number = rng.randint(2, 9999)
        rules.append({
            "code": f"VT{code}", "name": f"bench-extra-{code}", "title": message, "stage": "runtime",
            "severity": "info", "keywords": [message],
            "patterns": [{"id": "main", "regex": f"{message} \\(limit {{limit:int}}\\)"}],
            "examples": {"match": [{"text": f"WARNING 01-02 03:04:05 [engine.py:{number}] {message} (limit {number})",
                                    "fields": {"limit": number}}]},
        })
    path.write_text(json.dumps({"stage": "runtime", "rules": rules}, indent=1))  # JSON is YAML
    return path


def wait_child(process: subprocess.Popen, started: float) -> tuple[float, int, int]:
    """Seconds, peak RSS in KiB and exit status of that one child."""
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - started, usage.ru_maxrss, process.returncode


def run_timed(command: list[str], log: Path | None, generate: list[str] | None, env: dict) -> tuple[float, int, bytes]:
    """Whole-process time of `command` reading the log (a file, or the generator's pipe)."""
    started = time.perf_counter()
    producer = None
    if generate:
        producer = subprocess.Popen(generate, stdout=subprocess.PIPE)
        stdin = producer.stdout
    else:
        stdin = subprocess.DEVNULL
    consumer = subprocess.Popen(command + ([str(log)] if log else ["-"]), stdin=stdin,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    if producer:
        producer.stdout.close()  # type: ignore[union-attr]
    output = consumer.stdout.read()  # type: ignore[union-attr]
    consumer.stderr.read()  # type: ignore[union-attr]
    seconds, peak_kib, _ = wait_child(consumer, started)
    if producer:
        producer.wait()
    return seconds, peak_kib, output


def counted_findings(report: bytes, event_codes: set[str]) -> Counter:
    """Findings per code, of rules that match log text (not summaries the diagnosis adds)."""
    counts: Counter = Counter()
    for finding in json.loads(report)["findings"]:
        if finding["code"] in event_codes:
            counts[finding["code"]] += finding["count"]
    return counts


def installed_engines() -> list[str]:
    """The engines the scanner next to this Python can run (hyperscan where it is installed)."""
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('hyperscan') is None)"
    return ["re", "hyperscan"] if subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0 else ["re"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Benchmark vllm-triage scan against grep -F.")
    parser.add_argument("--size", default="256M", help="log size per shape (default 256M)")
    parser.add_argument("--stdin", action="store_true", help="generate into a pipe instead of a file")
    parser.add_argument("--repeat", type=int, default=2, help="rounds per measurement; the best counts")
    parser.add_argument("--shape", choices=SHAPES, action="append", help="only this shape (repeatable)")
    parser.add_argument("--scale", type=int, choices=RULE_SCALES, action="append", help="only this rule-set scale")
    parser.add_argument("--engine", choices=("re", "hyperscan"), action="append",
                        help="only this engine (repeatable; default: every installed one)")
    parser.add_argument("--data", default=str(HERE / "data"), help="where logs and rule files go")
    parser.add_argument("--tags", choices=("seeded", "on", "off"), default="seeded",
                        help="V1's process tag on every line of the generated logs (default: as the shape and seed pick)")
    args = parser.parse_args(argv)
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    size = parse_size(args.size)
    scanner = shutil.which("vllm-triage", path=str(Path(sys.executable).parent)) or "vllm-triage"
    grep = shutil.which("grep") or "grep"
    engines = args.engine or installed_engines()
    # As installed: pip compiles the modules; without their .pyc (PYTHONDONTWRITEBYTECODE, a
    # fresh checkout) every run would compile them again, 20 ms or more of start-up.
    compileall.compile_dir(str(ROOT / "triage"), quiet=1)
    builtin = len(load_rules().rules)
    print(f"engines: {', '.join(engines)}; {builtin} built-in rules; {size / 2**20:.0f} MiB per shape"
          f"{' through stdin' if args.stdin else ''}{'' if args.tags == 'seeded' else f'; tags {args.tags}'}; best of {args.repeat}")
    print(f"mix: {MIX_REQUESTS_PER_SECOND} requests/s (one access line each), a metrics line every {MIX_METRICS_EVERY} s "
          f"from each of {MIX_ENGINES} engine(s), request logging off (so no aborts logged), V1's process tags")
    print(f"{'shape':<12} {'rules':>5} {'engine':<9} {'MiB/s':>8} {'x grep':>7} {'grep s':>7} {'scan s':>7} {'RSS MiB':>8}  "
          "findings = injected")
    for shape in args.shape or SHAPES:
        name = shape if args.tags == "seeded" else f"{shape}-tags-{args.tags}"
        log = data / f"{name}-{args.size}.log"
        counts_file = data / f"{name}-{args.size}.json"
        generate = [sys.executable, str(HERE / "generate.py"), "--shape", shape, "--size", args.size, "--tags", args.tags]
        if not args.stdin and not (log.exists() and counts_file.exists()):
            subprocess.run(generate + ["-o", str(log), "--counts", str(counts_file)], check=True)
        if args.stdin and not counts_file.exists():  # the counts need one full run of the generator
            subprocess.run(generate + ["-o", os.devnull, "--counts", str(counts_file)], check=True)
        injected = Counter(json.loads(counts_file.read_text())["findings"])
        for scale in args.scale or RULE_SCALES:
            total = scale * builtin
            extra = [extra_rules(total - builtin, data / f"extra-rules-{total}.yaml")] if scale > 1 else []
            anchors = data / f"anchors-{total}.txt"
            matcher = Matcher(load_rules(extra))
            anchors.write_bytes(b"\n".join(matcher.anchors) + b"\n")
            source = None if args.stdin else log
            feed = generate + ["-o", "-"] if args.stdin else None
            scan_command = [scanner, "scan", "--format", "json", "--fail-on", "never"]
            scan_command += [option for path in extra for option in ("--rules", str(path))]
            runs: dict[str, list] = {"grep": [], **{engine: [] for engine in engines}}
            for _ in range(args.repeat):
                runs["grep"].append(run_timed([grep, "-c", "-F", "-f", str(anchors)], source, feed, env_with()))
                for engine in engines:
                    runs[engine].append(run_timed(scan_command, source, feed, env_with(engine)))
            grep_seconds = min(r[0] for r in runs["grep"])
            codes = {r.code for r in matcher.rules if r.kind == "finding"}
            for engine in engines:
                scan_seconds = min(r[0] for r in runs[engine])
                peak_mib = max(r[1] for r in runs[engine]) / 1024
                found = counted_findings(runs[engine][0][2], codes)
                exact = "yes" if found == injected else (
                    f"NO: found {dict(sorted(found.items()))}, injected {dict(sorted(injected.items()))}"
                )
                print(f"{shape:<12} {total:>5} {engine:<9} {size / 2**20 / scan_seconds:>8.0f} {scan_seconds / grep_seconds:>7.1f} "
                      f"{grep_seconds:>7.2f} {scan_seconds:>7.2f} {peak_mib:>8.0f}  {exact}", flush=True)
    return 0


def env_with(engine: str | None = None) -> dict[str, str]:
    """The environment of a run: the C locale (grep's fastest), and the engine forced."""
    env = dict(os.environ, LC_ALL="C")
    env.pop(ENGINE_VARIABLE, None)
    return env if engine is None else dict(env, **{ENGINE_VARIABLE: engine})

if __name__ == "__main__":
    sys.exit(main())
