"""The lines around a candidate in the loose form (triage.match.loose), read as far as the second
try needs them."""

from __future__ import annotations

import itertools
import re

from triage.match.cut import before_mark, cut_mark, number_cut_at
from triage.match.lines import LOOSE_BACK, LOOSE_TEXT, Lines
from triage.match.loose import QUOTES, normalise
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


def may_continue(text: str) -> bool:
    """The line may be the rest of a wrapped message: one that starts with a CJK word is the
    writer's own prose (a full-width bracket or comma may still be the message's)."""
    first = text.lstrip()[:1]
    return first.isascii() or not first.isalpha()


class LooseWindow:
    """The lines around a candidate, in the loose form, read as far as they are needed."""

    def __init__(self, lines: Lines, skip_markers: list[str]):
        self.lines, self.skip_markers = lines, skip_markers
        self.first = 0
        self.texts: list[str] = []  # decoded messages, from line offset self.first on
        self.forms: list[str] = []  # their loose forms
        self.ahead = 0  # the last offset read
        self._lower: str | None = None
        self._text: str | None = None
        start = self._read(0)
        if start is None:
            return
        for offset in range(-1, -LOOSE_BACK - 1, -1):
            if self._read(offset, front=True) is None:
                break
        for offset in range(1, 3):  # the head is within a few lines: enough for may_hold
            if self._read(offset) is None:
                break

    def _read(self, offset: int, front: bool = False) -> str | None:
        parts = self.lines.parts(offset)
        text = parts.text
        if text is None or any(marker in text for marker in self.skip_markers):
            return None  # past the input, a long line, or a request-log line (a prompt): not joined
        text = before_mark(text)
        # a logger's prefix starts another record: a message is not read on into it, nor back
        # from its own first line into the one before
        if parts.level is not None and not front and offset > 0 or front and self.lines.parts(offset + 1).level:
            return None
        if offset > 0 and not front and not may_continue(text):  # the writer's own prose below a cut message
            return None
        # a line that ends in a viewer's cut mark ends its message: the line below is not its rest
        # (the writer's words after a cut paste: "P...", "I have 2 GPUs with 80 GB")
        above = self.texts[-1] if not front and self.texts else text if front else ""
        if above and (offset > 0 or front) and cut_mark(above, len(above)) is not None:
            return None
        form = normalise(STRING_PREFIX.sub("", text))
        if front:
            self.texts.insert(0, text)
            self.forms.insert(0, form)
            self.first = offset
        else:
            self.texts.append(text)
            self.forms.append(form)
            self.ahead = offset
        self._lower = self._text = None
        return form

    def may_hold(self, probe: str) -> bool:
        """A piece of the head is in the lines read so far (a cheap test before the regex)."""
        if self._lower is None:
            self._lower = "".join(self.forms).lower()
        return probe in self._lower

    def text(self) -> str:
        if self._text is None:
            if self.texts and self.ahead >= 0:
                size = sum(len(text) + 1 for text in self.texts)
                while size < LOOSE_TEXT and self._read(self.ahead + 1) is not None:
                    size += len(self.texts[-1]) + 1
            self._text = "".join(self.forms)
        return self._text

    def rest_of_line(self, end: int) -> tuple[str, bool]:
        """What follows `end` on its line (loose form), and whether that line ends a sentence."""
        position = 0
        for index, form in enumerate(self.forms):
            if end <= position + len(form):
                return form[end - position :], bool(SENTENCE_END.search(self.texts[index]))
            position += len(form)
        return "", False

    def ends_text(self, end: int) -> bool:
        """The line that holds `end` is the last of the text: another record, a blank line or the
        input's end follows it."""
        return self.lines.ends_after(self.lines_of(end, end)[1])

    def ends_in_cut_mark(self, end: int, after_number: bool = False) -> bool:
        """The line that holds `end` ends in the mark a viewer leaves where it cut ("9.3...":
        the loose form keeps no lone dots); after_number: the mark follows a number."""
        text = self.texts[self.lines_of(end, end)[1] - self.first]
        mark = cut_mark(text, len(text))
        return mark is not None and (not after_number or number_cut_at(text, mark.start()))

    def unread(self, end: int) -> str:
        """The text as read after `end` on its line."""
        index = self.lines_of(end, end)[1] - self.first
        return self.texts[index][self._raw_start(index, end) :]

    def rest_of_sentence(self, end: int) -> str:
        """The loose form of what follows `end` up to the end of its sentence, over the lines
        below: a number there is more of the message, one after it (a JSON error's code, a
        "(parameter=..., value=N)" note) is not."""
        index = self.lines_of(end, end)[1] - self.first  # at a line's end: the next line
        skip = end - sum(map(len, self.forms[:index]))
        text = self.texts[index]
        low, high = 0, len(text)  # the first offset whose rest is no longer than what follows the match
        while low < high:
            middle = (low + high) // 2
            if len(normalise(STRING_PREFIX.sub("", text[middle:]))) <= len(self.forms[index]) - skip:
                high = middle
            else:
                low = middle + 1
        below = list(itertools.takewhile(may_continue, self.texts[index + 1 :]))
        rest = " ".join([text[low:], *below])
        stop = SENTENCE_CLOSE.search(rest)
        return normalise(rest[: stop.start() if stop else len(rest)])

    def blank_in(self, start: int, end: int) -> int | None:
        """Where (loose form) the text as read holds a blank inside the span start..end on one of
        its lines, if it does: a value that takes none read over the writer's words there
        ("device and I do not know why" is "deviceandIdonotknowwhy"). A line's seam is no
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
        index = self.lines_of(start, start)[0] - self.first
        raw = self._raw_start(index, start)
        before = self.texts[index][:raw]
        return PUNCTUATED_BEFORE.search(before) is not None or self._find_in(start, end, PUNCTUATED, strip=False) is not None

    def as_read(self, start: int, end: int) -> str | None:
        """The text as read of the loose span start..end, blanks kept, when it is on one line."""
        first, last = self.lines_of(start, end)
        if first != last:
            return None
        index, position = first - self.first, sum(map(len, self.forms[: first - self.first]))
        text = self.texts[index]
        raw_end = len(text) if end == position + len(self.forms[index]) else self._raw_start(index, end)
        return text[self._raw_start(index, start) : raw_end].rstrip(DROPPED)

    def closed_after(self, end: int) -> bool:
        """The text as read has sentence punctuation right after the loose offset `end` on its
        line (among what the loose form drops there): what ends there ends a sentence."""
        index = self.lines_of(end, end)[1] - self.first
        text = self.texts[index]
        raw = len(text) if end == sum(map(len, self.forms[: index + 1])) else self._raw_start(index, end)
        return SENTENCE_MARK.search(text, len(text[:raw].rstrip(DROPPED)), raw) is not None

    def sentence_mark_in(self, start: int, end: int) -> int | None:
        """Where (loose form) the text as read has sentence punctuation inside the span
        start..end: a value of words ends there ("for embedding generation。Please ..."), though
        the loose form, its punctuation gone, reads on."""
        return self._find_in(start, end, SENTENCE_MARK, strip=False)

    def after_sentence_end(self, start: int) -> bool:
        """The text as read ends a sentence right before the loose offset `start` on its line
        (". Why"): vLLM prints no word of a value there, the writer starts a sentence."""
        index = self.lines_of(start, start)[0] - self.first
        return SENTENCE_BEFORE.search(self.texts[index], 0, self._raw_start(index, start)) is not None

    def runs_on(self, end: int) -> bool:
        """Words go on after the loose offset `end` on its line with blanks alone between, no
        punctuation ("... CUDA out of memory and I do not know why"): the same sentence goes on."""
        index = self.lines_of(end, end)[1] - self.first
        raw = self._raw_start(index, end)
        return self.texts[index][raw : raw + 1].isalpha() and RUN_ON.search(self.texts[index], 0, raw) is not None

    def _find_in(self, start: int, end: int, pattern: LazyRegex, strip: bool = True) -> int | None:
        """Where (loose form: the offset after it) the pattern is in the text as read of the loose
        span start..end, on one of its lines (strip: less the blanks, quotes and punctuation the
        loose form drops after it; the pattern is then one of a blank)."""
        position = 0
        for index, form in enumerate(self.forms):
            low, high = max(start, position), min(end, position + len(form))
            # (a loose span as printed holds no blank: nearly every value)
            if low < high and not (strip and form[low - position : high - position] in self.texts[index]):
                text = self.texts[index]
                raw_start = self._raw_start(index, low)
                raw_end = len(text) if high == position + len(form) else self._raw_start(index, high)
                found = pattern.search(text, raw_start, raw_start + len(text[raw_start:raw_end].rstrip(DROPPED if strip else "")))
                if found:
                    return position + len(form) - len(normalise(STRING_PREFIX.sub("", text[found.start() + 1 :])))
            position += len(form)
        return None

    def lines_of(self, start: int, end: int) -> tuple[int, int]:
        """The line offsets (relative to the candidate) of a span of text()."""
        first = last = None
        position = 0
        for index, form in enumerate(self.forms):
            if first is None and start < position + len(form):
                first = index
            if end <= position + len(form):
                last = index
                break
            position += len(form)
        first = 0 if first is None else first
        last = len(self.forms) - 1 if last is None else max(last, first)
        return first + self.first, last + self.first

    def original(self, first: int, last: int, start: int) -> str:
        """The lines first..last as read, from where the match starts on the first."""
        texts = self.texts[first - self.first : last - self.first + 1]
        return " ".join([texts[0][self._raw_start(first - self.first, start) :], *texts[1:]])

    def follows_word(self, start: int) -> bool:
        """A lower-case word stands right before `start` (on its line or the one before): a
        head found there with its first letter in another case is inside another sentence
        ("Possibly too large swap space" is not "Too large swap space ..."), while after a log
        level, a quote or a bracket ("ERROR: this model's ...") it starts the message."""
        index = self.lines_of(start, start)[0] - self.first
        before = " ".join([*self.texts[max(index - 1, 0) : index], self.texts[index][: self._raw_start(index, start)]]).rstrip()
        return before[-1:].isascii() and before[-1:].islower()

    def _raw_start(self, index: int, start: int) -> int:
        """Where on line `index` (of texts) the loose-form offset `start` is in the text as read."""
        skip = start - sum(map(len, self.forms[:index]))  # loose-form characters before the match on its line
        wanted = len(self.forms[index]) - skip
        low, high = 0, len(self.texts[index])  # the last offset whose rest still has the whole match in loose form
        while low < high:
            middle = (low + high + 1) // 2
            if len(normalise(STRING_PREFIX.sub("", self.texts[index][middle:]))) >= wanted:
                low = middle
            else:
                high = middle - 1
        return low
