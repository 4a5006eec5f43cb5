"""Load and validate rule files (YAML) into Rule values.

A bad file is refused with ``file:line: what is wrong`` (RuleError); nothing in a
rule file can run code: YAML is read with the safe loader and arithmetic goes
through triage.rules.expr.
"""

from __future__ import annotations

import math
import re  # the loader's own patterns: compiled at every start, and re compiles them faster
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triage.rules import cache as rulecache
from triage.match.anchors import (
    anchors_for, derived_anchors, derived_openings, keyword_source, needs_keywords, remember_anchors, remember_openings,
)
from triage.rules.expr import Expression, ExprError, check_template, template_names
from triage.diagnose.lifecycle import FAILURE_NAMES
from triage.model import SEVERITIES, STAGES

FIELD_TYPES = {
    # type: (regex for the {name:type} shorthand, converter)
    "int": (r"-?\d{1,3}(?:,\d{3})+(?!\d)|-?\d+(?:\.0+(?!\d))?(?!\.\d|\d)", "int"),
    "float": (r"-?\d+(?:\.\d+)?(?!\.?\d)", "float"),  # never a number cut short: "0.8609." is not "0" and "."
    "gib": (r"-?\d+(?:\.\d+)?(?!\.?\d)", "float"),
    "word": (r"[\w.:/-]+", "str"),
    "text": (r".+?", "str"),
}
# flag: True when its group matched (a phrase is there), else False; bool: a True/False the
# line states, absent when it states none (a setting never printed is not off)
DECLARED_TYPES = {"int", "float", "gib", "str", "flag", "bool"}
MACRO = re.compile(r"\{(?P<name>[A-Za-z_]\w*):(?P<type>" + "|".join(FIELD_TYPES) + r")\}")

# Facts the diagnosis sets from its own tables (facts.py): where total_gib came from when
# the log names the GPU but not its memory.
TABLE_FACTS = {"total_gib_from"}
# Names the diagnosis provides to every template besides the rule's own fields.
# "rejected": when a run's rejections of one rule become one finding, its words are rendered
# again knowing how many requests it stands for (missing while only one was seen).
PROVIDED_NAMES = {"count", "block_size", "source", "hosted_note", "rejected"}
# Names the diagnosis provides to `kind: check` rules: the run's request rejections in figures.
CHECK_NAMES = {
    "rejected", "requested_p50", "requested_p90", "requested_p99", "requested_max",
    "prompt_over_window", "fit_with_smaller_max_tokens", "recommended_max_model_len",
    "recommended_kv_gib", "recommended_concurrency", "current_concurrency",
    *FAILURE_NAMES,  # and the run's first failure (lifecycle.failure_names)
}

# Built-in rules the Python code names (by rule name or code), with the kind each must have
# and who relies on it: a rule file that lost or renamed one is refused at load, with the
# reason, instead of a scan that silently finds less.
SERVER_VERSION, NON_DEFAULT_ARGS, ENGINE_CONFIG = "server-version", "non-default-args", "engine-config"
AUTO_FIT = "max-model-len-auto-reduced"
GATE_CODES = ("VT801", "VT802", "VT803", "VT804")
RELIED_ON: dict[str, tuple[str, str]] = {
    SERVER_VERSION: ("fact", "triage/diagnose/facts.py starts a startup run at it"),
    NON_DEFAULT_ARGS: ("fact", "triage/diagnose/facts.py starts a startup run at it"),
    ENGINE_CONFIG: ("fact", "triage/diagnose/facts.py starts a startup run at it"),
    AUTO_FIT: ("finding", "the gate reads the window left after auto-fit from it"),
    **{code: ("gate", "triage/diagnose/gate.py works out its numbers") for code in GATE_CODES},
}

