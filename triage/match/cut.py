"""Where a pasted message was cut: the mark a viewer, a chat or a tool leaves, the end of a line cut
open, a number that lost digits at the cut, and whether the text really ends inside a message."""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

from triage.match.loose import HELD, QUOTES, TRUNCATED, LooseMatch, LoosePattern, normalise
from triage.rules.ruleset import MATCH_TIMEOUT, LazyRegex

if TYPE_CHECKING:
    from triage.match.targets import Target
    from triage.match.window import Window


ASCII_RUN = LazyRegex(r"[\x00-\x7f]*", re.compile)

# The mark a viewer, a chat or a tool leaves where it cut a line, as printed: "is lar…",
# "(9.3...", "1... [truncated]" (TRUNCATED: the same marks in the loose form, which keeps no
# lone dots).
MARK_STARTS = frozenset(" \t.\u2026[(<")  # the characters a cut mark (after its blanks) starts with
MARK_SPAN = 40  # a cut mark is looked for in this much of a line's end: a search of whole lines cost every metrics line
CUT_MARK = re.compile(
    r"\s*(?:\.{2,}|\u2026|[\[(<](?:truncated|cut|\.+|\u2026)[\])>])(?:\s*[\[(<](?:truncated|cut)[\])>])?\W*$", re.IGNORECASE
)

# How a line that ends inside a word, a number or a clause (as a cut leaves it) may end; vLLM's
# own lines end closed ("%", ".", ")"): only such a line is asked (by the slower partial match)
# whether it cuts a message short beside one read whole on it.
OPEN_END = ",:;([-_"
# a last character that ends a line closed, whatever is before it, unless a cut mark is there
CLOSED_END = frozenset("%)]}>/#*+=&|~^$@")
MARK_CLOSERS = frozenset(")]>")  # the last characters of a cut mark among them ("[truncated]")
PROSE_AFTER = LazyRegex("[^\\x00-\\x7f\u2026]", re.compile)  # the first character of another script (not a cut's "…")
NOTE = LazyRegex(r"\([^()]*[^\W\d_a-zA-Z][^()]*\)", re.compile)  # brackets around words of another script
PROSE_WORD = LazyRegex(r"[^\W\d_a-zA-Z]", re.compile)  # a letter of another script (loose form: no blanks, no ASCII punctuation)
# a cut mark with the writer's words after it on its line
INNER_MARK = re.compile(r"\s*(?:\.{2,}|\u2026|[\[(<]truncated[\])>])(?:\s*[\[(<]truncated[\])>])?(?=\s+\S)", re.IGNORECASE)
NO_TEXT = "\x00"  # no message holds it: only a clause that takes any character reads it
CLAUSE_BREAK = LazyRegex(r"[,;:()\[\]=/]", re.compile)  # where one of a message's clauses ends: "Preemptions: 2, GP" ends in "GP"
WORDS = LazyRegex(r"[^\W\d_]+\s+[^\W\d_]", re.compile)  # two words, a blank between: a cut leaves at most the start of one


def mark_hint(text: str, start: int, end: int | None = None) -> bool:
    """What every cut mark holds is in text[start:end]: "..", "…", "trunc" or "cut" in any case
    (most lines hold none). Four substring tests: a third of the time of one regex over the span."""
    span = text[max(start, 0) : end]
    if ".." in span or "\u2026" in span:
        return True
    span = span.lower()
    return "trunc" in span or "cut" in span


def cut_end(text: str) -> int:
    """Where the line ends less what a paste adds after a cut (a closing quote, CJK prose,
    blanks, the mark a viewer leaves: "…", "[truncated]"): where a message cut there ends; 0
    when that line does not end open (OPEN_END, or a number cut at its point: "usage: 97.")."""
    end = len(text)
    last = text[-1:]
    if last in CLOSED_END and (last not in MARK_CLOSERS and text[-2:-1].isalnum() or not mark_hint(text, end - MARK_SPAN)):
        # (a metrics line: "...hit rate: 75.7%"; a cut mark ends the text but for \W, and a
        # letter or digit right before that last character leaves no room for one)
        return 0
    while end and (text[end - 1].isspace() or not text[end - 1].isascii() or text[end - 1] in QUOTES
                   or text[end - 1] in "?!" and not text[:end - 1].isascii()):  # a question in the prose ("하나요?")
        end -= 1
    mark = cut_mark(text, end) if end and not text[end - 1].isalnum() else None
    if mark:
        end = mark.start()
    last = text[end - 1 : end]
    return end if last and (last.isalnum() or last in OPEN_END or last == "." and text[end - 2 : end - 1].isdigit()) else 0


def cut_mark(text: str, end: int) -> Any:
    """The cut mark text[:end] ends in, if any (a metrics line ends in '%': no regex for it)."""
    start = max(0, end - MARK_SPAN)
    if not mark_hint(text, start, end):
        return None
    return CUT_MARK.search(text, start, end)


