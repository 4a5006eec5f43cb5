"""Matching vLLM's messages as people paste them: the second try after the exact patterns.

Between vLLM and a user's clipboard a message gets re-wrapped (at any width, mid-word or
mid-number, with or without the log prefix on the continuation lines), re-quoted (curly,
CJK or full-width quotes; backticks lost to rendered markdown), cut short, paraphrased
around its numbers, or embedded in prose of another language. Both sides are brought to
one form for that:

- the text (normalise): full-width forms folded (NFKC), every whitespace, quote and
  backtick removed, sentence punctuation removed unless it sits between two digits
  (so "16.00" and "131,072" keep theirs), compared without case;
- each rule pattern (LoosePattern), derived from its regex, never written by hand: the
  same deletions on its literals, punctuation and brackets optional, and the pattern's
  top-level sequence turned into a chain that matches as far as the text goes. The
  *head* (everything up to the end of the clause in which the literal text reaches MIN_HEAD
  letters or digits) is required; after it each step is optional, so a cut message still
  yields the numbers printed before the cut, and a cut inside vLLM's later clauses is read.
  The literal glue of words before a value may be replaced by other words (any SOFT_GLUE
  characters that are not digits) once a value was read: a paraphrase keeping vLLM's head
  and numbers in their order still reads them (not right after the head: other words there
  are the writer's, and the number after them too).

A message is identified by its head and its numbers, not by its tail. The head is the
guard: prose that names a knob or quotes a number without vLLM's opening clause never
matches, and request-log lines (prompts) never reach this code (the matcher skips them).
A new vLLM wording stays a YAML change: its loose form is derived like its anchors.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

from triage.match.anchors import sre_constants, sre_parse
from triage.rules.ruleset import LazyRegex

MIN_HEAD = 14  # letters and digits in the literal run that ends a head: below that, prose matches
MIN_HEAD_WORDS = 3  # and words: a knob's name alone ("max_num_batched_tokens") is not a message
SOFT_GLUE = 24  # characters (normalised) other words between two numbers may take
SHORT_GLUE = 16  # only glue this short (letters and digits) may be worded otherwise: "in the messages,"
HELD = "{ }"  # a value's placeholder (what a traceback's source line holds for it), a blank inside
NUMBER, TEXT = 2, 1  # the kind of value a step of the chain reads

QUOTES = ("'\"`\u2018\u2019\u201a\u201b\u201c\u201d\u201e\u201f\u2032\u2033\u00b4\u02bc\u00ab\u00bb\u2039\u203a"
          "\u300c\u300d\u300e\u300f\u301d\u301e\u301f\uff02\uff07")
PUNCTUATION = ".,;:!?"
BRACKETS = "()[]"
# After NFKC: CJK punctuation that folding leaves alone.
_CJK = str.maketrans({"\u3002": ".", "\u3001": ",", "\uff61": ".", "\uff64": ",", "\u3010": "[", "\u3011": "]",
                      "\u3014": "(", "\u3015": ")", "\u2026": "...",
                      "\u2013": "-", "\u2014": "-"})  # en and em dash: a hyphen
_DROP = LazyRegex(f"[\\s{re.escape(QUOTES)}]+", re.compile)
_DROP_CHARS = frozenset(QUOTES)
_PUNCTUATION_SET = frozenset(".,;:!?")
# Sentence punctuation goes unless digits (or the line's edge: a number may go on in the next
# line, "(7" / ".5 GiB") stand on both sides: "16.00" and "131,072" keep theirs.
_LONE_PUNCTUATION = LazyRegex(r"(?<=\D)[.,;:!?]+|[.,;:!?]+(?=\D)", re.compile)
# Where a clause of a message's literal text ends: after its punctuation, or before a bracket.
CLAUSE_END = LazyRegex(r"[.,;:](?= )|(?= \()", re.compile)
# What a viewer, a chat or a tool leaves where it cut a message (loose form: "…" is "...").
TRUNCATED = LazyRegex(r"(?i:\.{2,}|\[(?:truncated|cut|\.+)\]|\((?:truncated|cut|\.+)\)|<truncated>)+$", re.compile)


def normalise(text: str) -> str:
    """The form both a pasted text and a loose pattern are compared in."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text).translate(_CJK)
    return _LONE_PUNCTUATION.sub("", _DROP.sub("", text))


