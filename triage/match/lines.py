"""A candidate line and its neighbours in the buffer that holds them: read lazily, joined the ways
a wrap may have cut them, and copied out where they lie at a chunk's edge."""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Callable

from triage.input.records import LineParts, decode, holds_byte_of, join_variants, parse_line
from triage.match.cut import cut_mark
from triage.match.targets import Selection, Target
from triage.model import Event

CONTEXT_LINES = 2  # a message may continue over this many lines before or after its anchor

# A line that starts like this is a record of its own, not the rest of a wrapped message.
NEW_RECORD = re.compile(rb"(?:\x1b\[[\d;]*m)*(?:\([^)\n]{1,80}\) )?(?:\x1b\[[\d;]*m)*(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\b")

# Bytes that decoding a line removes or rewrites (records.py), which may join raw text into an
# anchor: escapes, ANSI, CR, NUL and the other control characters, a JSON log record. The C1
# controls' UTF-8 lead byte alone stands for them (a line with another U+0080-U+00BF character
# in it only tries more patterns).
REWRITTEN = bytes([*b"\\\x1b\r{", *range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F, 0xC2])
MAX_JOIN_LINE = 16 * 1024  # a longer neighbour (a request-log line) is never part of a wrapped message

# The paste-tolerant second try (triage.match.loose): lines before a candidate it joins (a
# head a few lines above the anchor), and the text after it, in characters of the lines read
# (newlines counted), not in lines: a message is read whole at any wrap width (a 330-character
# message hard-wrapped at 40 columns spans nine lines), up to another record or a prompt.
LOOSE_BACK = 4
LOOSE_TEXT = 2400

# A logger record wrapped over lines (record_facts): how far its lines are read.
RECORD_BACK = 4  # a fact's anchor lies this many lines below its record's first line, at most
RECORD_LINES = 64
RECORD_TEXT = MAX_JOIN_LINE
MIN_WRAP = 40  # a shorter line ends its record: a hard or hand wrap fills its lines
MAX_WRAP = 320  # a wider line was wrapped by no terminal or page: it is its record whole
MIXED_SEAMS = 3  # a record wrapped over more lines is joined one way at every seam (2^seams joins)
MAX_LEAD = 8  # a viewer's indentation of a wrap's pieces, at most
HEAD_ROWS = 4  # the rows of a wrapped request-log line its cut marker is looked for in
MAX_QUOTED_PREFIXES = 2  # rows of a wrapped prompt that start with a logger's prefix it quotes, at most
WRAP_SLACK = 24  # a wrapped record's inner lines are this much narrower than its first, at most

WORD_TAIL, WORD_HEAD = re.compile(r"[A-Za-z_]+$"), re.compile(r"[A-Za-z_]+")  # a word's pieces at a seam

# A process tag or logger prefix the wrap cut ("(APIServer p" / "id=1) INFO ...", "INFO 06-02 21:05:09
# [sta" / "rtup.py:38] vLLM server version ..."): its record starts on this line all the same.
_LEVEL_WORDS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_CUT_LEVEL = "|".join(sorted({word[:n] for word in _LEVEL_WORDS for n in range(2, len(word))}, key=len, reverse=True))
CUT_LOGGER_PREFIX = re.compile(
    r"(?=.)(?:\([A-Za-z][\w.-]*(?: [a-z]*(?:=[\w.]*,?)?)*$|\([^()]{0,120}\) ?)?"
    rf"(?:(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)(?: [\d-]*(?: [\d:.]*(?: \[?[^\]\s]*)?)?)?|{_CUT_LEVEL})?$"
)

# A Python traceback or exception line starts a record of its own, prefix or none.
EXCEPTION_HEAD = re.compile(r"Traceback \(most recent call last\):|[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)(?::|$)")


def glue(before: str, after: str) -> str:
    """What a wrap at a space dropped between two lines of a record: the space, unless the lines
    already keep it or the wrap cut a number ("131," / "072", "0." / "92")."""
    if before[-1:].isspace() or not before or not after:
        return ""
    if (before[-1].isdigit() or before[-1] in ".,") and (after[0].isdigit() or after[0] in ".,") and (
            before[-1].isdigit() or after[0].isdigit()):
        return ""
    return " "