def number_cut_at(text: str, end: int) -> bool:
    """A number ends at `end` and the line's cut mark follows it, spaces or a separator between
    or not ("limit of 4…", "from 0.…", "size: 485,…", "has 1 [truncated]"): its digits so far
    may not be all of it."""
    if text[end : end + 1] not in MARK_STARTS:
        return False  # (nearly every match: it ends the line or goes on with its message)
    marked = cut_mark(text, len(text)) is not None and CUT_MARK.match(text, end) is not None \
        or INNER_MARK.match(text, end) is not None  # the writer typed on after the mark
    return marked and text[:end].rstrip(" .,")[-1:].isdigit()


def without_cut_value(match: Any, groups: dict[str, str | None]) -> dict[str, str | None]:
    """The match ends where the line was cut (a mark follows): a value that runs up to the
    cut has lost its further digits ("exceeds limit of 4…"), so it is not read."""
    text, end = match.string, match.end()
    return {name: None if value is not None and not text[match.end(name) : end].strip(" .,") else value
            for name, value in groups.items()}


def drop_cut_value(found: LooseMatch, window: Window) -> None:
    """A value that runs up to where the line was cut (a mark follows: "limit of 4…") has lost
    its further digits: it is not read."""
    rest, _ = window.rest_of_line(found.end)
    if (TRUNCATED.fullmatch(rest) or not rest) and window.ends_in_cut_mark(found.end, after_number=True):
        text = window.text()
        kept = [(name, span) for name, span in zip(found.fields, found.value_spans, strict=True)
                if text[span[1] : found.end].strip(" .,")]
        found.fields = {name: found.fields[name] for name, _ in kept}
        found.value_spans = [span for _, span in kept]


def drop_prose_values(found: LooseMatch, window: Window) -> None:
    """A value read after a word in another script (past the head) is the writer's, not the
    message's: vLLM prints its messages in ASCII ("..., got 我用的是 2 张 A100")."""
    # a note in brackets is the writer's aside inside the message ("usage（实测）：98.6"), not its end
    span = NOTE.sub(lambda note: "_" * len(note.group()), window.text()[found.head_end : found.end])
    prose = PROSE_WORD.search(span)
    if prose:
        stop = found.head_end + prose.start()
        name, (low, high) = (list(found.fields)[-1], found.value_spans[-1]) if found.fields else ("", (0, 0))
        if low < stop < high == found.end and not found.fields[name][:1].isdigit():
            # the last value, of words, ran on into the writer's words: a word value takes any
            # script's letters, but vLLM's are ASCII ("max_position_embeddings。请问" read whole)
            found.fields[name] = window.text()[low:stop]
            found.value_spans[-1], found.end = (low, stop), stop
        kept = [(name, value_span) for name, value_span in zip(found.fields, found.value_spans, strict=True)
                if value_span[1] <= stop]
        found.fields = {name: found.fields[name] for name, _ in kept}
        found.value_spans = [value_span for _, value_span in kept]


def before_mark(text: str) -> str:
    """The line up to a viewer's cut mark the writer typed on after ("1721 [truncated] and I
    have 2 GPUs"): the message ends at the mark."""
    if "\u2026" not in text and "..." not in text and "runcated" not in text and "RUNCATED" not in text:
        return text
    mark = INNER_MARK.search(text)
    return text[: mark.end()] if mark else text


def cut_inside(found: LooseMatch, window: Window, pattern: LoosePattern, rest: str) -> bool:
    """The text ends inside the message: what follows the match on its line is the start of
    the message's next words or number (up to prose in another script after it, or the mark a
    viewer leaves where it cut), and no line below goes on with it."""
    ascii_part = ASCII_RUN.match(rest).group(0)
    if any(c.isascii() and c.isalnum() for c in rest[len(ascii_part):]):
        return False
    marked = TRUNCATED.search(ascii_part)
    cut = ascii_part[: marked.start()] if marked else ascii_part
    if not cut and (marked or window.ends_in_cut_mark(found.end)):
        return True
    if not cut or found.before_gap or not window.ends_text(found.end):
        # a line below goes on with it (wrapped there, not cut); or the rest would fall in the
        # clauses the pattern skips, which take any text: _stops_as_pasted weighs those
        return False
    text, end = window.text(), found.end + len(cut)
    # the same cut with text no message holds: a piece that takes any text (a gap, other words)
    # read it, not the message's own words (a partial match names none of the groups it left open)
    masked = text[: found.end] + NO_TEXT * (end - found.end)
    try:
        match = pattern.cut_at(text, found.start, end, MATCH_TIMEOUT, found.value_spans)
        free = match is not None and pattern.cut_at(masked, found.start, end, MATCH_TIMEOUT, found.value_spans) is not None
    except TimeoutError:
        return False
    return match is not None and not free and not tight_over_blank(match, pattern, window, found)


