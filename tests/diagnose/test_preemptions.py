"""VT301 says how many preemptions there were, not how many lines said so: the largest
cumulative count V0's warnings printed, or the sum of V1's per-interval counts, whatever the
order and number of the lines, in every version's format, and so does every report format
(the lines it stands for said as lines)."""

import json
import re

from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from triage.cli import main
from triage.pipeline import ScanOptions, Text, make_matcher, scan
from triage.report import REPORTERS, render
from triage.rules.ruleset import load_rules

V0_TAIL = (
    "Sequence group {request_id} is preempted by PreemptionMode.{mode} mode because there is not enough KV cache "
    "space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size "
    "to provide more KV cache memory. total_num_cumulative_preemption={count}"
)
V0_PREFIXES = (  # 0.4.3-0.7.3 without brackets, 0.8.0-0.10.2 with them
    "WARNING 12-20 14:{minute:02d}:33 scheduler.py:1555] ",
    "WARNING 03-02 11:{minute:02d}:07 [scheduler.py:1778] ",
)
V1_HEAD = (
    "(APIServer pid=4410) INFO 02-03 17:{minute:02d}:45 [loggers.py:{lineno}] {engine}: Avg prompt throughput: "
    "1530.2 tokens/s, Avg generation throughput: 290.4 tokens/s, Running: {running:,} reqs, Waiting: {waiting:,} reqs, "
)
# What stands between Waiting and the count, by version: nothing (0.11.1+), Deferred (0.20+),
# KV fetch (0.32+); and after it the device's KV usage (its name from 0.30), the prefix cache
# hit rate (optional from 0.31) and the optional parts that follow.
V1_BEFORE = ("", "Deferred: {deferred} reqs, ",
             "KV fetch: {deferred} waiting to start, 1 in progress, 0 completed waiting, ")
V1_AFTER = ("GPU KV cache usage: {usage:.1f}%, Prefix cache hit rate: 12.5%",
            "XPU KV cache usage: {usage:.1f}%", "GPU KV cache usage: {usage:.1f}%, Prefix cache hit rate: 3.0%, "
            "Corrupted: 0 reqs, External prefix cache hit rate: 0.0%")
ENGINES = ("Engine 000", "Engine 001", "2 Engines Aggregated")
NOISE = (
    "(APIServer pid=4410) INFO:     10.0.0.7:40112 - \"POST /v1/chat/completions HTTP/1.1\" 200 OK",
    # a metrics line of an interval without preemptions: vLLM leaves the part out
    "(APIServer pid=4410) INFO 02-03 17:59:45 [loggers.py:208] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
    "Avg generation throughput: 310.0 tokens/s, Running: 20 reqs, Waiting: 0 reqs, GPU KV cache usage: 61.0%, "
    "Prefix cache hit rate: 12.5%",
)
request_ids = st.one_of(
    st.text("0123456789abcdef", min_size=8, max_size=32).map(lambda h: f"chatcmpl-{h}"),
    st.text("0123456789abcdef", min_size=8, max_size=32).map(lambda h: f"cmpl-{h}-0"),
)


@st.composite
def v0_lines(draw):
    counts = [1 + 50 * n for n in draw(st.lists(st.integers(0, 40_000), min_size=1, max_size=30))]  # as vLLM warns
    prefix = draw(st.sampled_from(V0_PREFIXES))
    lines = [prefix.format(minute=i % 60) + V0_TAIL.format(request_id=draw(request_ids), count=count,
                                                           mode=draw(st.sampled_from(["RECOMPUTE", "SWAP"])))
             for i, count in enumerate(counts)]
    return lines, max(counts)


@st.composite
def v1_lines(draw):
    counts = draw(st.lists(st.integers(1, 5_000), min_size=1, max_size=30))
    lines = []
    for i, count in enumerate(counts):
        head = V1_HEAD.format(minute=i % 60, lineno=draw(st.sampled_from([208, 257, 412])),
                              engine=draw(st.sampled_from(ENGINES)), running=draw(st.integers(1, 4096)),
                              waiting=draw(st.integers(0, 4096)))
        before = draw(st.sampled_from(V1_BEFORE)).format(deferred=draw(st.integers(1, 99)))
        after = draw(st.sampled_from(V1_AFTER)).format(usage=draw(st.floats(0, 100)))
        lines.append(f"{head}{before}Preemptions: {count:,}, {after}")
    return lines, sum(counts)


