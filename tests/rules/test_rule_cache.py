"""The cache of loaded rules and derived anchors: it may only ever make start-up faster.

Every test points VLLM_TRIAGE_CACHE at its own tmp_path (conftest points the whole
session at a temporary folder, so no test writes to the user's ~/.cache).
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from triage.rules import cache as rulecache
from triage.match.matcher import Matcher
from triage.rules.ruleset import RuleError, builtin_rule_files, load_rules

from conftest import scan_events

RULE_FILE = """\
stage: runtime
rules:
  - code: VT990
    name: user-stall
    title: {title}
    severity: warning
    keywords: [STALL detected]
    patterns:
      - regex: 'STALL detected after {{n:int}} steps on worker (?P<worker>\\w+)'
    derived:
      doubled: n * 2
    cause: the scheduler stalled {{n}} times
    fixes:
      - text: restart worker {{worker}}
        when: n > 3
    examples:
      match:
        - text: STALL detected after 12 steps on worker w7
          fields: {{n: 12, worker: w7}}
"""
LOG_LINE = "WARNING 05-01 11:29:40 [core.py:12] STALL detected after 12 steps on worker w7\n"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv(rulecache.CACHE_VARIABLE, str(folder))
    return folder


def user_rules(tmp_path, title="A user rule"):
    path = tmp_path / "user.yaml"
    path.write_text(RULE_FILE.format(title=title))
    return path


def entries(folder, prefix=""):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(prefix)) if folder.exists() else []


def summary(ruleset):
    """What a scan and its report take from the rules, as plain values."""
    return [
        (
            rule.code, rule.name, rule.title, rule.stage, rule.severity, rule.kind, rule.file, rule.line,
            rule.keywords, rule.field_types, rule.group_by, rule.versions, rule.references, rule.counter_examples,
            [(p.id, p.compiled.pattern, p.fields, p.types, p.versions, p.hosted) for p in rule.patterns],
            {name: e.source for name, e in rule.derived.items()},
            rule.require.source if rule.require else None,
            [(s.text, s.when.source if s.when else None, s.server) for s in rule.cause + rule.fixes],
            [(e.text, e.fields, e.derived) for e in rule.examples],
        )
        for rule in ruleset.rules
    ] + [ruleset.skip_markers, ruleset.hosted_markers]


def events(ruleset, engine="re"):
    matcher = Matcher(ruleset, engine=engine)
    found = scan_events(matcher, "log", LOG_LINE + "ERROR 05-01 11:29:41 [x.py:1] ValueError: unrelated\n")
    return [(e.rule.code, e.fields, e.record.line) for e in found], matcher.anchors, matcher._closure


def test_the_second_load_comes_from_the_cache_and_gives_the_same_rules(tmp_path, cache):
    path = user_rules(tmp_path)
    first = load_rules([path])
    assert len(entries(cache, "rules-")) == len(builtin_rule_files()) + 1  # the built-in files and the user's
    second = load_rules([path])
    assert summary(second) == summary(first)
    assert type(second.by_code("VT990").patterns[0].compiled).__name__ == "LazyRegex"  # not compiled again
    assert events(second) == events(first)
    assert events(second)[0][0] == ("VT990", {"n": 12, "worker": "w7"}, 1)
    assert events(second)[0][1][0] == "VT932"  # the unrelated error line is an exception line, no finding


def test_an_edited_rule_file_is_read_again(tmp_path, cache):
    path = user_rules(tmp_path, title="Before the edit")
    assert load_rules([path]).by_code("VT990").title == "Before the edit"
    path.write_text(RULE_FILE.format(title="After the edit"))
    assert load_rules([path]).by_code("VT990").title == "After the edit"
    assert len(entries(cache, "rules-")) == len(builtin_rule_files()) + 2  # one more: the old entry is never served for the new bytes


@pytest.mark.parametrize("module", ["regex", "yaml"])
def test_another_regex_or_pyyaml_does_not_meet_the_entries_the_old_one_made(tmp_path, cache, monkeypatch, module):
    path = user_rules(tmp_path)
    load_rules([path])
    before = entries(cache, "rules-")
    files = rulecache._module_files

    def upgraded(name):
        return files(name) + (" _main.py:40000:1" if name == module else "")  # a file of another size and time

    monkeypatch.setattr(rulecache, "_module_files", upgraded)
    monkeypatch.setattr(rulecache, "_salts", {})
    monkeypatch.setattr(rulecache, "_base_salt", None)
    load_rules([path])
    assert len(entries(cache, "rules-")) == 2 * len(before)  # every file read and stored again


def test_a_file_with_an_error_is_never_cached_and_fails_every_time(tmp_path, cache):
    path = tmp_path / "bad.yaml"
    path.write_text(RULE_FILE.format(title="x").replace("n * 2", "n ** 2"))
    for _ in range(2):
        with pytest.raises(RuleError, match=r"bad\.yaml:\d+: VT990: derived doubled"):
            load_rules([path])
    assert len(entries(cache, "rules-")) == len(builtin_rule_files())  # the built-in files only


def test_a_rule_file_error_through_the_cli_is_one_line_and_exit_2_every_time(tmp_path, cache):
    good, bad = user_rules(tmp_path), tmp_path / "bad.yaml"
    bad.write_text(RULE_FILE.format(title="x").replace("name: user-stall", "name: Not_Kebab"))
    for _ in range(2):
        run = subprocess.run(
            [sys.executable, "-m", "triage", "scan", "--rules", str(good), "--rules", str(bad), "-"],
            input=LOG_LINE, capture_output=True, text=True,
        )
        assert run.returncode == 2
        assert run.stderr.count("\n") == 1 and f"{bad}:" in run.stderr and "kebab-case" in run.stderr


def test_a_damaged_entry_is_ignored_and_written_again(tmp_path, cache):
    path = user_rules(tmp_path)
    expected = summary(load_rules([path]))
    for name in entries(cache):
        stored = (cache / name).read_bytes()
        (cache / name).write_bytes(stored[: len(stored) // 2])  # cut short
    assert summary(load_rules([path])) == expected
    for name in entries(cache):  # rebuilt whole
        assert rulecache.read(name) is not None


@pytest.mark.parametrize("payload", [b"not json", b'{"document": 1}', b'{"document": {"rules": []}, "fields": {}, "anchors": {}}'])
def test_an_entry_that_checks_out_but_does_not_fit_is_ignored(tmp_path, cache, payload):
    path = user_rules(tmp_path)
    expected = summary(load_rules([path]))
    for name in entries(cache, "rules-"):
        rulecache.write(name, payload)  # a valid checksum over the wrong content
    assert summary(load_rules([path])) == expected


def test_an_unreadable_entry_is_ignored(tmp_path, cache):
    path = user_rules(tmp_path)
    expected = summary(load_rules([path]))
    for name in entries(cache, "rules-"):
        (cache / name).unlink()
        (cache / name).mkdir()  # reading it fails, even as root; so does replacing it
    assert summary(load_rules([path])) == expected


def test_the_engines_cached_data_gives_the_same_matches(tmp_path, cache):
    path = user_rules(tmp_path)
    cold = events(load_rules([path]), engine="re")
    assert entries(cache, "trie-") and entries(cache, "entry-") and entries(cache, "closure-")
    assert events(load_rules([path]), engine="re") == cold
    for name in entries(cache, "trie-") + entries(cache, "entry-") + entries(cache, "closure-"):
        (cache / name).write_bytes(b"damaged")
    assert events(load_rules([path]), engine="re") == cold


def test_a_cached_hyperscan_database_gives_the_same_matches(tmp_path, cache):
    pytest.importorskip("hyperscan")
    path = user_rules(tmp_path)
    cold = events(load_rules([path]), engine="hyperscan")
    assert entries(cache, "hyperscan-")
    assert events(load_rules([path]), engine="hyperscan") == cold
    for name in entries(cache, "hyperscan-"):
        stored = (cache / name).read_bytes()
        rulecache.write(name, stored.partition(b"\n")[2][:-100])  # checks out, but hyperscan refuses it
    assert events(load_rules([path]), engine="hyperscan") == cold


@pytest.mark.parametrize("setting", ["off", "OFF", "0"])
def test_the_off_switch_writes_nothing(tmp_path, monkeypatch, setting):
    monkeypatch.setenv(rulecache.CACHE_VARIABLE, setting)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = user_rules(tmp_path)
    events(load_rules([path]))
    assert load_rules([path]).by_code("VT990") is not None
    assert not (tmp_path / "xdg").exists() and not (tmp_path / "home").exists()


def test_without_the_variable_the_cache_is_in_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.delenv(rulecache.CACHE_VARIABLE, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    load_rules()
    assert len(entries(tmp_path / "xdg" / "vllm-triage", "rules-")) == len(builtin_rule_files())


def test_a_folder_that_cannot_be_made_is_skipped_silently(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(rulecache.CACHE_VARIABLE, str(blocker / "cache"))
    path = user_rules(tmp_path)
    assert summary(load_rules([path])) == summary(load_rules([path]))


def test_a_folder_others_may_write_is_not_used(tmp_path, monkeypatch):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    monkeypatch.setenv(rulecache.CACHE_VARIABLE, str(folder))
    load_rules([user_rules(tmp_path)])
    assert entries(folder) == []


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes to a read-only folder")
def test_a_read_only_folder_is_left_alone(tmp_path, monkeypatch):
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    monkeypatch.setenv(rulecache.CACHE_VARIABLE, str(folder))
    try:
        path = user_rules(tmp_path)
        assert summary(load_rules([path])) == summary(load_rules([path]))
        assert entries(folder) == []
    finally:
        folder.chmod(0o700)


def test_a_document_json_would_change_is_not_cached(tmp_path, cache):
    path = tmp_path / "dated.yaml"
    path.write_text(RULE_FILE.format(title="x") + textwrap.dedent("""\
        description: 2024-05-01
    """))
    first = load_rules([path])
    assert summary(load_rules([path])) == summary(first)
    assert len(entries(cache, "rules-")) == len(builtin_rule_files())  # a date would come back as a text: not stored


WEAK_RULE = """\
stage: runtime
rules:
  - code: VT991
    name: user-weak
    title: Only a short literal
    keywords: [Tiny]
    patterns:
      - regex: '(?:Tiny|Small) widget (?:overflow|spill) (?P<n>\\d+)'
    examples:
      match:
        - Tiny widget overflow 3