def normalise_mapped(text: str, dropped: frozenset[int] = frozenset()) -> tuple[str, list[int]]:
    """normalise(text), and for each of its characters the offset in text it came from.
    dropped: offsets of characters the form leaves out besides (a string's prefix letter)."""
    chars: list[str] = []
    origin: list[int] = []
    drop = _DROP_CHARS
    for index, char in enumerate(text):
        if index in dropped:
            continue
        folded = char if char.isascii() else unicodedata.normalize("NFKC", char).translate(_CJK)
        for piece in folded:
            if piece not in drop and not piece.isspace():
                chars.append(piece)
                origin.append(index)
    kept = "".join(chars)
    if not any(char in _PUNCTUATION_SET for char in kept):
        return kept, origin
    lone = [False] * len(kept)
    for match in _LONE_PUNCTUATION.finditer(kept):
        lone[match.start() : match.end()] = [True] * (match.end() - match.start())
    return "".join(c for c, gone in zip(kept, lone, strict=True) if not gone), \
        [at for at, gone in zip(origin, lone, strict=True) if not gone]


@dataclass(slots=True)
class LoosePattern:
    """The paste-tolerant form of one rule pattern (derive_loose)."""

    regex: str  # for the regex module, IGNORECASE
    probe: str  # the longest letters-and-digits piece of the head, lower case: a cheap first test
    pieces: list[str]  # every such piece of the head, lower case: a text without one of them holds no match
    fields: list[str]  # the pattern's own named groups
    tight: list[str]  # those that take no blank ("\\S+", "[\\w:]+"): in the loose form, blanks gone, they would run on
    compiled: Any = None

    def search(self, text: str, timeout: float, pos: int = 0) -> Any:
        return self._compiled().search(text, pos, timeout=timeout)

    def cut_at(self, text: str, start: int, end: int, timeout: float, held: list[tuple[int, int]] = ()) -> Any:  # type: ignore[assignment]
        """The match of text[start:end] as this message cut at `end`, inside one of its own
        words or values (None if it is not): a match that runs to the end of the text with
        more of it wanted, whose last piece is not one that reads any text (other words a
        paraphrase may put between two numbers, a clause the pattern skips) nor one inside its
        head, since that would take prose written after a message too. held: the spans of the
        values a reading of it took, held as read (a value's placeholder stands for each), so
        the match reads on from where that reading stopped: "\\S+" of "Sequence group
        (?P<id>\\S+) is ..." would take all the text after the id, blanks gone. The caller
        checks the tight values it reads past them (a partial match names only those it closed)."""
        for low, high in sorted(held, reverse=True):  # ("{ }": a blank, so that no "\\S+" before runs over it)
            text, end = f"{text[:low]}{HELD}{text[high:]}", end + len(HELD) - (high - low)
        match = self._compiled().fullmatch(text, pos=start, endpos=end, partial=True, timeout=timeout)
        if match is None or match.group("_h") is None or any(
                name[:2] in ("_s", "_x") and match.end(name) == end > match.start(name)
                for name, value in match.groupdict().items() if value is not None):
            return None
        return match

    def _compiled(self) -> Any:
        if self.compiled is None:
            import regex

            from triage.rules.cache import compiled_regex

            self.compiled = compiled_regex(self.regex, regex.IGNORECASE | regex.V0)
        return self.compiled


@dataclass(slots=True)
class LooseMatch:
    """One loose reading of a text: its values and how far, and how well, it read the message."""

    fields: dict[str, str]  # the named groups that matched, as text
    start: int
    end: int
    score: int  # matched characters of the message's own words (not values, named or not, nor other words): the better reading wins
    complete: bool  # the chain reached the pattern's end (False: cut short or tail replaced)
    values_read: bool  # it reached past the last value: only the tail may be missing
    numbers_read: bool  # past the last number: only words may be missing (a closing sentence naming a lever)
    head_end: int  # where its head ends in the text
    before_gap: bool  # it stopped where a gap begins: what follows on the line may be the clauses it skips
    value_spans: list[tuple[int, int]]  # where its named values are in the text
    recased: bool  # its first letter is not in the case vLLM prints it ("this model's ...", "MAX_NUM_...")
    free_gap: bool  # that gap takes any text (".*?", "[^.]*?"), not clauses of a form ("Name: value, ")
    glue_spans: list[tuple[int, int, bool]]  # where other words stood for the glue of a value; True: glue with punctuation