RULE_KEYS = {
    "code", "name", "title", "stage", "severity", "kind", "description", "keywords",
    "patterns", "fields", "derived", "cause", "fixes", "references", "examples",
    "versions", "deprecated_by", "require", "attach_to", "group_by", "role", "totals",
    "across_ranks",
}
FILE_KEYS = {"stage", "rules", "skip_markers", "hosted_markers", "description"}
PATTERN_KEYS = {"id", "regex", "versions", "hosted", "catalog"}
STEP_KEYS = {"text", "when", "server"}
CODE = re.compile(r"VT\d{3}")
NAME = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
# What a `kind: fact` rule with a role says about a run's life (triage.diagnose.lifecycle):
# ready: the API server serves; failure: a process's failure output starts here; traceback:
# a traceback's header, frame or multiprocessing's "Process X:" line; exception: the line a
# traceback ends with; consequence: vLLM's summary of a failure elsewhere (a wrapper error, a
# died process, a dead engine); shutdown: teardown lines that never fail a run by themselves.
ROLES = ("ready", "failure", "traceback", "exception", "consequence", "shutdown")
# `totals`: a number over every line a finding stands for (its repeats merged), worked out by
# the diagnosis (triage.diagnose.diagnoser): the sum, largest or smallest of a field, or the
# number of lines that printed it (count: VT301's warnings a paste cut before their count).
TOTAL = re.compile(r"(?P<how>sum|max|min|count)\(\s*(?P<field>[A-Za-z_]\w*)\s*\)")
# `across_ranks` (kind fact): a figure each rank of one startup prints for itself (tensor-
# parallel workers); the run's value is the smallest or largest over the ranks, each rank
# counted with the last value it printed. vLLM sizes the KV cache by the smallest rank.
ACROSS_RANKS = ("min", "max")
MATCH_TIMEOUT = 0.5  # seconds per regex search; a backtracking rule cannot hang a scan


class RuleError(Exception):
    """A rule file is malformed; str() is 'file:line: what is wrong'."""


@dataclass(slots=True)
class Pattern:
    """One regex of a rule, with the fields it reads."""

    id: str
    compiled: Any  # regex.Pattern
    fields: list[str]
    types: dict[str, str]  # from the {name:type} shorthand
    versions: str | None = None
    hosted: bool = False  # a wording only hosted APIs use, never a vLLM server


@dataclass(slots=True)
class Step:
    """One sentence of a cause or one fix, rendered only when its names have values."""

    text: str
    when: Expression | None = None
    server: bool = False  # advice about server flags: dropped for hosted-API errors


@dataclass(slots=True)
class Example:
    """A rule's example text and the fields (and derived values) it must give."""

    text: str
    fields: dict[str, Any] = field(default_factory=dict)
    derived: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Rule:
    """One rule of a rule file, as loaded and checked."""

    code: str
    name: str
    title: str
    stage: str
    severity: str
    kind: str  # "finding"; "fact": a line that only tells the diagnosis something; "check"; "gate"
    description: str
    keywords: list[str]
    patterns: list[Pattern]
    field_types: dict[str, str]
    derived: dict[str, Expression]
    cause: list[Step]
    fixes: list[Step]
    references: list[str]
    examples: list[Example]
    counter_examples: list[str]
    versions: str
    deprecated_by: str | None
    file: str
    line: int
    # An event becomes a finding only when this holds (e.g. a metrics line with the KV cache
    # nearly full *and* requests waiting); evaluated by diagnose, not by the matcher.
    require: Expression | None = None
    # kind "check": evaluated over a run's facts, not matched on a line. With attach_to (a
    # stage) its cause and fixes join each finding of that stage instead of making their own.
    attach_to: str | None = None
    # The fields that tell two findings of this rule apart; None: all of them. [] collapses
    # every event of the rule in a run and process into one finding with a count (metrics lines).
    group_by: list[str] | None = None
    counter_facts: list[dict[str, Any]] = field(default_factory=list)
    role: str | None = None  # kind "fact" only: what the line says about the run's life (ROLES)
    # name -> (sum|max|min, field): over every line the finding stands for (TOTAL); on one line,
    # the field's value. Derived numbers and the words may use the names.
    totals: dict[str, tuple[str, str]] = field(default_factory=dict)
    across_ranks: dict[str, str] = field(default_factory=dict)  # kind "fact": field -> min|max (ACROSS_RANKS)


@dataclass(slots=True)
class RuleSet:
    """The rules of a scan and the markers that go with them."""

    rules: list[Rule]
    skip_markers: list[str]
    hosted_markers: list[str]

    def by_code(self, code_or_name: str) -> Rule | None:
        for rule in self.rules:
            if code_or_name in (rule.code, rule.name):
                return rule
        return None

    @property
    def fact_names(self) -> set[str]:
        # A fact rule's derived numbers are facts too (a later line may keep the first value
        # with first(name, field), e.g. the KV usage of the first metrics line).
        # Lifecycle lines (a role) tell the run's outcome, not the server's figures; ready is both.
        return {
            name for rule in self.rules if rule.kind == "fact" and rule.role in (None, "ready")
            for name in (*rule.field_types, *rule.derived)
        } | TABLE_FACTS


