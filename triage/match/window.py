"""A record's rows in the loose form (triage.match.loose), with a map back to the text as read.

Every question the paste-tolerant reading asks about the text around a loose match (what
follows it on its row, is there a blank inside a value, does a sentence end before it) is a
slice of the text as read, found through the map from the loose form back to it.
"""

from __future__ import annotations

import bisect
import itertools
import re

from triage.match.cut import cut_mark, number_cut_at
from triage.match.loose import QUOTES, normalise, normalise_mapped
from triage.rules.ruleset import LazyRegex

STRING_PREFIX = LazyRegex(r"^\s*[rRfFbBuU]{1,2}(?=[\"'])", re.compile)  # f"..." in a traceback's source lines
BLANK_INSIDE = LazyRegex(r"\S\s+(?=\S)", re.compile)
SENTENCE_INSIDE = LazyRegex(r"[.?!]\s+(?=\S)", re.compile)
SENTENCE_BEFORE = LazyRegex(r"[.?!]\s+$", re.compile)
SENTENCE_MARK = LazyRegex("[.?!\u3002\uff01\uff1f]", re.compile)
PUNCTUATED = LazyRegex(r"[^\w\s]", re.compile)
PUNCTUATED_BEFORE = LazyRegex(r"[^\w\s]\s*$", re.compile)
RUN_ON = LazyRegex(r"[^\s.?!,;:\-\u2026]\s+$", re.compile)
DROPPED = " \t\r\n" + QUOTES + ".,;:!?\u3002\u3001\uff0c\uff1a\uff1b\uff01\uff1f"  # what the loose form drops after a value
# a dot right after a digit is no sentence's end where the text stops: "as of v0." is cut inside a version
SENTENCE_END = LazyRegex(r"(?:(?<!\d)\.|[!?\u3002])\s*$", re.compile)
# a sentence's end (in quotes too), or a clause's where a paraphrase glues the next one on
SENTENCE_CLOSE = LazyRegex("[.!?\u3002](?=[\\s\"'\u2019\u201d\u300d]|$)|;|\\s(?:--?|[\u2013\u2014])\\s", re.compile)


# A quote a writer opens before a message they quote, and the one that closes it.
QUOTE_PAIRS = {'"': '"', "'": "'", "`": "`", "\u201c": "\u201d", "\u2018": "\u2019", "\u201e": "\u201c", "\u00ab": "\u00bb",
               "\u300c": "\u300d", "\u300e": "\u300f", "\uff02": "\uff02", "\u2039": "\u203a"}
QUOTED_LEAD = 200  # what may stand between a quote the writer opened and vLLM's words (a log header, "ValueError: ")
AFTER_QUOTED = " \t.,;:!?)]\u3002\uff0c\uff09"  # what may stand between a quoted message's last word and its closing quote


def may_continue(text: str) -> bool:
    """The row may be the rest of a wrapped message: one that starts with a CJK word is the
    writer's own prose (a full-width bracket or comma may still be the message's)."""
    first = text.lstrip()[:1]
    return first.isascii() or not first.isalpha()