def worded_join(texts: list[str], words: frozenset[str]) -> str:
    """A record's lines joined with glue(), but with none where the lines' ends around a seam
    make a word the patterns print ("te" / "nsor_parallel_size=2"): a record of more seams than
    mixed_seams() tries, cut inside words at some and at dropped spaces at others."""
    joined = texts[0]
    for before, after in zip(texts, texts[1:], strict=False):
        tail, head = WORD_TAIL.search(before), WORD_HEAD.match(after)
        inside = tail is not None and head is not None and tail.group() + head.group() in words
        joined += ("" if inside else glue(before, after)) + after
    return joined


def mixed_seams(texts: list[str]) -> list[str]:
    """A short record's lines joined with a space at some seams and none at others: one wrap cut
    a word ("Ch" / "unked"), another came at a space it dropped ("with" / "max_num_..."). Every
    such join of up to MIXED_SEAMS seams, less the all-or-none ones the other variants are."""
    seams = len(texts) - 1
    if not 2 <= seams <= MIXED_SEAMS:
        return []
    joins = []
    for spaces in itertools.product(("", " "), repeat=seams):
        if len(set(spaces)) > 1:
            joins.append(texts[0] + "".join(space + after for space, after in zip(spaces, texts[1:], strict=True)))
    return joins


def cut_prefix_joined(texts: list[str]) -> tuple[LineParts, list[str]]:
    """A record's first two lines joined where the wrap cut its logger prefix, that prefix read
    off (the cut may have dropped the space after the time): its parts, and its lines so."""
    for glue in ("", " "):
        parts = parse_line((texts[0] + glue + texts[1]).encode())
        if parts.level is not None:
            return parts, [parts.text, *texts[2:]]
    return LineParts(texts[0]), texts


def joins(texts: list[str], candidate: int) -> list[tuple[str, tuple[int, int]]]:
    """The ways the lines may join, each with where the text of texts[candidate] is in it (its
    blanks at a seam may be gone: a joined line's text is the variant's end, less its leading
    blanks at most; the one before it may lose its trailing blanks)."""
    joined = [(texts[0], (0, len(texts[0])))]
    for index, text in enumerate(texts[1:], 1):
        grown = []
        for head, (start, end) in joined:
            for variant in join_variants(head, text):
                seam = len(variant) - len(text.lstrip())
                grown.append((variant, (seam, len(variant)) if index == candidate else (start, min(end, seam))))
        joined = grown
    return joined


def around(data: bytes | bytearray, line_start: int, end: int, history: History, loose: bool = False,
           after_size: int = 0) -> tuple[bytes, int]:
    """A small buffer with the candidate line whole and up to CONTEXT_LINES lines on either
    side within data[:end] (before it, from the earlier chunks when data holds fewer), and
    the line's offset in it: for a line near a chunk's edge, whose neighbours the next
    chunk or the last one holds. loose: the candidate has a second try, whose window takes
    LOOSE_BACK lines before it and LOOSE_TEXT bytes of lines after it from data (a paste's
    last lines are such candidates: its whole message is above them). after_size: as many
    bytes of lines after it at least (a wrapped record that runs on to the chunk's end).

    A neighbour longer than MAX_JOIN_LINE is never part of a wrapped message, so only its
    first MAX_JOIN_LINE + 1 bytes are copied: with request logging on, copying whole
    neighbours at every seam was a copy of much of the input.
    """
    line_end = data.find(b"\n", line_start, end)
    line_end = end if line_end < 0 else line_end + 1
    back = LOOSE_BACK if loose else CONTEXT_LINES
    before = lines_before(data, line_start, back)
    if len(before) < back:
        before = history.lines_before(back - len(before)) + before
    head = b"".join(before)
    after = b"".join(lines_after(data, line_end, CONTEXT_LINES, end, max(LOOSE_TEXT if loose else 0, after_size)))
    return head + data[line_start:line_end] + after, len(head)