# --- documents: YAML with line numbers (triage.rules.yamlfile), or a cached copy -------------


class LineDict(dict):
    line = 0


# Limits on a rule file from someone else, checked before anything is built from it.
MAX_RULE_FILE_BYTES = 1024 * 1024
MAX_YAML_DEPTH = 40
MAX_YAML_VALUES = 50_000  # counted with aliases expanded: a "billion laughs" file stops here
LINE_KEY = "\x00line"  # a mapping's line number in a cached document (no YAML key can be it unnoticed)


class NotPlain(ValueError):
    """A value JSON would not give back as it is."""


def plain_document(value: Any) -> Any:
    """The document as JSON data with each mapping's line number; NotPlain when JSON would
    change it (a date, a number as a key, NaN ...): such a file is simply not cached."""
    if isinstance(value, dict):
        if LINE_KEY in value or not all(isinstance(key, str) for key in value):
            raise NotPlain
        return {LINE_KEY: getattr(value, "line", 0), **{key: plain_document(item) for key, item in value.items()}}
    if isinstance(value, list):
        return [plain_document(item) for item in value]
    if isinstance(value, float) and not -math.inf < value < math.inf:
        raise NotPlain
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    raise NotPlain


def line_dict(mapping: dict) -> dict:
    """A mapping of a cached document back as the YAML reader made it (json.loads object_hook)."""
    if LINE_KEY not in mapping:
        return mapping  # the entry's own tables
    restored = LineDict(mapping)
    restored.line = restored.pop(LINE_KEY)
    return restored


# --- loading ---------------------------------------------------------------------


def builtin_rule_files() -> list[Path]:
    # The package's folder: importlib.resources would add its imports to every start.
    import triage.rules.builtin

    return sorted(Path(triage.rules.builtin.__file__).parent.glob("*.yaml"))


def rule_files(paths: Iterable[str | Path]) -> list[Path]:
    files: list[Path] = []
    for entry in map(Path, paths):
        if entry.is_dir():
            files.extend(sorted(p for p in entry.rglob("*.y*ml") if p.is_file()))
        elif entry.exists():
            files.append(entry)
        else:
            raise RuleError(f"{entry}:0: no such rule file or folder")
    return files


def load_rules(extra: Iterable[str | Path] = (), builtin: bool = True) -> RuleSet:
    """The built-in rules plus the user's files; a user rule may not reuse a code."""
    rules: list[Rule] = []
    skip: list[str] = []
    hosted: list[str] = []
    own = builtin_rule_files() if builtin else []
    for path in own + rule_files(extra):
        file_rules, file_skip, file_hosted = load_file(path, builtin=path in own)
        rules.extend(file_rules)
        skip.extend(m for m in file_skip if m not in skip)
        hosted.extend(m for m in file_hosted if m not in hosted)
    _check_unique(rules)
    ruleset = RuleSet(rules, skip, hosted)
    if builtin:
        _check_relied_on(ruleset)
    fact_names = ruleset.fact_names
    every_name = {name for rule in rules for name in (*rule.field_types, *rule.derived)} | CHECK_NAMES
    for rule in rules:
        _check_names(rule, fact_names if rule.kind != "check" else every_name)
    return ruleset


def load_file(path: Path, builtin: bool = False) -> tuple[list[Rule], list[str], list[str]]:
    """One file's rules and markers: from the cache when these bytes were loaded before
    (they were then checked in full, so only what is cheap is redone), else from the YAML."""
    try:
        with path.open("rb") as stream:  # read at most the cap: the path may be a pipe or /dev/zero
            data = stream.read(MAX_RULE_FILE_BYTES + 1)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError(f"{path}:0: cannot read rule file: {exc}") from None
    if len(data) > MAX_RULE_FILE_BYTES:
        raise RuleError(f"{path}:0: refused: rule file larger than {MAX_RULE_FILE_BYTES // 1024} KiB")
    entry_name = f"rules-{rulecache.entry_key('rules', b'builtin' if builtin else b'user', data)}.json"
    entry = rulecache.read_json(entry_name, object_hook=line_dict)
    if entry is not None:
        try:
            loaded = _from_document(path, entry["document"], builtin, entry["fields"])
            remember_anchors(entry["anchors"])
            remember_openings(entry["openings"])
            return loaded
        except Exception:  # noqa: BLE001 - an entry that does not fit is ignored: the file is read again
            pass
    from triage.rules.yamlfile import read_yaml  # PyYAML only when a file is not in the cache

    document = read_yaml(path, text, builtin)
    loaded = _from_document(path, document, builtin)
    _store(entry_name, document, loaded[0])
    return loaded