class Window:
    """Rows of one record (their lines and texts as read), and their loose form with its map.
    ends: the last row ends the text (another record, a blank row or the input's end follows)."""

    def __init__(self, lines: list[int], texts: list[str], ends: bool = True):
        self.lines, self.texts, self.ends = lines, texts, ends
        self.offsets = [0, *itertools.accumulate(len(text) for text in texts)]  # row i is whole[offsets[i]:offsets[i + 1]]
        self.whole = "".join(texts)
        dropped = frozenset(self.offsets[i] + at for i, text in enumerate(texts)
                            for prefix in [STRING_PREFIX.match(text)] if prefix for at in range(prefix.end()))
        self.form, self.origin = normalise_mapped(self.whole, dropped)
        # where each row's loose form starts, and the form's end
        self.row_forms = [bisect.bisect_left(self.origin, offset) for offset in self.offsets[:-1]] + [len(self.form)]
        self._lower: str | None = None

    # --- where a loose offset is --------------------------------------------------------

    def row_of(self, start: int) -> int:
        """The row that holds loose character `start` (past the form: the last row)."""
        return min(bisect.bisect_right(self.row_forms, start) - 1, len(self.texts) - 1)

    def row_ending(self, end: int) -> int:
        """The row a loose span that ends at `end` ends on (the earlier row at a boundary)."""
        return max(0, min(bisect.bisect_left(self.row_forms, end) - 1, len(self.texts) - 1)) if end else 0

    def rows_of(self, start: int, end: int) -> tuple[int, int]:
        """The rows of the loose span start..end."""
        first = self.row_of(start)
        return first, max(first, self.row_ending(end))

    def lines_of(self, start: int, end: int) -> tuple[int, int]:
        first, last = self.rows_of(start, end)
        return self.lines[first], self.lines[last]

    def at(self, row: int, offset: int) -> int:
        """Where on row `row` (its text as read) the loose offset is: the character it came from,
        or the row's end for an offset at or past the row's loose end."""
        if offset >= self.row_forms[row + 1]:
            return len(self.texts[row])
        return self.origin[offset] - self.offsets[row]

    # --- the text ------------------------------------------------------------------------

    def text(self) -> str:
        return self.form

    def may_hold(self, probe: str) -> bool:
        """A piece of the head is in the rows (a cheap test before the regex)."""
        if self._lower is None:
            self._lower = self.form.lower()
        return probe in self._lower

    def rest_of_line(self, end: int) -> tuple[str, bool]:
        """What follows `end` on its row (loose form), and whether that row ends a sentence."""
        row = self.row_ending(end)
        return self.form[end : self.row_forms[row + 1]], bool(SENTENCE_END.search(self.texts[row]))

    def ends_text(self, end: int) -> bool:
        """The row that holds `end` is the last of the text: another record, a blank row or the
        input's end follows it."""
        return self.ends and self.row_ending(end) == len(self.texts) - 1

    def ends_in_cut_mark(self, end: int, after_number: bool = False) -> bool:
        """The row that holds `end` ends in the mark a viewer leaves where it cut ("9.3...":
        the loose form keeps no lone dots); after_number: the mark follows a number."""
        text = self.texts[self.row_ending(end)]
        mark = cut_mark(text, len(text))
        return mark is not None and (not after_number or number_cut_at(text, mark.start()))

    def unread(self, end: int) -> str:
        """The text as read after `end` on its row."""
        row = self.row_ending(end)
        return self.texts[row][self.at(row, end) :]

    def rest_of_sentence(self, end: int) -> str:
        """The loose form of what follows `end` up to the end of its sentence, over the rows
        below: a number there is more of the message, one after it (a JSON error's code, a
        "(parameter=..., value=N)" note) is not."""
        row = self.row_ending(end)
        text = self.texts[row]
        low = self.origin[end - 1] - self.offsets[row] + 1 if end > self.row_forms[row] else 0
        below = list(itertools.takewhile(may_continue, self.texts[row + 1 :]))
        rest = " ".join([text[low:], *below])
        stop = SENTENCE_CLOSE.search(rest)
        return normalise(rest[: stop.start() if stop else len(rest)])

    def _find_in(self, start: int, end: int, pattern: LazyRegex, strip: bool = True) -> int | None:
        """Where (loose form: the offset after it) the pattern is in the text as read of the loose
        span start..end, on one of its rows (strip: less the blanks, quotes and punctuation the
        loose form drops after it; the pattern is then one of a blank)."""
        for row in range(self.row_of(start), len(self.texts)):
            low, high = max(start, self.row_forms[row]), min(end, self.row_forms[row + 1])
            if low >= high:
                if self.row_forms[row] >= end:
                    break
                continue
            text = self.texts[row]
            # (a loose span as printed holds no blank: nearly every value)
            if strip and self.form[low:high] in text:
                continue
            raw_start, raw_end = self.at(row, low), self.at(row, high)
            found = pattern.search(text, raw_start, raw_start + len(text[raw_start:raw_end].rstrip(DROPPED if strip else "")))
            if found:
                return bisect.bisect_left(self.origin, self.offsets[row] + found.start() + 1)
        return None

    def blank_in(self, start: int, end: int) -> int | None:
        """Where (loose form) the text as read holds a blank inside the span start..end on one of
        its rows, if it does: a value that takes none read over the writer's words there
        ("device and I do not know why" is "deviceandIdonotknowwhy"). A row's seam is no
        blank (a wrap mid-value)."""
        return self._find_in(start, end, BLANK_INSIDE)

    def sentence_end_in(self, start: int, end: int) -> bool:
        """The text as read ends a sentence inside the span start..end: other words there that
        a paraphrase may put between two values are the writer's next sentence ("max_length=.
        I have 7 GPUs")."""
        return self._find_in(start, end, SENTENCE_INSIDE) is not None

    def punctuated(self, start: int, end: int) -> bool:
        """The text as read holds punctuation or a bracket inside the loose span start..end, or
        right before it (what the loose form drops there)."""
        row = self.row_ending(start)  # (at a row's start: what ends the row above)
        before = self.texts[row][: self.at(row, start)]
        return PUNCTUATED_BEFORE.search(before) is not None or self._find_in(start, end, PUNCTUATED, strip=False) is not None

    def as_read(self, start: int, end: int) -> str | None:
        """The text as read of the loose span start..end, blanks kept, when it is on one row."""
        first, last = self.rows_of(start, end)
        if first != last:
            return None
        return self.texts[first][self.at(first, start) : self.at(first, end)].rstrip(DROPPED)

    def closed_after(self, end: int) -> bool:
        """The text as read has sentence punctuation right after the loose offset `end` on its
        row (among what the loose form drops there): what ends there ends a sentence."""
        row = self.row_ending(end)
        text = self.texts[row]
        raw = self.at(row, end)
        return SENTENCE_MARK.search(text, len(text[:raw].rstrip(DROPPED)), raw) is not None

    def sentence_mark_in(self, start: int, end: int) -> int | None:
        """Where (loose form) the text as read has sentence punctuation inside the span
        start..end: a value of words ends there ("for embedding generation。Please ..."), though
        the loose form, its punctuation gone, reads on."""
        return self._find_in(start, end, SENTENCE_MARK, strip=False)

    def after_sentence_end(self, start: int) -> bool:
        """The text as read ends a sentence right before the loose offset `start` on its row
        (". Why"): vLLM prints no word of a value there, the writer starts a sentence."""
        row = self.row_ending(start)
        return SENTENCE_BEFORE.search(self.texts[row], 0, self.at(row, start)) is not None

    def runs_on(self, end: int) -> bool:
        """Words go on after the loose offset `end` on its row with blanks alone between, no
        punctuation ("... CUDA out of memory and I do not know why"): the same sentence goes on."""
        row = self.row_ending(end)
        raw = self.at(row, end)
        text = self.texts[row]
        return text[raw : raw + 1].isalpha() and RUN_ON.search(text, 0, raw) is not None

    def original(self, first: int, last: int, start: int) -> str:
        """Rows first..last as read, from where the loose offset `start` is on the first."""
        return " ".join([self.texts[first][self.at(first, start) :], *self.texts[first + 1 : last + 1]])

    def quoted(self, start: int, end: int) -> bool:
        """The writer quoted the text start..end (loose form): a quote opens shortly before it (an
        exception's name may stand between) and is not closed before it, and the quote that
        closes it comes right after it (its closing punctuation between): the message they
        pasted ends there, whatever they write after ("I keep getting "..." every time")."""
        if not end:
            return False
        row, last = self.row_ending(start), self.row_ending(end)
        before = self.texts[row][max(0, self.at(row, start) - QUOTED_LEAD) : self.at(row, start)]
        after = self.texts[last][self.origin[end - 1] - self.offsets[last] + 1 :].lstrip(AFTER_QUOTED)
        closing = after[:1]
        for opening, closes in QUOTE_PAIRS.items():
            opened = before.rfind(opening)
            if closes == closing and opened >= 0 and closes not in before[opened + 1 :]:
                return True  # (a quote that opens before it, not closed before the message began)
        return False

    def follows_word(self, start: int) -> bool:
        """A lower-case word stands right before `start` (on its row or the one before): a
        head found there with its first letter in another case is inside another sentence
        ("Possibly too large swap space" is not "Too large swap space ..."), while after a log
        level, a quote or a bracket ("ERROR: this model's ...") it starts the message."""
        row = self.row_ending(start)
        before = " ".join([*self.texts[max(row - 1, 0) : row], self.texts[row][: self.at(row, start)]]).rstrip()
        return before[-1:].isascii() and before[-1:].islower()