@settings(max_examples=60, deadline=None)
@given(st.one_of(v0_lines(), v1_lines()), st.lists(st.sampled_from(NOISE), max_size=6), st.randoms())
def test_the_finding_counts_preemptions_not_lines(drawn, noise, rng):
    lines, preemptions = drawn
    log = lines + noise
    rng.shuffle(log)
    findings = [f for f in scan([Text("server.log", ("\n".join(log) + "\n").encode())], ScanOptions()).findings
                if f.code == "VT301"]
    assert len(findings) == 1, [(f.line, f.fields) for f in findings]
    [finding] = findings
    assert finding.count == len(lines)
    assert finding.derived["preemptions"] == preemptions
    assert f"{preemptions:,}" in " ".join(finding.cause)


def test_json_carries_the_preemptions_and_the_lines(tmp_path):
    """V0: 1st, 51st, 101st warnings; V1: intervals of 3, 14 and 1,200 preemptions."""
    v0 = [V0_PREFIXES[1].format(minute=m) + V0_TAIL.format(request_id=f"cmpl-{m:x}0ff-0", count=c, mode="RECOMPUTE")
          for m, c in ((1, 1), (2, 51), (3, 101))]
    v1 = [V1_HEAD.format(minute=m, lineno=257, engine="Engine 000", running=64, waiting=5)
          + f"Preemptions: {c:,}, " + V1_AFTER[0].format(usage=99.0) for m, c in ((1, 3), (2, 14), (3, 1200))]
    (tmp_path / "v0.log").write_text("\n".join(v0) + "\n")
    (tmp_path / "v1.log").write_text("\n".join(v1) + "\n")
    run = CliRunner().invoke(main, ["scan", "--format", "json", str(tmp_path / "v0.log"), str(tmp_path / "v1.log")])
    found = {f["source"].rsplit("/", 1)[-1]: f for f in json.loads(run.stdout)["findings"] if f["code"] == "VT301"}
    assert (found["v0.log"]["count"], found["v0.log"]["derived"]["preemptions"]) == (3, 101)
    assert (found["v1.log"]["count"], found["v1.log"]["derived"]["preemptions"]) == (3, 1217)
    assert found["v0.log"]["fields"]["request_id"] == "cmpl-10ff-0"  # the first line's sequence group
    assert "preemptions the metrics lines counted: 1,217, in 3 lines" in " ".join(found["v1.log"]["cause"])
    assert "count reached 101 by its last warning" in " ".join(found["v0.log"]["cause"])


def plain(text: str) -> str:
    """A report as a person reads it: no colour codes, box lines or wrapping (rich)."""
    return " ".join(re.sub(r"\x1b\[[0-9;]*m|[│╭╮╰╯─]", " ", text).split())


def preemptions_said(finding) -> str:
    """The words of VT301's cause that give the total: V0's largest count, or V1's sum."""
    total = finding.derived["preemptions"]
    if "cumulative_preemptions_max" in finding.derived:
        return f"count reached {total:,} by its last warning"
    return f"preemptions the metrics lines counted: {total:,}, in {finding.count:,} line"


def lines_said(count: int) -> str:
    return f"{count:,} lines" if count > 1 else ""


def said_in_json(report: str, finding) -> None:
    objects = [json.loads(line) for line in report.splitlines()] if report.lstrip().startswith('{"type"') \
        else json.loads(report)["findings"]
    [said] = [o for o in objects if o.get("code") == "VT301"]
    assert (said["count"], said["derived"]["preemptions"]) == (finding.count, finding.derived["preemptions"])


def said_in_sarif(report: str, finding) -> None:
    [said] = [r for r in json.loads(report)["runs"][0]["results"] if r["ruleId"] == "VT301"]
    assert (said["properties"]["count"], said["properties"]["derived"]["preemptions"]) == (
        finding.count, finding.derived["preemptions"])
    assert preemptions_said(finding) in plain(said["message"]["text"])


