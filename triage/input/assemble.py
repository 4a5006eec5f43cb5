"""Records: the rows of one logical message, decided once, joined, then decoded.

A log is physical rows; a message is a record of one or more of them. A record starts at a
row that begins one by itself (a logger's header, a traceback's line, an exception, a JSON log
record, a blank row's end, another process's tag, the piece of a header a wrap cut) and takes
the rows after it that do not: the pieces a wrap moved on, a traceback frame's source, a
paste's lines of prose. Every prefix a row repeats (a collector's, a process tag) is off each
row before the rows are joined; the join is decoded after (escapes, entities), so damage a
wrap cut in two is read whole; and a map leads from every character of the record back to
its line.

A request-log record (a prompt quoted whole) may have been hard-wrapped by a terminal: its
rows are those the wrap filled, even one that starts with a log header the prompt quotes.

Records are a partition of the rows: walked back from any row, the same record is found as
forward from its start. The reader ends its chunks at a record's first row, so no record is
ever cut by a chunk.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
import unicodedata
from dataclasses import dataclass, field

from triage.input.lineparse import RowHead, clean_row, decode_message, read_head

# Bounds of a record: a headerless stretch longer than this is read in records of this size.
RECORD_LINES = 64
RECORD_TEXT = 16 * 1024
MAX_WALK = 64 * 1024  # a row this far below its record's first row is read in a record of its own from there
MAX_ROW = 16 * 1024  # a longer row (a request-log line, a prompt) is a record of its own, never joined
PREFIX_BYTES = 240  # a row's process tag and vLLM's header lie within this many bytes

# A row that starts like this, in its raw bytes, is a record of its own (a quick test: no decoding).
NEW_RECORD = re.compile(rb"(?:\x1b\[[\d;]*m)*(?:\([^)\n]{1,80}\) )?(?:\x1b\[[\d;]*m)*(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\b")

# Where vLLM's header ends in a row's raw bytes: "... 08-12 10:15:03 [core.py:58] " (or "core.py:58] ").
HEADER_END = re.compile(rb"\d\d:\d\d:\d\d(?:\.\d+)? \[?[^\]\s]+:\d+\] ")

# A process tag or logger prefix the wrap cut ("(APIServer p" / "id=1) INFO ...", "INFO 06-02 21:05:09
# [sta" / "rtup.py:38] vLLM server version ..."): its record starts on this row all the same.
_LEVEL_WORDS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_CUT_LEVEL = "|".join(sorted({word[:n] for word in _LEVEL_WORDS for n in range(2, len(word))}, key=len, reverse=True))
CUT_LOGGER_PREFIX = re.compile(
    r"(?=.)(?:\([A-Z][\w.-]+(?: [a-z]*(?:=[\w.]*,?)?)*$|\([^()]{0,80}?\bpid=\d+[^()]{0,40}\) ?)?"
    rf"(?:(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)(?: [\d-]*(?: [\d:.]*(?: \[?[^\]\s]*)?)?)?|{_CUT_LEVEL})?$"
)
# A Python traceback's rows start records of their own, prefix or none: its header, a frame, a
# chained exception's note, multiprocessing's "Process X:".
TRACEBACK_ROW = re.compile(
    r"Traceback \(most recent call last\):|File \"|During handling of the above exception"
    r"|The above exception was the direct cause|Process [A-Za-z][\w.-]*:\s*$"
)
# The exception a traceback ends with: a record of its own, not the rest of a message above it.
# Python prints it unindented; an indented one is a piece a viewer's wrap moved on.
EXCEPTION_HEAD = re.compile(r"Traceback \(most recent call last\):|[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)(?::|$)")
# Where a viewer, a chat or a tool cut a row: its record ends there, the writer's words follow.
CUT_MARK_END = re.compile(r"(?:\.{3,}|\u2026|[\[(<](?:truncated|cut|\.+|\u2026)[\])>])\W*$", re.IGNORECASE)


@dataclass(slots=True)
class Row:
    """One physical row of the input: its line number, its bytes in the buffer, its prefixes."""

    line: int
    start: int
    end: int  # its newline, or the data's end
    head: RowHead


@dataclass(slots=True)
class LogRecord:
    """The rows of one message joined, then decoded; text's every character maps to a row."""

    rows: list[Row]
    text: str
    head: RowHead  # what the record's first row's prefixes said (a header a wrap cut, mended)
    origin: list[int] | None = None  # text offset -> offset in the joined rows (None: the same)
    starts: list[int] = field(default_factory=lambda: [0])  # where each row's message starts in the joined rows
    skip: bool = False  # a request-log record (a prompt): never read
    wraps: list[int] = field(default_factory=lambda: [0])  # the rows that start a line (the rest a wrap moved on)
    calls: list[int] = field(default_factory=lambda: [0])  # the rows that start a line vLLM logged (or the writer typed)

    @property
    def line(self) -> int:
        return self.rows[0].line

    @property
    def end_line(self) -> int:
        return self.rows[-1].line

    def row_at(self, offset: int) -> int:
        """The index of the row that holds text[offset] (offset at the end: the last row)."""
        if len(self.rows) == 1:
            return 0
        joined = offset if self.origin is None else (self.origin[offset] if offset < len(self.origin) else
                                                      (self.origin[-1] + 1 if self.origin else 0))
        return max(0, bisect.bisect_right(self.starts, joined) - 1)

    def call_at(self, offset: int) -> int:
        """The line vLLM logged (or the writer typed) that holds text[offset]: its first row."""
        row = self.row_at(offset)
        return self.calls[bisect.bisect_right(self.calls, row) - 1]

    def lines(self, start: int, end: int) -> tuple[int, int]:
        """The first and last line of the span text[start:end]."""
        first = self.rows[self.row_at(start)].line
        return first, self.rows[self.row_at(max(start, end - 1))].line

    def bounds(self) -> list[int]:
        """Where each row's text starts in text, and text's end: row i is text[b[i]:b[i + 1]]."""
        if self.origin is None:
            return [*self.starts, len(self.text)]
        return [bisect.bisect_left(self.origin, start) for start in self.starts] + [len(self.text)]

    def line_spans(self) -> list[tuple[int, int]]:
        """Where each line of the record (a row with the rows a terminal's wrap moved it onto)
        is in text."""
        bounds = self.bounds()
        firsts = [*self.wraps, len(self.rows)]
        return [(bounds[first], bounds[after]) for first, after in itertools.pairwise(firsts)]