def _from_document(
    path: Path, document: Any, builtin: bool, checked: dict[str, list[str]] | None = None
) -> tuple[list[Rule], list[str], list[str]]:
    """checked: the named groups of each regex already checked and compiled once (cache)."""
    if not isinstance(document, dict):
        raise RuleError(f"{path}:1: a rule file is a mapping with a 'rules' list")
    _unknown_keys(path, document, FILE_KEYS, "rule file")
    entries = document.get("rules")
    if not isinstance(entries, list) or not entries:
        raise RuleError(f"{path}:{getattr(document, 'line', 1)}: 'rules' must be a non-empty list")
    default_stage = document.get("stage")
    rules = [_parse_rule(path, entry, default_stage, lazy=builtin, checked=checked) for entry in entries]
    return (
        rules,
        _string_list(path, document, "skip_markers"),
        _string_list(path, document, "hosted_markers"),
    )


def _store(entry_name: str, document: Any, rules: list[Rule]) -> None:
    """Cache a file that loaded without error, with its regexes' named groups and anchors."""
    if rulecache.cache_dir() is None:
        return
    try:
        plain = plain_document(document)
    except NotPlain:
        return
    fields = {pattern.compiled.pattern: pattern.fields for rule in rules for pattern in rule.patterns}
    keywords = [  # the matcher derives a rule's keywords only for a pattern without good anchors
        keyword_source(keyword) for rule in rules
        if any(needs_keywords(anchors_for(p.compiled.pattern)) for p in rule.patterns) for keyword in rule.keywords
    ]
    anchors = derived_anchors([*fields, *keywords])
    openings = derived_openings(fields)  # what the cut readings ask first (anchors.may_match_cut)
    rulecache.write_json(entry_name, {"document": plain, "fields": fields, "anchors": anchors, "openings": openings})


def _parse_rule(
    path: Path, raw: Any, default_stage: str | None, lazy: bool = False, checked: dict[str, list[str]] | None = None
) -> Rule:
    if not isinstance(raw, dict):
        raise RuleError(f"{path}:0: each rule is a mapping")
    line = getattr(raw, "line", 0)
    where = f"{path}:{line}"
    _unknown_keys(path, raw, RULE_KEYS, "rule")
    kind = raw.get("kind", "finding")
    required = {"check": ("require", "examples"), "gate": ()}.get(kind, ("keywords", "patterns", "examples"))
    for key in ("code", "name", "title", *required):
        if key not in raw:
            raise RuleError(f"{where}: rule is missing '{key}'")
    code = str(raw["code"])
    where = f"{where}: {code}"
    if not CODE.fullmatch(code):
        raise RuleError(f"{where}: code must look like VT101")
    if not NAME.fullmatch(str(raw["name"])):
        raise RuleError(f"{where}: name must be kebab-case, like context-length-exceeded")
    stage = raw.get("stage", default_stage)
    if stage not in STAGES:
        raise RuleError(f"{where}: stage must be one of {', '.join(STAGES)}")
    if kind not in ("finding", "fact", "check") and not (kind == "gate" and lazy):  # gate: the built-in gate.yaml's
        raise RuleError(f"{where}: kind must be 'finding', 'fact' or 'check'")
    severity = raw.get("severity", "info")
    if severity not in SEVERITIES:
        raise RuleError(f"{where}: severity must be one of {', '.join(SEVERITIES)}")
    if kind == "check":
        return _parse_check(path, raw, where, stage, severity)
    if kind == "gate":
        return _parse_gate(path, raw, where, stage, severity)
    role = raw.get("role")
    if role is not None and (kind != "fact" or role not in ROLES):
        raise RuleError(f"{where}: role is for kind: fact, one of {', '.join(ROLES)}")
    keywords = _string_list(path, raw, "keywords")
    if not keywords:
        raise RuleError(f"{where}: 'keywords' must list at least one literal text")
    patterns = [_parse_pattern(where, i, p, lazy, checked) for i, p in enumerate(_list(where, raw, "patterns"))]
    if not patterns:
        raise RuleError(f"{where}: 'patterns' must hold at least one pattern")
    field_types = _field_types(where, raw, patterns)
    derived = _parse_derived(where, raw)
    examples, counter = _parse_examples(where, raw, keywords)
    return Rule(
        code=code,
        name=str(raw["name"]),
        title=str(raw["title"]),
        stage=stage,
        severity=severity,
        kind=kind,
        description=str(raw.get("description", "")).strip(),
        keywords=keywords,
        patterns=patterns,
        field_types=field_types,
        derived=derived,
        cause=_parse_steps(where, raw, "cause"),
        fixes=_parse_steps(where, raw, "fixes"),
        references=_string_list(path, raw, "references"),
        examples=examples,
        counter_examples=counter,
        versions=str(raw.get("versions", "")),
        deprecated_by=raw.get("deprecated_by"),
        file=str(path),
        line=line,
        require=_parse_require(where, raw),
        group_by=_parse_group_by(where, raw, field_types),
        role=role,
        totals=_parse_totals(where, raw, field_types),
        across_ranks=_parse_across_ranks(where, raw, kind, field_types),
    )