"""


def matcher_view(matcher):
    targets = {anchor: [(t.rule.code, t.pattern.id) for t in found] for anchor, found in matcher.targets.items()}
    return matcher.anchors, targets, matcher._closure, matcher.warnings


@pytest.mark.parametrize("engine", ["re", "hyperscan"])
def test_a_warm_start_derives_what_a_start_without_cache_derives(tmp_path, monkeypatch, engine):
    if engine == "hyperscan":
        pytest.importorskip("hyperscan")
    weak = tmp_path / "weak.yaml"
    weak.write_text(WEAK_RULE)
    paths = [user_rules(tmp_path), weak]
    monkeypatch.setenv(rulecache.CACHE_VARIABLE, "off")
    monkeypatch.setattr("triage.match.anchors._derived", {})
    uncached = matcher_view(Matcher(load_rules(paths), engine=engine))
    assert any("VT991" in warning for warning in uncached[3])  # its keywords stand in, with a warning
    monkeypatch.setenv(rulecache.CACHE_VARIABLE, str(tmp_path / "cache"))
    for _ in range(2):  # writing the cache, then reading it in a fresh process (no derivation remembered)
        monkeypatch.setattr("triage.match.anchors._derived", {})
        monkeypatch.setattr("triage.match.anchors.derive", lambda source, again=_: pytest.fail(f"derived again: {source}") if again else _derive(source))
        assert matcher_view(Matcher(load_rules(paths), engine=engine)) == uncached


from triage.match.anchors import derive as _derive  # noqa: E402 - the real one, for the test above


def test_a_scan_with_the_built_in_rules_starts_without_pyyaml_or_regex(tmp_path, cache):
    """Start-up is most of a small scan: from a warm cache, the built-in rules (searched with
    stdlib re) need neither PyYAML nor the regex module (17 and 13 ms of imports here)."""
    log = tmp_path / "server.log"
    log.write_text(
        "INFO 01-09 13:51:12 [loggers.py:257] Engine 000: Avg prompt throughput: 2080.9 tokens/s, Avg generation "
        "throughput: 402.3 tokens/s, Running: 16 reqs, Waiting: 6 reqs, GPU KV cache usage: 97.8%, Prefix cache hit rate: 3.0%\n"
    )
    probe = (
        "import sys; from triage.cli import main\n"
        "try: main(['scan', '--format', 'json', '--fail-on', 'never', sys.argv[1]])\n"
        "except SystemExit: pass\n"
        "print(sorted(m for m in ('yaml', 'regex') if m in sys.modules), file=sys.stderr)\n"
    )
    runs = [subprocess.run([sys.executable, "-c", probe, str(log)], capture_output=True, text=True) for _ in range(2)]
    assert '"code": "VT303"' in runs[1].stdout  # found, with its numbers, by a built-in pattern
    assert '"waiting": 6' in runs[1].stdout
    assert runs[1].stderr.strip().splitlines()[-1] == "[]"  # the second start: every rule file from the cache


PASTED = b"""Traceback (most recent call last):
ValueError: To serve at least one request with the models's max seq len (32768), (4.00 GiB KV cache is
needed, which is larger than the available KV cache memory (2.50 GiB).
"""


def test_a_warm_paste_sweep_reads_the_loose_forms_from_the_cache_and_finds_the_same(cache, monkeypatch):
    """A small paste is swept in every finding pattern's loose form; parsing every pattern
    again at each start was most of such a scan, so the forms come from the rule cache."""
    from triage.match import loose

    def events():
        return [(e.rule.code, e.record.line, e.fields) for e in scan_events(Matcher(load_rules()), "paste", PASTED.decode())]

    first = events()
    assert ("VT201", 2) in {(code, line) for code, line, _ in first}
    monkeypatch.setattr(loose, "derive_loose", lambda source: pytest.fail(f"derived again: {source[:40]}"))
    assert events() == first


def fresh_process_state(monkeypatch):
    """What a new process has: no compiled pattern remembered (only the cache on disk)."""
    monkeypatch.setattr(rulecache, "_compiled_here", {})


def test_every_compiled_pattern_from_the_cache_is_the_one_its_module_compiles(cache, monkeypatch):
    """A rule's pattern in both engines' compiled forms and every loose form, written to the
    cache and read back in a fresh process: the very code regex and re compile, and the same
    matches (partial ones included) on the rule's examples."""
    import re

    import regex

    from triage.match import loose

    wanted = []  # (source, flags, the rule's example texts)
    for rule in load_rules().rules:
        texts = [e.text for e in rule.examples]
        for pattern in rule.patterns:
            form = loose.derive_loose(pattern.compiled.pattern)
            wanted += [(pattern.compiled.pattern, 0, texts)] + ([(form.regex, regex.IGNORECASE | regex.V0, texts)] if form else [])
    for read in (False, True):  # writing the entries, then reading them
        fresh_process_state(monkeypatch)
        for source, flags, texts in wanted:
            cached, compiled = rulecache.compiled_regex(source, flags), regex.compile(source, flags)
            assert (cached is not compiled) == read and cached._pickled_data == compiled._pickled_data
            for text in texts:
                for mine, theirs in [(cached.search(text), compiled.search(text)),
                                     (cached.search(text[:-9], partial=True), compiled.search(text[:-9], partial=True))]:
                    assert (mine and (mine.span(), mine.groupdict(), mine.partial)) == (theirs and (theirs.span(), theirs.groupdict(), theirs.partial))
            if not flags:
                cached_re = rulecache.compiled_re(source)
                assert cached_re == re.compile(source)  # equal: the same pattern, flags and compiled code
                assert [(m := cached_re.search(t)) and m.groupdict() for t in texts] == [(m := compiled.search(t)) and m.groupdict() for t in texts]
    assert len(entries(cache / rulecache.PER_PATTERN, "regex-")) == len({(s, f) for s, f, _ in wanted})
    assert len(entries(cache / rulecache.PER_PATTERN, "re-")) == len({s for s, f, _ in wanted if not f})