def loose_match(pattern: LoosePattern, text: str, timeout: float, pos: int = 0) -> LooseMatch | None:
    """The pattern's first reading of the text (loose form) from `pos` on."""
    match = pattern.search(text, timeout, pos)
    if match is None:
        return None
    groups = match.groupdict()
    # what other words took, what free-form groups took (a \w+ runs on where spaces are gone),
    # and what the pattern's unnamed classes took: a rival's "[\d,]+" reads the same number as a
    # value, not as its own words
    soft = sum(len(value) for name, value in groups.items() if value and (name[:2] in ("_s", "_x") or name[:1] != "_"))
    fields = {name: groups[name] for name in pattern.fields if groups.get(name) is not None}
    fields = {name: value for name, value in fields.items() if not value.startswith("{")}  # a source line's placeholder
    return LooseMatch(fields, match.start(), match.end(), match.end() - match.start() - soft,
                      groups.get("_end") is not None, groups.get("_v") is not None,
                      groups.get("_n") is not None or groups.get("_v") is not None, match.end("_h"),
                      groups.get("_g") is not None, [match.span(name) for name in fields], groups.get("_c") is not None,
                      groups.get("_a") is not None,
                      [(*match.span(name), name[:3] == "_sp") for name, value in groups.items() if value and name[:2] == "_s"])


def derive_all(sources: list[str]) -> dict[str, LoosePattern | None]:
    """derive_loose() of each source, from the rule cache when this set of patterns was seen
    before: parsing every pattern again would be most of a small paste's scan."""
    from triage.rules import cache as rulecache

    name = f"loose-{rulecache.entry_key('loose', *(s.encode() for s in sources))}.json"
    stored = rulecache.read_json(name)
    if isinstance(stored, dict) and stored.keys() == set(sources):
        try:
            return {source: _from_stored(plain) for source, plain in stored.items()}
        except TypeError:  # another shape: derived again below
            pass
    derived = {source: derive_loose(source) for source in sources}
    rulecache.write_json(name, {source: _stored(loose) for source, loose in derived.items()})
    return derived


def loose_form_of(source: str) -> LoosePattern | None:
    """derive_loose(source), from the rule cache when this pattern was derived before: a
    server's log needs the loose forms of a few patterns (a message wrapped or cut short),
    and deriving each again at every start took a millisecond."""
    from triage.rules import cache as rulecache

    name = f"{rulecache.PER_PATTERN}/loose-{rulecache.entry_key('loose-one', source.encode())}.json"
    stored = rulecache.read_json(name)
    if isinstance(stored, dict) and stored.keys() == {"form"}:
        try:
            return _from_stored(stored["form"])
        except TypeError:  # another shape: derived again below
            pass
    derived = derive_loose(source)
    rulecache.write_json(name, {"form": _stored(derived)})
    return derived


def _stored(loose: LoosePattern | None) -> list | None:
    """A loose form as JSON values, for the rule cache (what it is derived from, not compiled)."""
    return None if loose is None else [loose.regex, loose.probe, loose.pieces, loose.fields, loose.tight]


def _from_stored(plain: list | None) -> LoosePattern | None:
    return None if plain is None else LoosePattern(*plain)