def said_in_words(where: str):
    """A format that says the cause in words and the lines where it says where the finding is."""
    def check(report: str, finding) -> None:
        text = plain(report)
        assert preemptions_said(finding) in text
        assert where.format(lines=lines_said(finding.count)) in text or finding.count == 1
        assert f"(x{finding.count}" not in text  # the count as it was said before
    return check


def said_in_concise(report: str, finding) -> None:
    [line] = [line for line in report.splitlines() if ": VT301 " in line]
    total = finding.derived["preemptions"]
    numbers = line.rsplit(" (", 1)[1]
    assert numbers == f"preemptions={total}" + (f", {finding.count} lines)" if finding.count > 1 else ")")


# How each format says the total and the lines: every format of REPORTERS has its entry.
SAID = {
    "text": said_in_words("({lines}, last at line"), "rich": said_in_words("({lines}, last at line"),
    "markdown": said_in_words("({lines}, last at line"), "html": said_in_words("({lines}, last at line"),
    "junit": said_in_words("({lines}, last at line"), "github": said_in_words("space ({lines})"),
    "json": said_in_json, "jsonl": said_in_json, "sarif": said_in_sarif, "concise": said_in_concise,
}


def test_every_format_has_a_way_to_say_the_total():
    assert set(SAID) == set(REPORTERS)


@settings(max_examples=30, deadline=None)
@given(st.one_of(v0_lines(), v1_lines()), st.lists(st.sampled_from(NOISE), max_size=6), st.randoms())
def test_every_format_says_the_total_and_the_lines(matcher, drawn, noise, rng):
    """Not the first line's count, nor the lines as a count ('x3' beside "preempted")."""
    lines, preemptions = drawn
    log = lines + noise
    rng.shuffle(log)
    result = scan([Text("server.log", ("\n".join(log) + "\n").encode())], ScanOptions(matcher=matcher))
    [finding] = [f for f in result.findings if f.code == "VT301"]
    assert (finding.count, finding.derived["preemptions"]) == (len(lines), preemptions)
    for name, said in SAID.items():
        said(render(result, name), finding)


RULES = load_rules()
MATCHER = make_matcher(ScanOptions(RULES))
CUT_COUNT = 251  # no digits it starts with are a count vLLM prints: a cut inside it reads as one


def vt301(lines: list[str]):
    findings = [f for f in scan([Text("paste.txt", ("\n".join(lines) + "\n").encode())],
                                ScanOptions(RULES, matcher=MATCHER)).findings
                if f.code == "VT301"]
    assert len(findings) <= 1
    return findings[0] if findings else None


def test_a_v0_warning_cut_anywhere_counts_its_line_and_states_no_count():
    """A paste cut the last warning anywhere in its message: inside its count ("=2" of 251) or
    before it. The warning still counts as a line when its head was read, its count is not read
    (nor a piece of it), the largest whole count stands, and the words say how many warnings
    there were and that the cut ones show no count."""
    for prefix, counts in ((V0_PREFIXES[0], []), (V0_PREFIXES[1], [1, 51, 101])):
        whole = [prefix.format(minute=n) + V0_TAIL.format(request_id=f"cmpl-{n}ab-0", count=count, mode="SWAP")
                 for n, count in enumerate(counts)]
        line = prefix.format(minute=59) + V0_TAIL.format(request_id="chatcmpl-77ef", count=CUT_COUNT, mode="RECOMPUTE")
        for cut in range(len(prefix.format(minute=59)) + 1, len(line) + 1):
            seen = vt301([line[:cut]]) is not None  # the rule still tells the cut warning by its head
            finding = vt301([*whole, line[:cut]])
            assert (finding.count if finding else 0) == len(counts) + seen, line[:cut]
            if not finding:
                continue
            words = " ".join(finding.cause)
            if cut == len(line):
                assert finding.derived["preemptions"] == CUT_COUNT
            elif counts:
                assert finding.derived["preemptions"] == max(counts), line[:cut]
                if seen:
                    assert f"{len(counts)} of the {len(counts) + 1} preemption warnings here show their count" in words
            else:
                assert "preemptions" not in finding.derived and "cumulative_preemptions" not in finding.fields
                assert "preemption warnings here: 1, the paste cut each before vLLM's cumulative count" in words