def _parse_totals(where: str, raw: dict, field_types: dict[str, str]) -> dict[str, tuple[str, str]]:
    totals: dict[str, tuple[str, str]] = {}
    for name, source in (raw.get("totals") or {}).items():
        match = TOTAL.fullmatch(str(source).strip())
        if match is None:
            raise RuleError(f"{where}: totals {name}: must be sum(field), max(field), min(field) or count(field)")
        if field_types.get(match["field"]) not in ("int", "float", "gib"):
            raise RuleError(f"{where}: totals {name}: '{match['field']}' is not a number a pattern captures")
        if name in field_types:
            raise RuleError(f"{where}: totals {name}: a pattern captures a field of that name")
        totals[str(name)] = (match["how"], match["field"])
    return totals


def _parse_across_ranks(where: str, raw: dict, kind: str, field_types: dict[str, str]) -> dict[str, str]:
    across = raw.get("across_ranks") or {}
    if across and kind != "fact":
        raise RuleError(f"{where}: across_ranks is for kind: fact")
    if not isinstance(across, dict):
        raise RuleError(f"{where}: across_ranks maps a field to {', '.join(ACROSS_RANKS)}")
    for name, how in across.items():
        if how not in ACROSS_RANKS:
            raise RuleError(f"{where}: across_ranks {name}: must be one of {', '.join(ACROSS_RANKS)}")
        if field_types.get(name) not in ("int", "float", "gib"):
            raise RuleError(f"{where}: across_ranks {name}: not a number a pattern captures")
    return {str(name): str(how) for name, how in across.items()}


def _parse_group_by(where: str, raw: dict, field_types: dict[str, str]) -> list[str] | None:
    if raw.get("group_by") is None:
        return None
    names = raw["group_by"]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise RuleError(f"{where}: group_by must be a list of field names")
    unknown = [n for n in names if n not in field_types]
    if unknown:
        raise RuleError(f"{where}: group_by names '{unknown[0]}', which no pattern captures")
    return names


def _parse_require(where: str, raw: dict) -> Expression | None:
    if raw.get("require") is None:
        return None
    try:
        return Expression(str(raw["require"]))
    except ExprError as exc:
        raise RuleError(f"{where}: require: {exc}") from None


def _parse_pattern(
    where: str, index: int, raw: Any, lazy: bool = False, checked: dict[str, list[str]] | None = None
) -> Pattern:
    """lazy: a built-in pattern (tested to compile) is compiled when a line first needs it;
    so is one in `checked` (refused or compiled when its file was first read), whose value
    is its named groups."""
    if isinstance(raw, str):
        raw = {"regex": raw}
    if not isinstance(raw, dict) or "regex" not in raw:
        raise RuleError(f"{where}: pattern {index + 1} needs a 'regex'")
    unknown = set(raw) - PATTERN_KEYS
    if unknown:
        raise RuleError(f"{where}: pattern {index + 1}: unknown key '{sorted(unknown)[0]}'")
    source = str(raw["regex"]).strip()
    expanded = MACRO.sub(lambda m: f"(?P<{m['name']}>{FIELD_TYPES[m['type']][0]})", source)
    label = f"{where}: pattern {raw.get('id', index + 1)}"
    if checked is not None:
        compiled: Any = LazyRegex(expanded)
        fields = list(checked[expanded])
    elif len(expanded) > MAX_REGEX_LENGTH:
        raise RuleError(f"{label}: refused: longer than {MAX_REGEX_LENGTH:,} characters")
    elif repetition_load(expanded) > MAX_REPETITION:
        raise RuleError(f"{label}: refused: counted repeats multiply past {MAX_REPETITION:,} (like (a{{100}}){{1000}})")
    elif lazy:
        compiled = LazyRegex(expanded)
        fields = list(dict.fromkeys(GROUP_NAME.findall(expanded)))
    else:
        import regex  # on first need: with built-in rules only, a scan may never import it

        try:
            compiled = regex.compile(expanded)
        except (regex.error, RecursionError, OverflowError) as exc:
            raise RuleError(f"{label} does not compile: {exc}") from None
        fields = list(compiled.groupindex)
    return Pattern(
        id=str(raw.get("id", index + 1)),
        compiled=compiled,
        fields=fields,
        types={m["name"]: m["type"] for m in MACRO.finditer(source)},
        versions=raw.get("versions"),
        hosted=bool(raw.get("hosted", False)),
    )