class Rows:
    """The rows of one chunk's buffer, read as they are asked for (a candidate's and its
    record's: nearly every row of a server's log is never decoded)."""

    def __init__(self, data: bytes | bytearray, end: int, markers: tuple[bytes, ...], floor: int = 0, paste: int = -1):
        self.data, self.end, self.markers = data, end, markers  # markers: of request-log lines (skip markers)
        self.floor = floor  # rows before this offset belong to records already read
        # rows before this offset are a paste's (the input's first bytes): a terminal may have wrapped
        # them, a request-log line's marker too (-1: all of data)
        self.paste = end if paste < 0 else paste
        self._heads: dict[int, RowHead] = {}

    def near_marker(self, start: int, stop: int) -> bool:
        """A request-log line may start in data[start:stop] (a paste's: a wrap cuts its marker
        once at most, and one half of its first word stays whole; past a paste, the marker is
        whole in its row)."""
        data = self.data
        if start >= self.paste:
            return any(data.find(marker, start, stop) >= 0 for marker in self.markers)
        return any(data.find(piece, start, stop) >= 0 for marker in self.markers for piece in _marker_halves(marker))

    def head(self, start: int, stop: int) -> RowHead:
        head = self._heads.get(start)
        if head is None:
            head = read_head(self.data[start:stop])
            if len(self._heads) > 4096:
                self._heads.clear()
            self._heads[start] = head
        return head

    def row_end(self, start: int) -> int:
        stop = self.data.find(b"\n", start, self.end)
        return self.end if stop < 0 else stop

    def before(self, start: int) -> int | None:
        """Where the row before the one at `start` starts (None: none in the buffer)."""
        if start <= 0:
            return None
        return self.data.rfind(b"\n", 0, start - 1) + 1

    def starts_record(self, start: int, stop: int | None = None) -> bool:
        """The row at `start` begins a record of its own (the rows above it considered): it
        begins one by itself (begins()) and is no piece of a request-log line a terminal wrapped."""
        if start <= self.floor:
            return True
        stop = self.row_end(start) if stop is None else stop
        above = self.before(start)
        assert above is not None
        if NEW_RECORD.match(self.data, start, stop) is not None:
            if self._one_call(start, stop, above):
                return False
        else:
            if stop - start > MAX_ROW or start - 1 - above > MAX_WRAP:
                return True  # a row wider than a wrap leaves was wrapped by nothing: the next is another's
            head, previous = self.head(start, stop), self.head(above, start - 1)
            if head.level is not None and same_call(head, previous):
                return False
            if not (begins(head, previous) or self.holds_marker(start, stop) or self._raised(head, previous)):
                return False
        if start >= self.paste:
            return True  # (past a paste: a server's own rows, which no terminal wrapped)
        reach = max(self.floor, start - RECORD_TEXT - 4 * MAX_WRAP)
        if not self.near_marker(reach, start):
            return True  # (no request-log line above it whose wrapped rows it could be)
        return wrapped_request_start(self.data, start, stop, self.end, self.markers, self.floor) is None

    def _one_call(self, start: int, stop: int, above: int) -> bool:
        """The row, which starts with vLLM's header, goes on a message the row above started: a
        message of several lines, which vLLM's formatter prints under its header again on each
        (a traceback logged whole): the same process tag, level, time and [file:line]."""
        header = HEADER_END.search(self.data, start, min(stop, start + PREFIX_BYTES))
        if header is None or self.data[above : start - 1] == self.data[start:stop]:
            return False  # (the same row again: another process's copy, a torchrun rank's)
        size = header.end() - start
        if self.data[above : above + size] != self.data[start : start + size]:
            return False
        return continues_message(self.head(start, stop).message)


    @staticmethod
    def _raised(head: RowHead, previous: RowHead) -> bool:
        """The row is the exception a traceback ends with: unindented, below what a traceback
        prints before it (an indented source line or caret, a frame, or an exception it chains
        from) or below another process's line. Below an unindented row of text (prose, a logged
        message) of its own process it is a piece of a message a wrap moved on ("... torch.Out" /
        "OfMemoryError: CUDA out of memory")."""
        if not EXCEPTION_HEAD.match(head.message) or indented(head):
            return False
        if previous.message[-1:] in (" ", "\t"):
            return False  # (the row above ends in a blank: a wrap came there, at a space)
        if (previous.process, previous.rank) != (head.process, head.rank):
            return True  # (below another process's line)
        return indented(previous) or _cut_word_above(previous.message) is None

    def holds_marker(self, start: int, stop: int) -> bool:
        """The row is a request-log line's first (it quotes a prompt: never read)."""
        data = self.data
        for marker in self.markers:
            if data.find(marker, start, stop) >= 0:
                return True
        return False