def derive_loose(source: str) -> LoosePattern | None:
    """The loose form of a pattern's regex (after the {name:type} shorthand is expanded);
    None when it uses syntax only the regex module reads, or has no head."""
    try:
        tree = sre_parse.parse(source)
    except Exception:  # noqa: BLE001 - regex-module syntax: no loose form
        return None
    names = {index: name for name, index in tree.state.groupdict.items()}
    emitter = _Emitter(names)
    segments = _segments(list(tree), emitter)
    head_end, letters, head_words, head_split = None, 0, 0, False
    for index, (literal, content) in enumerate(segments):
        if literal and letters + _alnum(content) >= MIN_HEAD and head_words + _words(content) >= MIN_HEAD_WORDS:
            clauses = _head_clause(content, letters, head_words)
            segments[index : index + 1] = clauses
            head_end, head_split = index, len(clauses) > 1
            break
        letters += _alnum(content) if literal else 0
        head_words += _words(content) if literal else 0
    if head_end is None:
        return None
    if not tree.state.groupdict:  # no value to read: the whole text is what tells the message
        head_end = len(segments) - 1
    head = "".join(_emit_segment(segment, emitter) for segment in segments[: head_end + 1])
    if head[:1].isalpha():  # as printed, or in another case (_c): the matcher then asks what stands before it
        head = f"(?:(?-i:{head[0]})|(?P<_c>{head[0]})){head[1:]}"
    chain = "(?P<_end>)"
    steps = _steps(segments[head_end + 1 :], emitter, head_split)
    last_value = max((i for i, (_, holds, _) in enumerate(steps) if holds), default=-1)
    last_number = max((i for i, (_, holds, _) in enumerate(steps) if holds == NUMBER), default=-1)
    head += "(?P<_h>)"  # where the head ends: a cut before it is no finding
    if last_value < 0:
        head += "(?P<_v>)"  # no value after the head: it is all there is to read
    for index in range(len(steps) - 1, -1, -1):
        step, _, cut = steps[index]
        step = step.replace("{soft}", f"_s{index}").replace("{softp}", f"_sp{index}")
        marks = ("(?P<_n>)" if index == last_number else "") + ("(?P<_v>)" if index == last_value else "")
        # a cut inside the step's alternation reads that far and ends the chain (not complete)
        chain = f"(?:{step}{marks}{chain}{'|' + cut if cut else ''})?"
    pieces = [p for literal, content in segments[: head_end + 1] if literal for p in re.findall(r"[A-Za-z0-9]+", _plain(content))]
    probe = max(pieces, key=len).lower() if pieces else ""
    tight = [name for name, index in tree.state.groupdict.items() if not _takes_blank(_group_items(list(tree), index))]
    return LoosePattern(head + chain, probe, list(dict.fromkeys(p.lower() for p in pieces)), list(tree.state.groupdict), tight)


def _head_clause(content: str, letters: int, words: int) -> list[tuple[bool, str]]:
    """The literal run that completes the head, split after the clause in which it does: the
    clauses vLLM prints after it ("(VLLM_...=0). Without it, ... to avoid OOM.") are steps
    of the chain, so a cut inside them is read as a cut of the message, not lost with a head
    that wants all of them."""
    for clause in CLAUSE_END.finditer(content):
        head, rest = content[: clause.end()], content[clause.end() :]
        if letters + _alnum(head) >= MIN_HEAD and words + _words(head) >= MIN_HEAD_WORDS:
            return [(True, head), (True, rest)] if _alnum(rest) else [(True, content)]
    return [(True, content)]


def _words(text: str) -> int:
    return sum(any(c.isalpha() for c in word) for word in text.split())