def test_a_compiled_entry_that_does_not_fit_is_compiled_again(cache, monkeypatch):
    import re

    import regex

    source = load_rules().by_code("VT201").patterns[0].compiled.pattern
    fresh_process_state(monkeypatch)
    rulecache.compiled_regex(source), rulecache.compiled_re(source)
    stored = entries(cache / rulecache.PER_PATTERN)
    assert len(stored) == 2
    for payload in [b"[]", b'["another pattern", 0, "", {}, {}, 0, null, 0, 0]', b'["x", 0, [], 0, {}]', b"{}"]:
        for name in stored:
            rulecache.write(f"{rulecache.PER_PATTERN}/{name}", payload)
        fresh_process_state(monkeypatch)
        assert rulecache.compiled_regex(source)._pickled_data == regex.compile(source)._pickled_data
        assert rulecache.compiled_re(source) == re.compile(source)


SCANNED = ["fixtures/robust/cut-short.log", "fixtures/robust/rewrapped.log", "fixtures/request-max-tokens-too-large-v0110-kubectl.log",
           "fixtures/runs/failed-v1-multiproc-v0110-load-oom.log", "fixtures/request-you-passed-v017-terminal-wrapped.log"]
# Counts what a scan compiles and derives of the rules' patterns, after its imports.
COUNTING = """
import json, sys
from re import _compiler
import regex._main
from triage.match import loose
from triage.cli import main
import triage.cli.scan
done = []
def counting(module, name, kind):
    real = getattr(module, name)
    def wrapper(pattern, *args, **kwargs):
        if isinstance(pattern, str):  # (bytes: the anchor pass's own)
            done.append([kind, pattern])
        return real(pattern, *args, **kwargs)
    setattr(module, name, wrapper)
counting(_compiler, "compile", "re")
counting(regex._main, "_compile", "regex")
counting(loose, "derive_loose", "loose")
try: main(["scan", "--format", "json", "--fail-on", "never", *sys.argv[1:]])
except SystemExit: pass
print(json.dumps(done), file=sys.stderr)
"""