def same_call(head: RowHead, previous: RowHead) -> bool:
    """Two rows under the same header of vLLM's (process tag, level, time, [file:line]): one
    logging call's message of several lines."""
    return (head.time is not None and previous.level is not None and head.header_at < head.body
            and head.text[head.header_at : head.body] == previous.text[previous.header_at : previous.body]
            and head.message != previous.message  # (the same row again: another process's copy)
            and continues_message(head.message))


def continues_message(message: str) -> bool:
    """A row's message goes on one above it under the same header: a traceback's row, or an
    indented one (not another message logged in the same second from the same line of code)."""
    return message[:1] in (" ", "\t") or TRACEBACK_ROW.match(message) is not None or EXCEPTION_HEAD.match(message) is not None


def begins(head: RowHead, previous: RowHead) -> bool:
    """A row begins a record of its own, after `previous`: it has a logger's header (or a piece
    of one a wrap cut), a traceback's or an exception's line, another process's tag, or the
    row before it is blank or ends where a viewer cut it."""
    message = head.message
    if head.level is not None or head.json or not message.strip() or not previous.text.strip():
        return True
    if head.process and previous.process and head.process != previous.process:
        return True
    if head.rank and previous.rank and head.rank != previous.rank:
        return True
    if TRACEBACK_ROW.match(message.lstrip()) or CUT_LOGGER_PREFIX.match(message):
        return True
    last = previous.message.rstrip()
    return bool(last) and last[-1] in ".\u2026])>" and CUT_MARK_END.search(last[-40:]) is not None