GROUP_NAME = re.compile(r"\(\?P?<([A-Za-z_]\w*)>")  # a named group: (?P<name>...) or (?<name>...)


class LazyRegex:
    """A compiled regex made on first use: most patterns meet no candidate line in a scan,
    and compiling all of them was a fifth of the start-up (with 500 user rules, most of it).
    A rule's pattern is compiled by the regex module (from the rule cache); make= another
    compiler: a module's own stdlib patterns that only some inputs need (a paste's).

    The first use fills the slots below from the compiled regex, so later calls cost what
    they cost on the compiled regex itself (no __getattr__ per search)."""

    __slots__ = ("pattern", "_make", "_compiled", "search", "match", "fullmatch", "finditer", "groupindex", "sub")

    def __init__(self, pattern: str, make: Callable[[str], Any] | None = None):
        self.pattern = pattern
        self._make = make
        self._compiled: Any = None

    def __getattr__(self, name: str) -> Any:  # search, match, groupindex ...: the compiled regex's
        if name.startswith("__"):  # copy and pickle probe for these: not the regex's
            raise AttributeError(name)
        if self._compiled is None:
            self._compiled = (self._make or rulecache.compiled_regex)(self.pattern)
            for slot in LazyRegex.__slots__[3:]:
                setattr(self, slot, getattr(self._compiled, slot))
        return getattr(self._compiled, name)

    def __repr__(self) -> str:
        return f"LazyRegex({self.pattern!r})"


# regex expands an exact count ({m}) when it compiles, before any timeout applies:
# ((a{100}){100}){100} is a million nodes and seconds of compiling. Bound the product.
MAX_REGEX_LENGTH = 10_000
MAX_REPETITION = 10_000
_COUNT = re.compile(r"\{(\d+)(?:,\d*)?\}")


def repetition_load(pattern: str) -> int:
    """The largest product of counted repeats ({m}, {m,n}: m counts) around any atom."""
    frames = [1]  # per open group: the largest load inside it so far
    position, load = 0, 1
    while position < len(pattern):
        char = pattern[position]
        if char == "(":
            frames.append(1)
            position += 1
            continue
        if char == ")" and len(frames) > 1:
            load = frames.pop()
            position += 1
        elif char == "[":
            position = _class_end(pattern, position)
            load = 1
        else:
            position += 2 if char == "\\" else 1
            load = 1
        count = _COUNT.match(pattern, position)
        if count:
            load *= max(int(count[1]), 1)
            position = count.end()
        frames[-1] = max(frames[-1], load)
    return max(frames)


def _class_end(pattern: str, start: int) -> int:
    """The position after the character class that opens at start."""
    position = start + 1
    if pattern.startswith("^", position):
        position += 1
    if pattern.startswith("]", position):
        position += 1
    while position < len(pattern) and pattern[position] != "]":
        position += 2 if pattern[position] == "\\" else 1
    return position + 1


def _field_types(where: str, raw: dict, patterns: list[Pattern]) -> dict[str, str]:
    types: dict[str, str] = {}
    for pattern in patterns:
        for name in pattern.fields:
            types.setdefault(name, "str")
        types.update(pattern.types)
    for name, declared in (raw.get("fields") or {}).items():
        if declared not in DECLARED_TYPES:
            raise RuleError(f"{where}: field {name}: type must be one of {', '.join(sorted(DECLARED_TYPES))}")
        if name not in types:
            raise RuleError(f"{where}: field {name} is declared but no pattern captures it")
        types[name] = declared
    return types