def test_a_warm_scan_compiles_no_pattern_and_derives_no_loose_form(cache):
    """Compiling the patterns a scan meets (exact and partial, in the regex module, and in
    stdlib re) and deriving their loose forms was most of a small scan's start-up after the
    paste tolerance: from a warm cache a scan does none of it, and finds the same."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = [os.path.join(root, name) for name in SCANNED]
    ruleset = load_rules()
    sources = {p.compiled.pattern for rule in ruleset.rules for p in rule.patterns}

    def run():
        done = subprocess.run([sys.executable, "-c", COUNTING, *paths], capture_output=True, text=True, check=True)
        return done.stdout, [(kind, pattern) for kind, pattern in json.loads(done.stderr.splitlines()[-1])
                             if kind == "loose" or pattern in sources or kind == "regex" and "(?P<_h>)" in pattern]

    cold_report, cold = run()
    assert {kind for kind, _ in cold} == {"re", "regex", "loose"}  # the scan needs all three
    warm_report, warm = run()
    assert warm == []
    assert warm_report == cold_report and '"code": "VT201"' in warm_report


def test_writing_keeps_the_newest_entries_and_lists_the_folder_once_a_process(cache, monkeypatch):
    monkeypatch.setattr(rulecache, "MAX_ENTRIES", 3)
    monkeypatch.setattr(rulecache, "_pruned", {str(cache)})  # written by earlier processes, unpruned
    for age in range(5):
        rulecache.write(f"old-{age}.json", b"{}")
        os.utime(cache / f"old-{age}.json", (1_000_000 + age, 1_000_000 + age))
    monkeypatch.setattr(rulecache, "_pruned", set())  # a new process
    rulecache.write("new-1.json", b"{}")
    assert entries(cache) == ["new-1.json", "old-3.json", "old-4.json"]
    rulecache.write("new-2.json", b"{}")  # at most a process's own entries beyond the limit
    assert entries(cache) == ["new-1.json", "new-2.json", "old-3.json", "old-4.json"]


def test_an_entry_is_keyed_by_the_code_that_derives_it_alone(monkeypatch):
    """Editing the code that derives a kind of entry (loose.py: the loose forms) gives that
    kind new keys; editing other code (the matcher's per-line work, matcher.py) keeps every
    key, so the user's cache stays warm across such an edit."""
    sources = rulecache._source

    def keys() -> dict[str, str]:
        monkeypatch.setattr(rulecache, "_salts", {})
        monkeypatch.setattr(rulecache, "_base_salt", None)
        return {kind: rulecache.entry_key(kind, b"same input") for kind in rulecache.DERIVED_BY}

    def edited(name):
        monkeypatch.setattr(rulecache, "_source", lambda path: sources(path) + (b"# edited" if path.name == name else b""))
        return keys()

    before = keys()
    assert edited("matcher.py") == before
    after = edited("loose.py")
    assert {kind for kind in before if after[kind] != before[kind]} == {"loose", "loose-one"}
    assert set(edited("cache.py").values()).isdisjoint(before.values())  # its code goes into every kind


def test_a_warm_load_gives_every_patterns_openings_without_parsing_it(cache, monkeypatch):
    """The openings the cut readings ask first (anchors.may_match_cut) come with the rules from
    the cache: a paste asked a dozen, and stdlib's parser took 0.2 ms for each at every start."""
    from triage.match import anchors

    sources = [pattern.compiled.pattern for rule in load_rules().rules for pattern in rule.patterns]  # stored
    derived = {source: anchors._opening_form(source) for source in sources}
    monkeypatch.setattr(anchors, "_openings_known", {})

    def refused(source):
        raise AssertionError(f"parsed again: {source!r}")

    monkeypatch.setattr(anchors, "_derive_opening_form", refused)
    load_rules()
    assert {source: anchors._opening_form(source) for source in sources} == derived