def _steps(segments: list[tuple[bool, Any]], emitter: _Emitter, head_rest: bool = False) -> list[tuple[str, int, str]]:
    """The optional steps after the head: (regex, the value it holds: NUMBER, TEXT or 0, its
    form cut inside an alternation or ""). Literal glue goes with the value after it, so
    other words in its place (the soft glue) are taken only when that value follows. A gap
    (".*?", "[^.]*", a skipped clause) goes with the step after it: alone, an optional gap
    would take nothing (or everything) and end the chain there, before the values.
    head_rest: the first segment is the rest of the head's literal run (vLLM's own clauses,
    never worded otherwise)."""
    steps: list[tuple[str, int, str]] = []
    index, gap, free, lead = 0, "", False, ""
    while index < len(segments):
        piece = _emit_segment(segments[index], emitter)
        following = segments[index + 1] if index + 1 < len(segments) else None
        if segments[index][0] and following and not following[0] and emitter.holds_value(following):
            after_any = index > 0 and _holds_any(segments[index - 1])  # ".*?" before it is glue already
            # other words only once a value was read: right after the head they would be the
            # writer's, reading the writer's number ("with the model with 7 GPUs and 96 GB"); and
            # words for words (glue of punctuation alone, " = ", "), (", takes none of the writer's)
            after_value = any(holds for _, holds, _ in steps)
            fixed = after_any or not after_value or not 0 < _alnum(segments[index][1]) <= SHORT_GLUE \
                or head_rest and index == 0  # a long clause, or the rest of the head's, is the message's own
            # "_sp": the glue holds punctuation ("tokens (", "in the messages,"), and so must its other words
            soft = "{softp}" if any(c in PUNCTUATION + BRACKETS for c in segments[index][1]) else "{soft}"
            glue = piece if fixed else f"(?:{piece}|(?P<{soft}>[^\\d]{{0,{SOFT_GLUE}}}?))" if piece else ""
            cut = emitter.cut_branch(following[1])
            steps.append((gap + lead + glue + _emit_segment(following, emitter), emitter.holds_value(following),
                          _cut_forms(cut and gap + lead + piece + cut, gap, free)))
            index, gap, free, lead = index + 2, "", False, ""
            continue
        holds = 0 if segments[index][0] else emitter.holds_value(segments[index])
        glued = following and following[0] and index + 2 < len(segments) and emitter.holds_value(segments[index + 2])
        if not holds and not gap and not segments[index][0] and not _holds_any(segments[index]) and glued:
            # an optional piece before glue ("s?" of "models?'s max seq len ("): with the glue, so
            # that the glue may still match without it ("model's"); alone it would end the chain
            lead += piece
        elif not holds and (gap or _holds_any(segments[index])):
            gap += piece  # up to the next value: "(?:GPU|CPU) " alone after a gap is found inside any word
            free = free or _takes_any(segments[index])
        elif piece:
            steps.append((piece, holds, "" if segments[index][0] else emitter.cut_branch(segments[index][1])))
        index += 1
    if gap:
        steps.append((gap, 0, _cut_forms("", gap, free)))
    return steps


def _cut_forms(branch_cut: str, gap: str, free: bool) -> str:
    """A step's forms when the text ends inside it: its alternation cut in a branch, and, for a
    step that starts with a gap, the chain stopping there ("_g": the line may end inside the
    clauses the gap skips, "Waiting: 6 reqs, Preemptions: 2" of a KV usage line; "_a": the gap
    takes any text, so prose written after the head reads there as well)."""
    stop = "(?P<_g>)(?P<_a>)" if free else "(?P<_g>)"
    return "|".join(form for form in (branch_cut, stop if gap else "") if form)


def _takes_any(segment: tuple[bool, Any]) -> bool:
    """The segment is a repeat of almost any character itself (".*?", "[^.]*?"), not of clauses
    of a form ("(?:[A-Z][\\w ]*: [^,]*, )*?", "(?:: \\[[^\\]]*\\])?")."""
    literal, items = segment
    return not literal and len(items) == 1 and items[0][0] in _REPEATS and _any_char(items[0][1][2])


def _holds_any(segment: tuple[bool, Any]) -> bool:
    """The segment holds a repeat that may take any text (at any depth)."""
    literal, items = segment
    return not literal and _gap_in(items)


def _any_char(items: Any) -> bool:
    """The items hold a test that takes almost any character: ".", "[^.]", "[^,]"."""
    c = sre_constants
    return any(o is c.ANY or o is c.NOT_LITERAL or o is c.IN and any(m is c.NEGATE for m, _ in v) for o, v in items)


def _gap_in(items: Any) -> bool:
    """A repeat of almost any character, at any depth."""
    c = sre_constants
    for op, value in items:
        if op in _REPEATS:
            inner = [value[2]]
            if _any_char(value[2]):
                return True
        else:
            inner = [value[3]] if op is c.SUBPATTERN else list(value[1]) if op is c.BRANCH else []
        if any(_gap_in(branch) for branch in inner):
            return True
    return False


def _alnum(text: str) -> int:
    return sum(ch.isalnum() for ch in text)


def _plain(literal: str) -> str:
    return "".join(ch for ch in literal if ch not in QUOTES and not ch.isspace())