def indented(head: RowHead) -> bool:
    return head.indent > 0 or head.message[:1] in (" ", "\t")


def lead(head: RowHead) -> int:
    """The blanks a row's message is indented by."""
    message = head.message
    return head.indent + len(message) - len(message.lstrip(" \t"))


def _cut_word_above(above: str) -> bool | None:
    """The row above ends inside a word as a wrap leaves it ("... torch.Out" / "OfMemoryError:"):
    in a letter, digit, dot or underscore with no blank after; None: it is a traceback's or an
    exception's own row (the next is its own record)."""
    if TRACEBACK_ROW.match(above.lstrip()) or EXCEPTION_HEAD.match(above):
        return None
    return above[-1:].isalnum() or above[-1:] in "._"


# --- a request-log line a terminal hard-wrapped ------------------------------------------

# How a request-log line of vLLM ends when it is whole: its last fields ("..., lora_request: None.").
REQUEST_LOG_TAIL = 200
REQUEST_LOG_END = re.compile(
    rb"(?:lora_request|prompt_adapter_request|prompt_token_ids|prompt token ids): [^\n]{0,%d}\.\r?$" % REQUEST_LOG_TAIL)
MIN_WRAP = 40  # a shorter row ends its line: a hard wrap fills its rows
MAX_WRAP = 320  # a wider row was wrapped by no terminal or page: it is its line whole
WRAP_SLACK = 24  # a wrapped line's inner rows are this much narrower than its first, at most
MAX_LEAD = 8  # a viewer's indentation of a wrap's pieces, at most
HEAD_ROWS = 4  # the rows of a wrapped request-log line its cut marker is looked for in
MAX_QUOTED_PREFIXES = 2  # rows of a wrapped prompt that start with a logger's prefix it quotes, at most


def columns(raw: bytes | bytearray) -> int:
    """The columns a row takes on a terminal: its characters, a wide (CJK) one two."""
    text = clean_row(raw)
    if text.isascii():
        return len(text)
    return len(text) + sum(unicodedata.east_asian_width(char) in "WF" for char in text)


def _lead(raw: bytes | bytearray) -> int:
    """The blanks a row starts with, up to a viewer's indentation of a wrap's pieces."""
    return min(len(raw) - len(raw.lstrip(b" \t")), MAX_LEAD)


def _fills(wide: int, lead: int, width: int) -> bool:
    """A row `wide` columns wide, `lead` of them blanks before its text, is one a wrap at
    `width` filled (a viewer may have indented it; a wide character that did not fit the last
    column leaves it one short)."""
    return width - 1 <= wide and wide - lead <= width + 1


def _closed(data: bytes | bytearray, start: int, end: int) -> bool:
    """The rows data[start:end] end with vLLM's closing fields of a request-log line."""
    rows = bytes(data[max(start, end - 2 * REQUEST_LOG_TAIL) : end]).splitlines()
    joins = b"".join(rows), b"".join(row.lstrip() for row in rows)  # (a blank at a seam may be the text's own)
    return any(REQUEST_LOG_END.search(joined) for joined in joins)