def lines_before(buffer: bytes | bytearray, end: int, count: int) -> list[bytes]:
    """Up to `count` whole lines of the buffer that end at `end`, oldest first, long ones clipped."""
    lines: list[bytes] = []
    while end > 0 and len(lines) < count:
        start = buffer.rfind(b"\n", 0, end - 1) + 1
        lines.append(clipped(buffer, start, end))
        end = start
    lines.reverse()
    return lines


def lines_after(buffer: bytes | bytearray, start: int, count: int, limit: int, size: int = 0) -> list[bytes]:
    """Up to `count` lines of buffer[:limit] from `start` on, long ones clipped; size: as many
    more as begin within that many bytes of `start`."""
    lines: list[bytes] = []
    first = start
    while start < limit and (len(lines) < count or start - first < size):
        end = buffer.find(b"\n", start, limit)
        end = limit if end < 0 else end + 1
        lines.append(clipped(buffer, start, end))
        start = end
    return lines


def clipped(buffer: bytes | bytearray, start: int, end: int) -> bytes:
    """buffer[start:end], one line; cut to MAX_JOIN_LINE + 1 bytes (still too long to join) when longer."""
    newline = b"\n" if buffer[end - 1 : end] == b"\n" else b""
    if end - start - len(newline) > MAX_JOIN_LINE:
        return bytes(buffer[start : start + MAX_JOIN_LINE + 1]) + newline
    return bytes(buffer[start:end])


def start_of_last_lines(buffer: bytes | bytearray, count: int, limit: int) -> int:
    """Offset where the last `count` lines of buffer[:limit] begin (a final partial line counts)."""
    end = limit
    if buffer[limit - 1 : limit] == b"\n":
        end -= 1
    for _ in range(count):
        cut = buffer.rfind(b"\n", 0, end)
        if cut < 0:
            return 0
        end = cut
    return end + 1 if end < limit else limit


def end_of_first_lines(buffer: bytes | bytearray, count: int, limit: int) -> int:
    """Offset just past the first `count` lines of buffer[:limit]."""
    end = 0
    for _ in range(count):
        cut = buffer.find(b"\n", end, limit)
        if cut < 0:
            return limit
        end = cut + 1
    return end


class History:
    """The last LOOSE_BACK lines read (copied, long ones clipped): the reader reuses its buffer.
    (A record's first line may lie that far above a candidate at the next chunk's start.)"""

    def __init__(self) -> None:
        self.tail: list[bytes] = []

    def add(self, data: bytes | bytearray, end: int) -> None:
        lines = lines_before(data, end, LOOSE_BACK)
        if len(lines) < LOOSE_BACK:  # a chunk of fewer lines: the older ones still count
            lines = self.tail[-(LOOSE_BACK - len(lines)) :] + lines
        self.tail = lines

    def lines_before(self, count: int) -> list[bytes]:
        """The last `count` lines read (fewer at the start of the input)."""
        return self.tail[-count:] if count > 0 else []


# How a request-log line of vLLM ends when it is whole: its last fields ("..., lora_request: None.").
REQUEST_LOG_TAIL = 200
REQUEST_LOG_END = re.compile(
    rb"(?:lora_request|prompt_adapter_request|prompt_token_ids|prompt token ids): [^\n]{0,%d}\.\r?$" % REQUEST_LOG_TAIL)


def columns(raw: bytes | bytearray) -> int:
    """The columns a line takes on a terminal: its decoded characters, a wide (CJK) one two."""
    text = decode(raw)
    if text.isascii():
        return len(text)
    return len(text) + sum(unicodedata.east_asian_width(char) in "WF" for char in text)


def _lead(raw: bytes | bytearray) -> int:
    """The blanks a line starts with, up to a viewer's indentation of a wrap's pieces."""
    return min(len(raw) - len(raw.lstrip(b" \t")), MAX_LEAD)


def _fills(wide: int, lead: int, width: int) -> bool:
    """A line `wide` columns wide, `lead` of them blanks before its text, is a row a wrap at
    `width` filled (a viewer may have indented it; a wide character that did not fit the last
    column leaves it one short)."""
    return width - 1 <= wide and wide - lead <= width + 1