class _Emitter:
    """Writes an sre_parse tree back as regex text, with the loose form's changes."""

    def __init__(self, names: dict[int, str]):
        self.names = names
        self.unnamed = 0  # classes and repeats outside a value, captured as "_x<n>" (not the message's words)
        self.inside = 0  # depth inside a value, a lookaround or such a capture: not captured again

    def _free(self, emit: Callable[[], str]) -> str:
        """What a class or repeat outside a named value matched is still no word of the message."""
        if self.inside:
            return emit()
        inner = self._nested(emit)
        if not inner:
            return inner
        self.unnamed += 1
        return f"(?P<_x{self.unnamed}>{inner})"

    def _nested(self, emit: Callable[[], str]) -> str:
        self.inside += 1
        try:
            return emit()
        finally:
            self.inside -= 1

    def holds_value(self, segment: tuple) -> int:
        """NUMBER when the segment holds a named group that reads digits, TEXT when only other named groups, else 0."""
        if not any(self.names.get(index) for index in _group_indexes(segment[1])):
            return 0
        return NUMBER if _reads_number(segment[1], self.names) else TEXT

    def cut_branch(self, items: Any) -> str:
        """An alternation (as the whole of a segment) cut inside a branch: each branch read as
        far as the text goes, short of its end ("the XFORMERS" of "vLLM|the (?P<backend>\\w+)
        backend"); "" for anything else."""
        c = sre_constants
        while len(items) == 1 and items[0][0] is c.SUBPATTERN and not self.names.get(items[0][1][0]):
            items = items[0][1][3]
        if len(items) != 1 or items[0][0] is not c.BRANCH:
            return ""
        starts = []
        for branch in items[0][1][1]:
            pieces = [piece for piece in self.pieces(branch) if piece][:-1]  # all of it is the step itself
            if pieces:
                starts.append(functools.reduce(lambda rest, piece: f"{piece}(?:{rest})?", reversed(pieces[:-1]), pieces[-1]))
        return f"(?:{'|'.join(starts)})" if starts else ""

    def emit(self, items: Any) -> str:
        return "".join(self.pieces(items))

    def pieces(self, items: Any) -> list[str]:
        """The items' regex, one piece per item."""
        items = list(items)
        out = []
        for index, (op, value) in enumerate(items):
            if op is sre_constants.LITERAL:
                inside_number = 0 < index < len(items) - 1 and _digit_like(*items[index - 1]) and _digit_like(*items[index + 1])
                number_next = index < len(items) - 1 and _digit_like(*items[index + 1])
                out.append(self.literal(chr(value), strict=inside_number, number_next=number_next))
            else:
                out.append(self.item(op, value))
        return out

    def literal(self, char: str, strict: bool = False, top: bool = False, number_next: bool = False) -> str:
        """strict: punctuation inside a number ("16.00", "131,072") stays as it is. top: a
        bracket of the message's own text (not of a group's syntax) may have been dropped.
        Sentence punctuation may be a dash set between the clauses ("tokens - however"), but
        not before a digit (",\\d{3}" of a number: "131-072" is not one)."""
        if char.isspace() or char in QUOTES:
            return ""
        if not strict and char in PUNCTUATION:
            return re.escape(char) + "?" if number_next else f"(?:{re.escape(char)}|--?)?"
        if not strict and top and char in BRACKETS:
            return re.escape(char) + "?"
        return re.escape(char)

    def item(self, op: Any, value: Any) -> str:
        c = sre_constants
        if op in (c.NOT_LITERAL, c.ANY, c.IN, c.CATEGORY) or op in _REPEATS and _free_repeat(*value):
            return self._free(lambda: self._item(op, value))
        return self._item(op, value)

    def _item(self, op: Any, value: Any) -> str:
        c = sre_constants
        if op is c.LITERAL:
            return self.literal(chr(value))
        if op is c.NOT_LITERAL:
            return f"[^{_class_char(chr(value))}]"
        if op is c.ANY:
            return "."
        if op is c.IN:
            return self.char_class(value)
        if op is c.CATEGORY:
            return "" if value is c.CATEGORY_SPACE else _CATEGORIES.get(value, "")
        if op is c.AT:
            return ""  # ^, $, \b: the whitespace they lean on is gone
        if op is c.BRANCH:
            return "(?:" + "|".join(self.emit(branch) for branch in value[1]) + ")"
        if op is c.SUBPATTERN:
            group, _, _, items = value
            name = self.names.get(group) if group else None
            inner = self._nested(lambda: self.emit(items)) if name else self.emit(items)
            # a named value, or the placeholder that stands for it in a traceback's source line
            return f"(?P<{name}>{inner}|\\{{[^{{}}]{{1,80}}\\}})" if name else f"(?:{inner})"
        if op in _REPEATS:
            low, high, items = value
            if not _any_char(items) and _gap_in(items) and not _group_indexes(items):
                # skipped clauses ("(?:[A-Z][\w ]*: [^,]*, )*?"): with their separators gone from the
                # loose form, nested repeats would try every split of the text
                return ".*?" if low == 0 else ".+?"
            inner = self.emit(items)
            if not inner:
                return ""
            bounds = _bounds(low, high)
            # lazy only over a gap (any character, a negated class): a lazy class of a few
            # characters ("v[\d.]+?") would stop short of an optional bracket
            gap = _any_char(items)
            lazy = "?" if op is c.MIN_REPEAT and gap else ""
            return f"(?:{inner}){bounds}{lazy}"
        if op in (c.ASSERT, c.ASSERT_NOT):
            direction, items = value
            kind = {(1, c.ASSERT): "?=", (1, c.ASSERT_NOT): "?!", (-1, c.ASSERT): "?<=", (-1, c.ASSERT_NOT): "?<!"}
            return f"({kind[(direction, op)]}{self._nested(lambda: self.emit(items))})"
        if op is getattr(c, "ATOMIC_GROUP", None):
            return f"(?>{self.emit(value)})"
        if op is c.GROUPREF:
            name = self.names.get(value)
            return f"(?P={name})" if name else ""
        raise ValueError(f"no loose form for {op}")

    def char_class(self, members: Any) -> str:
        c = sre_constants
        if all(op is c.CATEGORY and value is c.CATEGORY_SPACE or op is c.LITERAL and chr(value).isspace()
               for op, value in members):
            return ""  # whitespace only: gone from the text
        return _class_regex(members)