def wrapped_end(data: bytes | bytearray, start: int, end: int, limit: int) -> int:
    """Where the request-log row data[start:end] ends with the pieces a terminal's hard wrap
    moved onto the rows below it: a wrap fills every row to the first one's width but the
    last. A row that starts with a logger's prefix is the next record, unless the row above
    it was filled and vLLM's closing fields have not come yet (the prompt quotes a log line,
    and the wrap put its prefix at a row's start; a few such rows at most). end itself: the
    row is whole (vLLM's closing fields end it, or it is wider than a terminal)."""
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
            if quoted > MAX_QUOTED_PREFIXES or _closed(data, start, end):
                break
        raw = data[piece_start:piece_end]
        piece, lead = columns(raw), _lead(raw)
        filled = _fills(piece, lead, width)
        if not filled and (prefixed or piece - lead > width + 1 or not raw.strip()
                           or EXCEPTION_HEAD.match(clean_row(raw).lstrip())):
            break  # a blank row, or a row of its own below a whole request row (a client's error)
        end = piece_end
        if not filled:
            break  # the last row
        width = max(width, piece - lead)
    return end


def _head_end(start: int, end: int) -> int:
    """Where the first HEAD_ROWS rows of a wrapped record, the first of them data[start:end],
    end at most (each row as wide as the first, and indented): where its marker lies."""
    return start + HEAD_ROWS * (end - start + 1 + MAX_LEAD)


def _may_hold(data: bytes | bytearray, start: int, end: int, limit: int, markers: tuple[bytes, ...]) -> bool:
    """A marker is in the row data[start:end] and the next few joined as they come (a quick
    test before a wrap's rows are read)."""
    head = bytes(data[start : min(limit, _head_end(start, end))])
    joined = b"".join(row.strip() for row in head.splitlines())  # (a blank at a seam may be the text's own)
    return any(all(word in joined for word in marker.split()) for marker in markers)


def request_end(data: bytes | bytearray, start: int, end: int, limit: int, markers: tuple[bytes, ...]) -> int | None:
    """Where the request-log record that begins with the row data[start:end] ends, with the rows
    a terminal's hard wrap moved its text onto; None: the row begins no such record (its marker
    may be cut by the wrap: "... [logger.py:41] R" / "eceived request ...")."""
    if any(data.find(marker, start, end) >= 0 for marker in markers):
        return wrapped_end(data, start, end, limit)
    if not NEW_RECORD.match(data, start, end) or not _may_hold(data, start, end, limit, markers):
        return None
    stop = wrapped_end(data, start, end, limit)
    if stop == end:
        return None
    pieces = bytes(data[start : min(stop, _head_end(start, end))]).splitlines()
    lead = _lead(pieces[1])  # (or the text's own blank, where a piece starts with one)
    heads = b"".join(pieces), b"".join([pieces[0], *(piece[lead:] for piece in pieces[1:])])
    # (the record's message starts with the marker: another record's rows the wrap ran on into do not count)
    texts = [read_head(head).message.lstrip() for head in heads]
    return stop if any(text.startswith(marker.decode()) for marker in markers for text in texts) else None