def _closed(data: bytes | bytearray, start: int, end: int) -> bool:
    """The rows data[start:end] end with vLLM's closing fields of a request-log line."""
    rows = bytes(data[max(start, end - 2 * REQUEST_LOG_TAIL) : end]).splitlines()
    joins = b"".join(rows), b"".join(row.lstrip() for row in rows)  # (a blank at a seam may be the text's own)
    return any(REQUEST_LOG_END.search(joined) for joined in joins)


def wrapped_end(data: bytes | bytearray, start: int, end: int, limit: int, records: bool = False) -> int:
    """Where the request-log line data[start:end] ends with the pieces a terminal's hard wrap
    moved onto the lines below it: a wrap fills every row to the first one's width but the
    last. A row that starts with a logger's prefix is the next record, unless the row above
    it was filled and vLLM's closing fields have not come yet (the prompt quotes a log line,
    and the wrap put its prefix at a row's start; a few such rows at most). The prompt on those
    rows is never a server event. end itself: the line is whole (vLLM's closing fields end it,
    or it is wider than a terminal). records: a paste from a terminal, where rows may start
    with a prefix the prompt quotes; without, a row with a logger's prefix always starts the
    next record (a server's own log file, which no terminal wrapped)."""
    if end >= limit or end - start > 4 * MAX_WRAP or REQUEST_LOG_END.search(data, start, end):
        return end
    width = columns(data[start:end])
    if not MIN_WRAP <= width <= MAX_WRAP:
        return end
    quoted = 0
    while end < limit:
        piece_start = end + 1
        piece_end = data.find(b"\n", piece_start, limit)
        piece_end = limit if piece_end < 0 else piece_end
        prefixed = NEW_RECORD.match(data, piece_start, piece_end) is not None
        if prefixed:
            quoted += 1
            if not records or quoted > MAX_QUOTED_PREFIXES or _closed(data, start, end):
                break
        raw = data[piece_start:piece_end]
        piece, lead = columns(raw), _lead(raw)
        filled = _fills(piece, lead, width)
        if not filled and (prefixed or piece - lead > width + 1 or not raw.strip()
                           or EXCEPTION_HEAD.match(decode(raw).lstrip())):
            break  # a blank line, or a line of its own below a whole request line (a client's error)
        end = piece_end
        if not filled:
            break  # the last row
        width = max(width, piece - lead)
    return end


def _head_end(start: int, end: int) -> int:
    """Where the first HEAD_ROWS rows of a wrapped record, the first of them data[start:end],
    end at most (each row as wide as the first, and indented): where its marker lies."""
    return start + HEAD_ROWS * (end - start + 1 + MAX_LEAD)


def _may_hold(data: bytes | bytearray, start: int, end: int, limit: int, markers: list[bytes]) -> bool:
    """A marker is in the line data[start:end] and the next few joined as they come (a quick
    test before a wrap's rows are read)."""
    head = bytes(data[start : min(limit, _head_end(start, end))])
    joined = b"".join(row.strip() for row in head.splitlines())  # (a blank at a seam may be the text's own)
    return any(all(word in joined for word in marker.split()) for marker in markers)


def cut_request_end(data: bytes | bytearray, start: int, end: int, limit: int, markers: list[bytes],
                    records: bool = False) -> int | None:
    """Where the hard-wrapped request-log record that begins with the line data[start:end] ends,
    when the wrap cut its marker ("... [logger.py:41] R" / "eceived request ..."); None: the line
    begins no such record. records: as for wrapped_end."""
    if not NEW_RECORD.match(data, start, end) or not _may_hold(data, start, end, limit, markers):
        return None
    stop = wrapped_end(data, start, end, limit, records)
    if stop == end:
        return None
    pieces = bytes(data[start : min(stop, _head_end(start, end))]).splitlines()
    lead = _lead(pieces[1])  # (or the text's own blank, where a piece starts with one)
    heads = b"".join(pieces), b"".join([pieces[0], *(piece[lead:] for piece in pieces[1:])])
    # (the record's message starts with the marker: another record's rows the wrap ran on into do not count)
    texts = [parse_line(head).text.lstrip() for head in heads]
    return stop if any(text.startswith(marker.decode()) for marker in markers for text in texts) else None