def _parse_derived(where: str, raw: dict) -> dict[str, Expression]:
    derived: dict[str, Expression] = {}
    for name, source in (raw.get("derived") or {}).items():
        try:
            derived[str(name)] = Expression(str(source))
        except ExprError as exc:
            raise RuleError(f"{where}: derived {name}: {exc}") from None
    return derived


def _parse_steps(where: str, raw: dict, key: str) -> list[Step]:
    value = raw.get(key) or []
    if isinstance(value, str):
        value = [value]
    steps = []
    for item in value:
        if isinstance(item, str):
            item = {"text": item}
        if not isinstance(item, dict) or "text" not in item:
            raise RuleError(f"{where}: each {key} entry is a text or a mapping with 'text'")
        unknown = set(item) - STEP_KEYS
        if unknown:
            raise RuleError(f"{where}: {key}: unknown key '{sorted(unknown)[0]}'")
        when = None
        if item.get("when") is not None:
            try:
                when = Expression(str(item["when"]))
            except ExprError as exc:
                raise RuleError(f"{where}: {key} condition: {exc}") from None
        text = " ".join(str(item["text"]).split())
        try:
            check_template(text)
        except ExprError as exc:
            raise RuleError(f"{where}: {key}: {exc}") from None
        steps.append(Step(text, when, bool(item.get("server", False))))
    return steps


def _parse_examples(where: str, raw: dict, keywords: list[str]) -> tuple[list[Example], list[str]]:
    block = raw.get("examples") or {}
    if not isinstance(block, dict):
        raise RuleError(f"{where}: 'examples' holds 'match' and 'no_match' lists")
    examples = []
    for item in block.get("match") or []:
        if isinstance(item, str):
            item = {"text": item}
        text = str(item.get("text", ""))
        if not any(k in text for k in keywords):
            raise RuleError(f"{where}: example holds none of the rule's keywords, so the prefilter would skip it: {text[:80]!r}")
        examples.append(Example(text, dict(item.get("fields") or {}), dict(item.get("derived") or {})))
    if not examples:
        raise RuleError(f"{where}: a rule needs at least one example under examples.match")
    counter = [str(item) for item in block.get("no_match") or []]
    return examples, counter


def _check_names(rule: Rule, fact_names: set[str]) -> None:
    where = f"{rule.file}:{rule.line}: {rule.code}"
    known = set(rule.field_types) | PROVIDED_NAMES | fact_names | set(rule.totals)
    for name, expression in rule.derived.items():
        unknown = expression.names - known
        if unknown:
            raise RuleError(f"{where}: derived {name} uses '{sorted(unknown)[0]}', which no pattern captures")
        known.add(name)
    if rule.require is not None:
        if rule.require.names & set(rule.totals):  # a line's require is weighed before its repeats are merged
            raise RuleError(f"{where}: require uses '{sorted(rule.require.names & set(rule.totals))[0]}', a total")
        unknown = rule.require.names - known
        if unknown:
            raise RuleError(f"{where}: require uses '{sorted(unknown)[0]}', which no pattern captures and nothing derives")
    for step in rule.cause + rule.fixes:
        names = template_names(step.text) | (step.when.names if step.when else set())
        unknown = names - known
        if unknown:
            raise RuleError(f"{where}: template names '{sorted(unknown)[0]}', which no pattern captures and nothing derives")


def _check_relied_on(ruleset: RuleSet) -> None:
    for key, (kind, why) in RELIED_ON.items():
        rule = ruleset.by_code(key)
        if rule is None or rule.kind != kind:
            found = "there is none" if rule is None else f"{rule.file}:{rule.line} defines it as kind {rule.kind}"
            raise RuleError(f"built-in rules: no {kind} rule {key} ({why}); {found}")


def _check_unique(rules: list[Rule]) -> None:
    seen: dict[str, Rule] = {}
    for rule in rules:
        for key in (rule.code, rule.name):
            if key in seen:
                first = seen[key]
                raise RuleError(
                    f"{rule.file}:{rule.line}: {key} is already defined at {first.file}:{first.line}"
                    " (a user rule may not reuse a built-in code or name)"
                )
            seen[key] = rule