_REPEATS = tuple(op for op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT,
                               getattr(sre_constants, "POSSESSIVE_REPEAT", None)) if op is not None)
_CATEGORIES = {
    sre_constants.CATEGORY_DIGIT: r"\d", sre_constants.CATEGORY_NOT_DIGIT: r"\D",
    sre_constants.CATEGORY_WORD: r"\w", sre_constants.CATEGORY_NOT_WORD: r"\W",
    sre_constants.CATEGORY_SPACE: r"\s", sre_constants.CATEGORY_NOT_SPACE: r"\S",
}


def _free_repeat(low: int, high: Any, items: Any) -> bool:
    """A repeat that reads no words of the message as a whole: not fixed text, no named value,
    and no optional clause of words ("(?:Deferred: [\\d,]+ reqs, )?": its words count, its
    class alone is captured)."""
    if all(op is sre_constants.LITERAL for op, _ in items) or _group_indexes(items):
        return False
    return high != 1 or not _has_letters(items)


def _has_letters(items: Any) -> bool:
    c = sre_constants
    for op, value in items:
        if op is c.LITERAL and chr(value).isalpha():
            return True
        inner = [value[3]] if op is c.SUBPATTERN else list(value[1]) if op is c.BRANCH else []
        if any(_has_letters(branch) for branch in inner):
            return True
    return False


def _digit_like(op: Any, value: Any) -> bool:
    """A digit, a class of digits, or a repeat of one: punctuation next to it belongs to a number."""
    c = sre_constants
    if op is c.LITERAL:
        return chr(value).isdigit()
    if op is c.CATEGORY:
        return value is c.CATEGORY_DIGIT
    if op is c.IN:
        return any(o is c.CATEGORY and v is c.CATEGORY_DIGIT or o is c.RANGE and v[0] == ord("0") for o, v in value)
    if op in _REPEATS:
        return any(_digit_like(o, v) for o, v in value[2])
    return False


def _reads_number(items: Any, names: dict[int, str], inside: bool = False) -> bool:
    """A named group among the items (at any depth) reads digits."""
    c = sre_constants
    for op, value in items:
        if inside and _digit_like(op, value):
            return True
        if op is c.SUBPATTERN and _reads_number(value[3], names, inside or names.get(value[0]) is not None):
            return True
        if op in _REPEATS and _reads_number(value[2], names, inside) or op is c.BRANCH and any(
                _reads_number(branch, names, inside) for branch in value[1]):
            return True
    return False


def _class_char(char: str) -> str:
    return "\\" + char if char in "\\]^-[" else char