def wrapped_request_start(data: bytes | bytearray, start: int, end: int, limit: int, markers: list[bytes],
                          records: bool = False) -> int | None:
    """The start of the hard-wrapped request-log record whose rows include the line
    data[start:end], found back over the rows above it that the wrap filled to one width;
    None: the line is no such row. records: a line with a logger's prefix may be a row (one
    that fills the width, as the rest of the prompt's rows above it)."""
    if start == 0 or not records and NEW_RECORD.match(data, start, end):
        return None
    first = data.rfind(b"\n", 0, start - 1) + 1
    if not MIN_WRAP <= start - 1 - first <= 4 * MAX_WRAP:
        return None
    above = data[first : start - 1]
    width = columns(above)
    widths = {width, width - _lead(above)}  # (its blanks a viewer's indentation, or the text's own)
    if not MIN_WRAP <= width <= MAX_WRAP or columns(data[start:end]) - _lead(data[start:end]) > width + 1:
        return None
    walked, quoted = 0, 0
    while True:
        if NEW_RECORD.match(data, first, start - 1):
            if cut_request_end(data, first, start - 1, limit, markers, records) is not None:
                return first
            quoted += 1
            if not records or quoted > MAX_QUOTED_PREFIXES:
                return None
        if first == 0 or walked > RECORD_TEXT:
            return None
        start, first = first, data.rfind(b"\n", 0, first - 1) + 1
        walked += start - first
        row = data[first : start - 1]
        wide, lead = columns(row), _lead(row)
        if not any(_fills(wide, lead, each) for each in widths):
            return None