def tight_over_blank(match: Any, pattern: LoosePattern, window: Window, found: LooseMatch) -> bool:
    """A value that takes no blank ("\\S+", "[\\w:]+", a number), read by cut_at() past the
    reading's own values, spans one in the text as read: the loose form, blanks gone, read it
    on over the writer's words."""
    shift = sum(len(HELD) - (high - low) for low, high in found.value_spans)  # the placeholders cut_at() held them by
    return any(match.start(name) >= found.end + shift and window.blank_in(match.start(name) - shift, match.end(name) - shift) is not None
               for name in pattern.tight if match.group(name) is not None)


def writer_after(found: LooseMatch, window: Window, target: Target) -> bool:
    """What follows a reading cut short on its line is the writer's, not the rest of vLLM's
    message: with no value of the message read past its head, words in another script after
    it ("Initial free memory 为什么") or a sentence the message does not start there ("Free
    memory on device. Why"); and, values read or not, two words or more (any case, with or
    without punctuation) inside the message's sentence where its own words do not go on
    ("Waiting: 3 reqs, Is that bad" is no cut inside a skipped clause's name, "Preemp" may
    be). A reading with all its numbers only lost its closing words: another closing
    sentence is a paraphrase (stops_as_pasted weighs it); one with values read past its head
    and cut where a sentence ends ("(12.50 GiB). Why?") keeps them."""
    if found.complete or found.numbers_read:
        return False
    head_only = not any(start >= found.head_end for start, _ in found.value_spans)
    after_head = window.unread(found.head_end)
    prose = PROSE_AFTER.search(after_head)
    if head_only and prose and PROSE_WORD.search(after_head, prose.start()):
        return True
    unread = window.unread(found.end)
    prose = PROSE_AFTER.search(unread)
    unread = unread[: prose.start()] if prose else unread
    if cut_mark(unread.rstrip(), len(unread.rstrip())):
        return False  # a viewer cut the message there: the words before its mark are the message's
    if unread[:1].isalnum() and window.after_sentence_end(found.end):  # the writer's next sentence, or the message's
        return head_only and not reads_as_printed(found, window, target)
    if not WORDS.search(CLAUSE_BREAK.split(unread)[-1]):
        return False
    end, pattern = found.end + len(normalise(unread)), target.loose_form()
    if pattern is None:
        return False
    try:
        match = pattern.cut_at(window.text(), found.start, end, MATCH_TIMEOUT, found.value_spans)
    except TimeoutError:
        return True
    return match is None or tight_over_blank(match, pattern, window, found)


def reads_as_printed(found: LooseMatch, window: Window, target: Target) -> bool:
    """The exact pattern reads the text as read, from the reading's start to its line's end,
    and wants more (a message cut short as vLLM printed it)."""
    first, last = window.rows_of(found.start, found.end)
    text = window.original(first, last, found.start).rstrip()
    try:
        return reads_on(target.pattern.compiled.search(text, partial=True, timeout=MATCH_TIMEOUT), text)
    except TimeoutError:
        return False


def cut_as_printed(found: LooseMatch, window: Window, target: Target) -> bool:
    """The text ends inside the message as vLLM prints it: where the loose form cannot tell a
    cut from prose written after a message (inside the clauses a pattern skips, right after a
    sentence's dot, inside words a paraphrase may replace), the exact pattern reads the text
    as printed up to the cut and wants more. Only where the text really ends: at a viewer's
    mark, or, with none, at another record, a blank line or the input's end, and then not in
    a clause that takes any text (".*?": prose written after the head reads as well there).
    A question or prose in another script after where the loose form stopped is the writer's."""
    first, last = window.rows_of(found.start, found.end)
    whole = window.original(first, last, found.start)
    unread = window.unread(found.end)
    read = whole[: len(whole) - len(unread)]
    prose = PROSE_AFTER.search(unread)  # the writer's words in another script after the cut
    if prose and any(c.isascii() and c.isalnum() for c in unread[prose.start() :]):
        return False
    unread = unread[: prose.start() if prose else len(unread)].rstrip()
    mark = cut_mark(unread, len(unread))
    unread = unread[: mark.start()].rstrip() if mark else unread
    if any(c in "?!" for c in unread) or not mark and not window.ends_text(found.end):
        return False
    search = functools.partial(target.pattern.compiled.search, partial=True, timeout=MATCH_TIMEOUT)
    try:
        if not reads_on(search(read + unread), read) or not mark and reads_on(search(read + NO_TEXT), read):
            return False
    except TimeoutError:
        return False
    return True


def reads_on(match: Any, text: str) -> bool:
    """The exact pattern read the text from its head to its end and wants more."""
    return match is not None and match.partial and not text[: match.start()].strip(QUOTES + " ")