def _unknown_keys(path: Path, raw: dict, allowed: set[str], what: str) -> None:
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise RuleError(f"{path}:{getattr(raw, 'line', 0)}: unknown key '{unknown[0]}' in {what}")


def _list(where: str, raw: dict, key: str) -> list:
    value = raw.get(key)
    if not isinstance(value, list):
        raise RuleError(f"{where}: '{key}' must be a list")
    return value


def _string_list(path: Path, raw: dict, key: str) -> list[str]:
    value = raw.get(key) or []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise RuleError(f"{path}:{getattr(raw, 'line', 0)}: '{key}' must be a list of texts")
    return list(value)


def _parse_check(path: Path, raw: dict, where: str, stage: str, severity: str) -> Rule:
    """A rule evaluated over a run's facts; its examples are facts, not log text."""
    attach_to = raw.get("attach_to")
    if attach_to is not None and attach_to not in STAGES:
        raise RuleError(f"{where}: attach_to must be one of {', '.join(STAGES)}")
    block = raw.get("examples") or {}
    if not isinstance(block, dict) or not block.get("match"):
        raise RuleError(f"{where}: a check needs examples.match: facts for which it holds")
    examples, counter = [], []
    for item in block.get("match") or []:
        if not isinstance(item, dict) or not isinstance(item.get("facts"), dict):
            raise RuleError(f"{where}: each check example is a mapping with 'facts'")
        examples.append(Example("", dict(item["facts"]), dict(item.get("derived") or {})))
    for item in block.get("no_match") or []:
        if not isinstance(item, dict) or not isinstance(item.get("facts"), dict):
            raise RuleError(f"{where}: each check counter-example is a mapping with 'facts'")
        counter.append(dict(item["facts"]))
    return Rule(
        code=str(raw["code"]), name=str(raw["name"]), title=str(raw["title"]), stage=stage,
        severity=severity, kind="check", description=str(raw.get("description", "")).strip(),
        keywords=[], patterns=[], field_types={}, derived=_parse_derived(where, raw),
        cause=_parse_steps(where, raw, "cause"), fixes=_parse_steps(where, raw, "fixes"),
        references=_string_list(path, raw, "references"), examples=examples, counter_examples=[],
        versions=str(raw.get("versions", "")), deprecated_by=raw.get("deprecated_by"),
        file=str(path), line=getattr(raw, "line", 0), require=_parse_require(where, raw),
        attach_to=attach_to, counter_facts=counter,
    )


def _parse_gate(path: Path, raw: dict, where: str, stage: str, severity: str) -> Rule:
    """One of the gate's assertions: its numbers come from triage/diagnose/gate.py, named
    and typed under `fields`; they are all its templates may use."""
    fields = raw.get("fields") or {}
    for name, declared in fields.items():
        if declared not in DECLARED_TYPES:
            raise RuleError(f"{where}: field {name}: type must be one of {', '.join(sorted(DECLARED_TYPES))}")
    return Rule(
        code=str(raw["code"]), name=str(raw["name"]), title=str(raw["title"]), stage=stage,
        severity=severity, kind="gate", description=str(raw.get("description", "")).strip(),
        keywords=[], patterns=[], field_types=dict(fields), derived={},
        cause=_parse_steps(where, raw, "cause"), fixes=_parse_steps(where, raw, "fixes"),
        references=_string_list(path, raw, "references"), examples=[], counter_examples=[],
        versions=str(raw.get("versions", "")), deprecated_by=None, file=str(path), line=getattr(raw, "line", 0),
    )


def select_rules(rules: list[Rule], select: Iterable[str] = (), ignore: Iterable[str] = ()) -> list[Rule]:
    """The finding rules chosen by code, code prefix (VT1, VT30) or name; fact rules always stay,
    since every finding may need what they tell. A selector that matches no rule is an error."""
    select, ignore = list(select), list(ignore)
    rules = [rule for rule in rules if rule.kind != "gate"]  # the gate's assertions run under `gate` alone
    for selector in select + ignore:
        if not any(_selected(rule, selector) for rule in rules):
            raise RuleError(f"--select/--ignore {selector}: matches no rule code, code prefix or rule name")
    chosen = []
    for rule in rules:
        if rule.kind == "fact" or (not select or any(_selected(rule, s) for s in select)) and not any(_selected(rule, s) for s in ignore):
            chosen.append(rule)
    return chosen


def _selected(rule: Rule, selector: str) -> bool:
    return rule.name == selector or rule.code.startswith(selector.upper())