class Lines:
    """A candidate line and its neighbours in the buffer, parsed lazily."""

    def __init__(self, buffer: bytes | bytearray, start: int, end: int, line_no: int, limit: int = -1, more: bool = True):
        self.buffer, self.start, self.end, self.line_no = buffer, start, end, line_no
        self.limit = len(buffer) if limit < 0 else limit  # the buffer's lines end here
        self.more = more  # the input may go on past the buffer's end (False: it ends there)
        self._parsed: dict[int, LineParts | None] = {}
        self._next_may_continue: bool | None = None

    def _bounds(self, offset: int) -> tuple[int, int] | None:
        start, end = self.start, self.end
        for _ in range(abs(offset)):
            if offset < 0:
                if start == 0:
                    return None
                end = start - 1
                start = self.buffer.rfind(b"\n", 0, end) + 1
            else:
                if end >= self.limit:
                    return None
                start = end + 1
                end = self.buffer.find(b"\n", start, self.limit)
                end = self.limit if end < 0 else end
                if start >= self.limit:
                    return None
        return start, end

    def parts(self, offset: int) -> LineParts:
        if offset not in self._parsed:
            bounds = self._bounds(offset)
            if bounds and offset and bounds[1] - bounds[0] > MAX_JOIN_LINE:
                bounds = None  # a request-log line or a prompt: never a wrapped message's other half
            self._parsed[offset] = parse_line(self.buffer[bounds[0] : bounds[1]]) if bounds else None
        parts = self._parsed[offset]
        return parts if parts is not None else LineParts(None)  # type: ignore[arg-type]

    def alone(self, selection: Selection) -> list[Target]:
        """The patterns that may match this line on its own. A pattern needs all its anchors
        in the raw bytes unless decoding rewrites them (escapes, ANSI, CR, NUL, a JSON log
        record): then any of them will do."""
        if len(selection.alone) == len(selection.every) or holds_byte_of(self.buffer[self.start : self.end], REWRITTEN):
            return selection.every  # (the same patterns: a metrics line holds every anchor of its patterns)
        return selection.alone

    def digits_at(self, offset: int) -> Callable[[], bool]:
        """Whether the line at this offset goes on with a digit (its prefixes and indentation
        off): a line with a logger's prefix is a record of its own, whatever it starts with."""
        def goes_on_with_digit() -> bool:
            parts = self.parts(offset)
            return parts.level is None and (parts.text or "").lstrip()[:1].isdigit()
        return goes_on_with_digit

    def record_span(self, skip_markers: list[str], short: bool = False) -> tuple[int, int] | None:
        """The first and last line (offsets) of the logger record the candidate is part of: back to
        the line with the logger's prefix, on to the last line before the next record (a blank line,
        a request-log line, a short line all end one). None: the candidate is in no logger record.
        short: the lines above may be a hand wrap's, of any width a wrap leaves."""
        first = 0
        while not self.starts_record(first, logger=True):
            if first <= -RECORD_BACK or self.starts_record(first) or not self._continues(
                    first - 1, skip_markers, wide=short and 0 < self.width(first - 1) <= MAX_WRAP):
                return None  # (an exception's lines are no logger record)
            first -= 1
        if first and any(marker in self.parts(first).text for marker in skip_markers):
            return None  # a request-log line: the candidate is a wrapped prompt's rest
        last, size = 0, sum(len(self.parts(offset).text) for offset in range(first, 1))
        full = self.width(first) - WRAP_SLACK  # a line this wide was filled by the wrap
        while last - first < RECORD_LINES and size < RECORD_TEXT and self._continues(last, skip_markers,
                                                                                     full if last > first else 0):
            last += 1
            size += len(self.parts(last).text)
        return first, last

    def record_end(self, last: int, skip_markers: list[str]) -> int:
        """The record's last line when the lines after `last` that start no record are taken too,
        whatever their width (a hand wrap: "enabled " / "with ..."), as far as a record is read."""
        end, size = last, 0
        while end - last < RECORD_LINES and size < RECORD_TEXT and self._continues(end, skip_markers, wide=True):
            end += 1
            size += len(self.parts(end).text)
        return end

    def runs_to_end(self, skip_markers: list[str]) -> bool:
        """The candidate's lines run on, none starting another record, to the buffer's end: a
        record wrapped across the chunk's seam may go on in the next chunk."""
        return self._bounds(self.record_end(0, skip_markers) + 1) is None

    def record_variants(self, first: int, last: int, words: frozenset[str] = frozenset()
                        ) -> tuple[LineParts, list[str], list[str]]:
        """The record's first line's parts, and its lines joined the ways the wrap may have cut
        them, likeliest first: with a space where a line's own leading blank was read off
        (more than the other lines have), run together, and with a space at every cut that is not
        inside a number ("len" / "40960"), those mixed, and with none inside the `words` only;
        then its first lines alone, longest first (for a record cut short, only its partial match)."""
        texts = [self.parts(offset).text for offset in range(first, last + 1)]
        own = self._own_spaces(first + 1, last)
        head = self.parts(first)
        if head.level is None and len(texts) > 1:  # its logger prefix goes on on the next line
            outer = head
            head, joined = cut_prefix_joined(texts)
            head.process, head.rank = head.process or outer.process, head.rank or outer.rank
            head.time = head.time or outer.time
            if len(joined) < len(texts):
                texts, own = joined, own[1:]
        glued = texts[0] + "".join((" " if space and not before[-1:].isspace() else "") + after
                                   for before, after, space in zip(texts, texts[1:], own, strict=False))
        spaced = texts[0] + "".join(glue(before, after) + after for before, after in zip(texts, texts[1:], strict=False))
        worded = [worded_join(texts, words)] if words and len(texts) > MIXED_SEAMS + 1 else []
        variants = list(dict.fromkeys(text.lstrip() for text in (glued, "".join(texts), spaced, *mixed_seams(texts),
                                                                 *worded)))
        # where a cut record may end: before the lines that followed the cut (a progress bar)
        cut_at = ["".join(texts[:count]).lstrip() for count in range(len(texts) - 1, 0, -1)]
        return head, variants, cut_at

    def _own_spaces(self, start: int, last: int) -> list[bool | None]:
        """For each continuation line, whether its text began with a blank that reading it
        dropped: more blanks before its text than the fewest any continuation line has (the
        indentation or the prefix's own space). None: not known (a single continuation line)."""
        runs: list[int | None] = []
        for offset in range(start, last + 1):
            bounds, text = self._bounds(offset), self.parts(offset).text
            decoded = decode(self.buffer[bounds[0] : bounds[1]]) if bounds else ""
            before = decoded[: len(decoded) - len(text)] if decoded.endswith(text) else None
            runs.append(None if before is None else len(before) - len(before.rstrip()))
        known = [run for run in runs if run is not None]
        if len(known) < 2:
            return [None] * len(runs)
        lead = min(known)
        return [None if run is None else run > lead for run in runs]

    def _continues(self, offset: int, skip_markers: list[str], full: int = 0, wide: bool = False) -> bool:
        """The line after this one is more of its record: this one is filled as a wrap fills it
        (at least `full` wide: the record's first line's width, less a word a hand wrap moved on),
        and the next one has text, no logger prefix nor another process's tag of its own, and is
        no request-log line. wide: whatever this one's width."""
        following = self._bounds(offset + 1)
        if following is None:
            return False
        width = self.width(offset)
        if not wide and (width < max(MIN_WRAP, full) or width > MAX_WRAP):
            return False
        if NEW_RECORD.match(self.buffer, following[0], following[1]):
            return False
        this, after = self.parts(offset), self.parts(offset + 1)
        if (after.process or after.rank) and (after.process, after.rank) != (this.process, this.rank):
            return False  # another process's line ("[rank1]: Traceback ..." after an untagged record)
        text = after.text
        if not (text and text.strip()) or self.starts_record(offset + 1) or any(m in text for m in skip_markers):
            return False
        return cut_mark(this.text, len(this.text)) is None  # a viewer's mark ends the record: the writer's words follow

    def runs_on(self, event: Event) -> bool:
        """The event's lines run on into another record (a window joined the next record's line)."""
        offsets = range(event.record.line - self.line_no + 1, event.record.end_line - self.line_no + 1)
        return any(self.starts_record(offset) for offset in offsets)

    def width(self, offset: int) -> int:
        """The columns the line takes on a terminal (colour codes take none), 0 past the buffer."""
        bounds = self._bounds(offset)
        return len(decode(self.buffer[bounds[0] : bounds[1]])) if bounds else 0

    def starts_record(self, offset: int, logger: bool = False) -> bool:
        """The line has a logger's prefix, or the first part of one that the wrap cut, or (unless
        `logger`) it is a traceback's or an exception's first line."""
        parts = self.parts(offset)
        text = parts.text
        return parts.level is not None or text is not None and (
            CUT_LOGGER_PREFIX.match(text) is not None or not logger and EXCEPTION_HEAD.match(text) is not None)

    def ends_after(self, offset: int) -> bool:
        """The text ends with the line at this offset: a blank line, another record or the
        input's end follows (not the end of a buffer that holds only some lines of it)."""
        following = self.parts(offset + 1)
        if following.text is None:
            return self._bounds(offset + 1) is not None or not self.more  # a long line is another record
        return not following.text.strip() or following.level is not None

    def is_whole_record(self) -> bool:
        """The line is a logger record of its own, as nearly every line of a server's log is: it
        has a logger's prefix, and the next line starts another record (or the buffer ends)."""
        return self.parts(0).level is not None and not self.next_may_continue()

    def next_may_continue(self) -> bool:
        """There is a next line and it does not start a record of its own."""
        if self._next_may_continue is None:
            start = self.end + 1
            self._next_may_continue = start < self.limit and NEW_RECORD.match(self.buffer, start, self.limit) is None
        return self._next_may_continue

    def context_text(self, skip_markers: list[str]) -> str:
        """The lines around the candidate, less request-log lines (a prompt may name any host)."""
        texts = [self.parts(o).text for o in range(-CONTEXT_LINES, CONTEXT_LINES + 1)]
        return "\n".join(t for t in texts if t and not any(m in t for m in skip_markers))
