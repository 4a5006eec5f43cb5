"""Built-in patterns search with stdlib re, bounded in time by a watchdog signal: they must
match exactly as with the regex module, and a search that backtracks must still stop."""

import itertools
import functools
import gzip
import re
import signal
import threading
from pathlib import Path

import pytest
import regex

from triage.match import matcher as matcher_module
from triage.match.matcher import Matcher
from triage.input.lineparse import parse_line
from triage.rules.ruleset import load_rules
from triage.match.watchdog import Watchdog
from conftest import scan_events

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
BACKTRACKING = re.compile(r"(?:a|aa)+$")  # exponential on a run of 'a' that does not end the text
HOSTILE = "a" * 60 + "!"


def fixture_lines() -> list[str]:
    lines = []
    for path in sorted(FIXTURES.rglob("*.log*")):
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        lines += raw.decode("utf-8", "replace").splitlines()
    return lines


def outcome(match):
    return None if match is None else (match.span(), match.groupdict())


def test_every_builtin_pattern_matches_alike_with_re_and_regex():
    texts = [example.text for rule in load_rules().rules for example in rule.examples]
    lines = fixture_lines()
    decoded = [parse_line(line.encode()).text for line in lines]  # what the matcher searches
    texts += lines + decoded + [a + " " + b for a, b in itertools.pairwise(decoded)]  # and wrapped messages joined
    checked = 0
    for rule in load_rules().rules:
        for pattern in rule.patterns:
            source = pattern.compiled.pattern
            with_regex, with_re = regex.compile(source), re.compile(source)
            for text in texts:
                assert outcome(with_re.search(text)) == outcome(with_regex.search(text)), (rule.code, pattern.id, text)
            checked += 1
    assert checked > 90 and len(texts) > 1000


def test_the_watchdog_stops_a_backtracking_search_and_gives_the_alarm_back():
    watchdog = Watchdog(0.2)
    assert watchdog.arm()
    try:
        with pytest.raises(TimeoutError):
            watchdog.bound(BACKTRACKING.search)(HOSTILE)
        assert watchdog.bound(BACKTRACKING.search)("aaa") is not None  # the next search runs as usual
    finally:
        watchdog.disarm()
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_short_searches_are_never_stopped_however_many_ticks_land_on_them():
    watchdog = Watchdog(0.02)  # a tick every 10 ms
    search = watchdog.bound(re.compile(r"KV cache usage: (\d+\.\d)%").search)
    line = "Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 42.5%, Prefix cache hit rate: 0.0%" * 20
    assert watchdog.arm()
    try:
        for _ in range(60_000):  # about half a second: dozens of ticks, each during or between searches
            assert search(line)[1] == "42.5"
    finally:
        watchdog.disarm()


def test_nested_scans_keep_the_alarm_until_the_last_ends():
    watchdog = Watchdog(0.2)
    assert watchdog.arm() and watchdog.arm()
    watchdog.disarm()
    assert signal.getsignal(signal.SIGALRM) is not signal.SIG_DFL
    watchdog.disarm()
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL


def test_the_watchdog_stays_out_where_the_alarm_is_not_its_own():
    watchdog = Watchdog(0.2)
    answers = []
    thread = threading.Thread(target=lambda: answers.append(watchdog.arm()))
    thread.start()
    thread.join()
    assert answers == [False]  # signals reach only the main thread

    def theirs(signum, frame):
        pass

    previous = signal.signal(signal.SIGALRM, theirs)
    try:
        assert not watchdog.arm()
        assert signal.getsignal(signal.SIGALRM) is theirs
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_a_builtin_pattern_that_backtracks_is_cut_short_named_and_turned_off(monkeypatch, ruleset):
    monkeypatch.setattr(matcher_module, "WATCHDOG", Watchdog(0.05))
    matcher = Matcher(ruleset)
    kv_usage = next(t for ts in matcher.targets.values() for t in ts if t.rule.code == "VT911")
    assert kv_usage.builtin
    # as if the built-in pattern backtracked: the line below makes this one do so
    monkeypatch.setattr(kv_usage.pattern, "compiled", regex.compile(r"KV cache usage: (?:a|aa)+$"))
    line = "INFO 01-09 13:51:12 [loggers.py:257] Engine 000: Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: "
    events = scan_events(matcher, "server.log", "\n".join(line + HOSTILE for _ in range(4)) + "\n")
    assert [e.rule.code for e in events] == []
    assert matcher.warnings[0].startswith("server.log:1: rule VT911 pattern kv-cache-usage took longer than")
    assert "off for the rest of the scan" in matcher.warnings[2]
    assert len(matcher.warnings) == 3
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL  # the scan gave the alarm back


def test_a_scan_off_the_main_thread_searches_with_regex_and_finds_the_same(ruleset):
    """Signals reach only the main thread: a scan in another thread keeps regex and its timeout."""
    text = "".join(line + "\n" for line in fixture_lines())

    def events(matcher):
        return [(e.rule.code, e.record.line, e.pattern_id, e.fields) for e in scan_events(matcher, "all.log", text)]

    on_main = events(Matcher(ruleset))
    found, matcher = [], Matcher(ruleset)
    thread = threading.Thread(target=lambda: found.append(events(matcher)))
    thread.start()
    thread.join()
    assert found == [on_main] and len(on_main) > 50
    assert all(isinstance(t.search, functools.partial) for ts in matcher.targets.values() for t in ts if t.search)