def _bounds(low: int, high: Any) -> str:
    if high is sre_constants.MAXREPEAT:
        return "*" if low == 0 else "+" if low == 1 else f"{{{low},}}"
    if low == 0 and high == 1:
        return "?"
    return f"{{{low}}}" if low == high else f"{{{low},{high}}}"


def _group_items(items: Any, index: int) -> Any:
    """The items of capture group `index` (None when it is not among them)."""
    for op, value in items:
        if op is sre_constants.SUBPATTERN:
            inner = [value[3]]
            if value[0] == index:
                return value[3]
        else:
            inner = [value[2]] if op in _REPEATS else list(value[1]) if op is sre_constants.BRANCH else \
                [value[1]] if op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT) else []
        for branch in inner:
            found = _group_items(branch, index)
            if found is not None:
                return found
    return None


def _takes_blank(items: Any) -> bool:
    """Some test among the items (at any depth) takes a space: " ", "\\s", ".", "[^,]", "\\D"."""
    c = sre_constants
    for op, value in items or ():
        if op is c.LITERAL and chr(value).isspace() or op is c.ANY or op is c.NOT_LITERAL and not chr(value).isspace():
            return True
        if op is c.CATEGORY and value in (c.CATEGORY_SPACE, c.CATEGORY_NOT_DIGIT, c.CATEGORY_NOT_WORD):
            return True
        if op is c.IN and re.fullmatch(_class_regex(value), " "):
            return True
        inner = [value[3]] if op is c.SUBPATTERN else [value[2]] if op in _REPEATS else \
            list(value[1]) if op is c.BRANCH else []
        if any(_takes_blank(branch) for branch in inner):
            return True
    return False


def _class_regex(members: Any) -> str:
    """A character class of the parsed tree as regex text, unchanged (not the loose form's)."""
    c = sre_constants
    out, negate = [], False
    for op, value in members:
        if op is c.NEGATE:
            negate = True
        elif op is c.LITERAL:
            out.append(_class_char(chr(value)))
        elif op is c.RANGE:
            out.append(f"{_class_char(chr(value[0]))}-{_class_char(chr(value[1]))}")
        elif op is c.CATEGORY:
            out.append(_CATEGORIES.get(value, ""))
    return f"[{'^' if negate else ''}{''.join(out)}]"


def _group_indexes(items: Any) -> list[int]:
    """The capture groups inside a list of items."""
    found = []
    for op, value in items:
        if op is sre_constants.SUBPATTERN:
            if value[0]:
                found.append(value[0])
            found += _group_indexes(value[3])
        elif op in _REPEATS:
            found += _group_indexes(value[2])
        elif op is sre_constants.BRANCH:
            for branch in value[1]:
                found += _group_indexes(branch)
    return found


def _segments(items: list, emitter: _Emitter) -> list[tuple[bool, Any]]:
    """The top-level sequence in runs: (True, literal text) for literal characters (and
    whitespace the loose form drops), (False, [item]) for anything else."""
    segments: list[tuple[bool, Any]] = []
    for op, value in items:
        text = _literal_text(op, value)
        if text is not None:
            if segments and segments[-1][0]:
                segments[-1] = (True, segments[-1][1] + text)
            else:
                segments.append((True, text))
        else:
            segments.append((False, [(op, value)]))
    return segments


def _literal_text(op: Any, value: Any) -> str | None:
    """The item as literal text when it is one (a literal, or whitespace the loose form drops)."""
    c = sre_constants
    if op is c.LITERAL:
        return chr(value)
    if op is c.CATEGORY and value is c.CATEGORY_SPACE:
        return " "
    if op is c.IN and all(o is c.CATEGORY and v is c.CATEGORY_SPACE or o is c.LITERAL and chr(v).isspace()
                          for o, v in value):
        return " "
    if op in _REPEATS and all(_literal_text(o, v) == " " for o, v in value[2]):
        return " "
    return None


def _emit_segment(segment: tuple[bool, Any], emitter: _Emitter) -> str:
    literal, content = segment
    if literal:
        return "".join(emitter.literal(char, top=True, number_next=following.isdigit())
                       for char, following in zip(content, [*content[1:], ""], strict=True))
    return emitter.emit(content)