@functools.cache
def _marker_halves(marker: bytes) -> tuple[bytes, bytes]:
    """The two halves of a marker's first word: a wrap that cuts the word leaves one whole."""
    word = marker.split()[0]
    return word[: len(word) // 2], word[len(word) // 2 :]


def wrapped_request_start(data: bytes | bytearray, start: int, end: int, limit: int, markers: tuple[bytes, ...],
                          floor: int = 0) -> int | None:
    """The start of the hard-wrapped request-log record whose rows include the row
    data[start:end], found back over the rows above it that the wrap filled to one width;
    None: the row is no such piece."""
    if start <= floor:
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
            if request_end(data, first, start - 1, limit, markers) is not None:
                return first
            quoted += 1
            if quoted > MAX_QUOTED_PREFIXES:
                return None
        if first <= floor or walked > RECORD_TEXT:
            return None
        start, first = first, data.rfind(b"\n", 0, first - 1) + 1
        walked += start - first
        row = data[first : start - 1]
        wide, lead = columns(row), _lead(row)
        if not any(_fills(wide, lead, each) for each in widths):
            return None


# --- assembling a record ---------------------------------------------------------------------


def record_around(rows: Rows, start: int, line: int) -> tuple[int, int, int]:
    """The record that holds the row at `start` (line `line`): its first row's start and line,
    and its end (the last row's end). Walked back to a row that begins a record (or the first
    row not yet read), then forward record by record: a request-log line's wrapped rows, or a
    headerless stretch longer than a record, are cut where a reading from their start cuts them."""
    first, first_line = start, line
    while not rows.starts_record(first):
        above = rows.before(first)
        assert above is not None
        first, first_line = above, first_line - 1
        if start - first > MAX_WALK:  # a headerless stretch this long: read in records from here
            break
    while True:
        end = record_end(rows, first)
        if end >= start:
            return first, first_line, end
        first_line += rows.data.count(b"\n", first, end + 1)
        first = end + 1


def record_end(rows: Rows, first: int) -> int:
    """Where the record that starts with the row at `first` ends."""
    first_end = rows.row_end(first)
    stop = request_end(rows.data, first, first_end, rows.end, rows.markers) if rows.near_marker(first, _head_end(first, first_end)) \
        else None
    return _record_end(rows, first) if stop is None else stop


def _record_end(rows: Rows, first: int) -> int:
    end = rows.row_end(first)
    count, size = 1, end - first
    while end < rows.end and count < RECORD_LINES and size < RECORD_TEXT:
        following = end + 1
        following_end = rows.row_end(following)
        if following >= rows.end or rows.starts_record(following, following_end):
            break
        end, count, size = following_end, count + 1, size + following_end - following
    return end


def assemble(rows: Rows, first: int, first_line: int, end: int) -> LogRecord:
    """The record of the rows data[first:end]: joined, then decoded, with its map. A request-log
    record (a prompt) is not decoded: it is never read."""
    first_end = rows.row_end(first)
    if rows.near_marker(first, _head_end(first, first_end)) and (
            rows.holds_marker(first, first_end) or request_end(rows.data, first, first_end, rows.end, rows.markers)):
        return LogRecord([Row(first_line, first, end, RowHead(""))], "", RowHead(""), skip=True)
    members: list[Row] = []
    at, line = first, first_line
    while at <= end and at < rows.end:
        stop = rows.row_end(at)
        members.append(Row(line, at, stop, rows.head(at, stop)))
        at, line = stop + 1, line + 1
    head = members[0].head
    if len(members) == 1:
        decoded = decode_message(head.message)
        return LogRecord(members, decoded.text, head, decoded.origin)
    texts = [row.head.message for row in members]
    widths = [len(row.head.text) - lead(row.head) for row in members]  # the columns a wrap filled, indentation off
    if head.level is None:  # a header the wrap cut: read off the first rows joined
        mended = _mended_head(texts)
        if mended is not None:
            mended.process, mended.rank = mended.process or head.process, mended.rank or head.rank
            mended.time = mended.time or head.time
            head, texts, widths = mended, [mended.message, *texts[2:]], [widths[0], *widths[2:]]
            members = [Row(members[0].line, members[0].start, members[1].end, head), *members[2:]]
    # the lines vLLM logged: of a logger's record, each under a header of its (vLLM prints one again
    # on each line of a message of several); of a record without one (a traceback, a paste's
    # prose, collect-env's table), each row
    if head.level is None:
        wraps = calls = list(range(len(members)))
        joined, starts = join_rows(texts, [row.head.indent for row in members])
    else:
        calls = [i for i, row in enumerate(members) if i == 0 or row.head.level is not None]
        wraps = wrapped_lines(widths, calls)
        joined, starts = join_rows(texts, [row.head.indent for row in members], wraps, set(calls[1:]))
    decoded = decode_message(joined)
    return LogRecord(members, decoded.text, head, decoded.origin, starts, wraps=wraps, calls=calls)


def wrapped_lines(widths: list[int], calls: list[int]) -> list[int]:
    """The rows of a record that start a line (widths: the columns each row takes; calls: the
    rows under a header of vLLM's, each a line vLLM logged): those, and each row below one that
    a terminal's wrap did not fill (narrower than the line's first row, less some slack, or than
    any terminal; wider than any; narrower than the row below)."""
    starts = [0]
    for index in range(1, len(widths)):
        above, first = widths[index - 1], widths[starts[-1]]
        if index in calls or not MIN_WRAP <= above <= MAX_WRAP or widths[index] > above + 1 or \
                index - 1 > starts[-1] and above < first - WRAP_SLACK:
            starts.append(index)
    return starts


def _mended_head(texts: list[str]) -> RowHead | None:
    """The first two rows' messages joined where the wrap cut the logger prefix, that prefix
    read off (the cut may have dropped the space after the time)."""
    for glue in ("", " "):
        head = read_head((texts[0] + glue + texts[1].lstrip(" \t")).encode())
        if head.level is not None:
            return head
    return None


def join_rows(texts: list[str], indents: list[int] | None = None, lines: list[int] | None = None,
              calls: set[int] = frozenset()) -> tuple[str, list[int]]:  # type: ignore[assignment]
    """The rows' messages as one text, and where each starts in it. A row's blanks at a seam
    are the wrap's (a viewer's indentation, a terminal's padding): none is kept, unless a row
    has more of them than most rows of its line have (the text's own blank, where a wrap came
    at a space). indents: blanks before each row's message that its prefixes took. lines: the
    rows that start a line a terminal's wrap cut into rows (None: the record is one); calls:
    those that start a line vLLM logged, a blank before each."""
    indents = indents or [0] * len(texts)
    leads = [len(text) - len(text.lstrip(" \t")) for text in texts]
    blanks = [leads[i] + indents[i] for i in range(len(texts))]
    starts_at = [0, *(lines or [])[1:], len(texts)]
    common = {}  # a line's rows -> the wrap's indentation: what most of its pieces have
    for first, after in itertools.pairwise(dict.fromkeys(starts_at)):
        pieces = [blanks[i] for i in range(first + 1, after)]
        wrap = max(pieces, key=lambda blank: (pieces.count(blank), -blank)) if pieces else 0
        common.update(dict.fromkeys(range(first, after), wrap))
    joined, starts = texts[0], [0]
    for index in range(1, len(texts)):
        kept = joined.rstrip(" \t")
        rest = texts[index][leads[index] :]
        blank = bool(kept) and not _inside_number(kept, rest)
        if blank and len(kept) < len(joined):  # the row above's own blank
            kept += " "
        own = index in calls or index not in starts_at and blanks[index] > common[index]
        starts.append(len(kept))
        joined = kept + (" " if blank and own and not kept.endswith(" ") else "") + rest
    return joined, starts


def _inside_number(before: str, after: str) -> bool:
    """A wrap cut a number there ("131," / "072", "0." / "92"): no blank of the text's own."""
    left, right = before[-1:], after[:1]
    return (left.isdigit() or left in ".,") and (right.isdigit() or right in ".,") and (left.isdigit() or right.isdigit())


def record_start_before(data: bytes | bytearray, end: int, markers: tuple[bytes, ...], floor: int = 0) -> int:
    """Where the last record of data[:end] starts, whose rows may go on past end: a chunk
    ends before it (floor: where data's first record starts)."""
    rows = Rows(data, end, markers, floor)
    start = data.rfind(b"\n", 0, end - 1) + 1 if end > 0 else 0
    if data[end - 1 : end] == b"\n":
        start = data.rfind(b"\n", 0, end - 1) + 1
    while start > floor and not rows.starts_record(start):
        above = rows.before(start)
        assert above is not None
        start = above
        if end - start > MAX_WALK:
            return start
    return start
