"""Turn any input (file, stdin, gzip) into chunks of whole records, in flat memory.

A chunk ends where a record starts (assemble.py decides which rows make a record), so no
record is ever cut by a chunk: the last record read is carried into the next chunk, until
the row that starts the one after it arrives, the input ends, or a live input goes quiet.
Nothing is decoded here but the rows around a chunk's end: the matcher looks for anchors in
raw bytes and only the records it keeps are decoded.
"""

from __future__ import annotations

import codecs
import gzip
import io
import os
import re
import stat
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, cast

from triage.input.assemble import RECORD_TEXT, record_start_before

CHUNK_SIZE = 2 * 1024 * 1024
MAX_LINE = 16 * 1024 * 1024  # a longer line is scanned up to here; the rest of it is skipped
RECORD_CARRY = 4 * RECORD_TEXT  # a record open this long is handed on: the rows after it start another
GZIP_MAGIC = b"\x1f\x8b"


class InputError(Exception):
    """An input that cannot be read; the message is one line for the user."""


class InputQuiet(Exception):  # noqa: N818 - not an error: a state of the input
    """A live input has nothing more for now (a pipe from a running server): what was read
    may be handed on as complete. The next read waits for more."""


@dataclass(slots=True)
class Chunk:
    """data[:end] is whole lines; only the last chunk of an input may lack a final b"\n".

    data may be the reader's own buffer, refilled for the next chunk (copying each chunk
    out of it cost a page fault per 4 KiB of input): a consumer copies what it keeps.
    """

    data: bytes | bytearray
    first_line: int  # 1-based number of the first line in data
    lines: int | None = None  # b"\n" in data[:end], set by a consumer that counted them (saves a pass)
    end: int = -1  # -1: all of data
    offset: int = 0  # bytes of the input before data

    def __post_init__(self) -> None:
        if self.end < 0:
            self.end = len(self.data)

    def copy(self) -> Chunk:
        """The chunk in bytes of its own, to keep past the next one."""
        return Chunk(bytes(self.data[: self.end]), self.first_line, self.lines, offset=self.offset)


def open_input(path: str) -> tuple[str, BinaryIO]:
    """Open a path ('-' is stdin) for binary reading, gunzipping when it is gzip."""
    if path == "-":
        stream: BinaryIO = sys.stdin.buffer
        name = "<stdin>"
    else:
        try:
            stream = open(path, "rb")  # noqa: SIM115 - closed by the caller
        except FileNotFoundError:
            raise InputError(f"{path}: no such file") from None
        except IsADirectoryError:
            raise InputError(f"{path}: is a directory") from None
        except PermissionError:
            raise InputError(f"{path}: permission denied") from None
        except OSError as exc:
            raise InputError(f"{path}: {exc.strerror or exc}") from None
        name = path
    return name, maybe_gunzip(stream)


def capped(stream: BinaryIO, limit: int) -> BinaryIO:
    """stream, ending in an InputError once more than `limit` bytes were read (as decoded:
    after gunzip), so that a scan reports on the first `limit` bytes and says so."""
    return cast(BinaryIO, io.BufferedReader(_Capped(stream, limit)))


class _Capped(io.RawIOBase):
    def __init__(self, stream: BinaryIO, limit: int):
        self._stream, self._left, self._limit = stream, limit, limit

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        if self._left <= 0:
            if not self._stream.read(1):  # exactly the limit: the end, not a cut
                return 0
            size = size_text(self._limit)
            raise InputError(f"more than {size}; the report covers the first {size}")
        view = memoryview(target)[: self._left]
        data = self._stream.read(len(view))
        view[: len(data)] = data
        self._left -= len(data)
        return len(data)

    def close(self) -> None:
        self._stream.close()
        super().close()


def size_text(size: int) -> str:
    """256 MiB, or 1,234 bytes when not a whole number of MiB."""
    mib = 1 << 20
    return f"{size // mib} MiB" if size % mib == 0 else f"{size:,} bytes"


def peeked(stream: Any, size: int) -> bytes:
    """stream.peek(size), waiting through a live input's quiet spells (InputQuiet)."""
    while True:
        try:
            return stream.peek(size)
        except InputQuiet:
            continue


def maybe_gunzip(stream: BinaryIO) -> BinaryIO:
    buffered: Any = stream if hasattr(stream, "peek") else io.BufferedReader(cast(io.RawIOBase, stream))
    if peeked(buffered, 2)[:2] == GZIP_MAGIC:
        return cast(BinaryIO, gzip.GzipFile(fileobj=buffered))
    return cast(BinaryIO, buffered)


# What an input that is not a log starts with; the scan skips it whole with one line. Bytes
# without a known format are read as text: junk inside a log is counted (NotText), not a reason
# to drop the log's lines.
SNIFF_SIZE = 8192
MAGIC = (
    (b"\x7fELF", "an ELF binary or core dump"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"PK\x03\x04", "a zip archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7z archive"),
    (b"%PDF-", "a PDF document"),
    (b"\xfd7zXZ\x00", "xz-compressed data (xz -dc FILE | vllm-triage scan -)"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed data (zstd -dc FILE | vllm-triage scan -)"),
    (b"\x1f\x8b", "gzip data inside gzip"),
)
BZIP2 = re.compile(rb"BZh[1-9]1AY&SY")
TAR_MAGIC_AT = 257  # "ustar" in a tar header
# safetensors: a little-endian u64 length, then the JSON header that many bytes long
SAFETENSORS = re.compile(rb"[\s\S]{8}\{\"")
NOT_NUL = re.compile(rb"[^\x00]")  # where a copytruncate hole of NULs at the input's start ends


def sniff_binary(stream: BinaryIO) -> str | None:
    """Why the input is not a text log (a core dump, an image, an archive, UTF-16 text), or
    None when it may be one. Looks at the first SNIFF_SIZE bytes without consuming them."""
    try:
        head = peeked(stream, SNIFF_SIZE)[:SNIFF_SIZE]
    except (EOFError, OSError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        return f"not readable gzip data ({exc})"
    kind = binary_format(head)
    if kind is not None:
        return f"looks like {kind}, not a log"
    if _utf16_bom(head) or _looks_utf16(head):
        return "looks like UTF-16 text; convert it first: iconv -f UTF-16 -t UTF-8"
    return None


def _utf16_bom(head: bytes) -> bool:
    """A UTF-16 byte-order mark, and after it what UTF-8 cannot be (two junk bytes that start
    a UTF-8 log are no BOM)."""
    if not head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return False
    try:
        codecs.utf_8_decode(head[2:], "strict", False)  # not final: the sniffed bytes may end inside a character
    except UnicodeDecodeError:
        return True
    return _looks_utf16(head[2:])


def binary_format(head: bytes) -> str | None:
    """The known binary format these first bytes start, if any."""
    for magic, kind in MAGIC:
        if head.startswith(magic):
            return kind
    if BZIP2.match(head):
        return "bzip2-compressed data (bzip2 -dc FILE | vllm-triage scan -)"
    if head[TAR_MAGIC_AT : TAR_MAGIC_AT + 5] == b"ustar":
        return "a tar archive"
    if SAFETENSORS.match(head) and 2 <= int.from_bytes(head[:8], "little") < 100 * 1024 * 1024:
        return "a safetensors file (model weights)"
    return None


@dataclass(slots=True)
class NotText:
    """The lines of one input that are not text, and their bytes that are not: a NUL or bytes
    that are not UTF-8 (a process wrote binary data to the log's stream). Other control bytes
    (BEL, backspace, ANSI's ESC) are text. A run of NULs that starts the input is the hole a
    copytruncate rotation leaves: not counted."""

    lines: int = 0
    junk_bytes: int = 0
    started: bool = False  # the input's first bytes were seen

    def add(self, data: bytes | bytearray, start: int, end: int) -> None:
        """Count data[start:end], whole lines. A clean chunk costs one NUL search and one
        UTF-8 decode; only a chunk with junk is looked at line by line."""
        if not self.started:
            self.started = True
            if data[start : start + 1] == b"\x00":
                text = NOT_NUL.search(data, start, end)
                start = end if text is None else text.start()
        nul = _find_nul(data, start, end)
        # a buffer of ASCII holds no byte that is not UTF-8: one pass of C, no decoding (the
        # bytes past `end` are the next chunk's start or earlier ones: this is a sufficient test)
        invalid = end if data.isascii() else _first_invalid(data, start, end)
        while min(nul, invalid) < end:
            bad = min(nul, invalid)
            first = data.rfind(b"\n", start, bad) + 1 or start
            last = data.find(b"\n", bad, end)
            last = end if last < 0 else last
            line = bytes(data[max(first, start) : last])
            self.lines += 1
            self.junk_bytes += line.count(0) + len(line) - len(line.decode("utf-8", "ignore").encode())
            start = last + 1
            if nul < start:
                nul = _find_nul(data, start, end)
            if invalid < start:
                invalid = _first_invalid(data, start, end)

    def warning(self, name: str) -> str | None:
        if not self.lines:
            return None
        lines = f"{self.lines:,} line is" if self.lines == 1 else f"{self.lines:,} lines are"
        size = f"{self.junk_bytes:,} byte" if self.junk_bytes == 1 else f"{self.junk_bytes:,} bytes"
        return (f"{name}: {lines} not text ({size} of NULs or not UTF-8: a process wrote binary data to the log); "
                "the text lines were scanned")


def _find_nul(data: bytes | bytearray, start: int, end: int) -> int:
    found = data.find(b"\x00", start, end)
    return end if found < 0 else found


def _first_invalid(data: bytes | bytearray, start: int, end: int) -> int:
    """Where the first byte that is not UTF-8 lies in data[start:end] (end: none). Decoded in
    windows that double while they are clean: the error copies the window it was raised on."""
    window = 4096
    with memoryview(data) as view:  # released at once: the reader resizes its buffer
        while start < end:
            stop = min(end, start + window)
            with view[start:stop] as part:
                try:
                    _, used = codecs.utf_8_decode(part, "strict", stop == end)  # not final: a character may go on
                except UnicodeDecodeError as exc:
                    return start + exc.start
            start += used or stop - start
            window = min(window * 2, 1 << 20)
    return end


def tallied(chunks: Iterator[Chunk], tally: NotText) -> Iterator[Chunk]:
    """The chunks, each counted in tally before the matcher reads it."""
    for chunk in chunks:
        tally.add(chunk.data, 0, chunk.end)
        yield chunk


def _looks_utf16(head: bytes) -> bool:
    """ASCII text in UTF-16: every other byte is NUL, the bytes between are not."""
    half = len(head) // 2
    if half < 8:
        return False
    even_nuls, odd_nuls = head[0::2].count(0), head[1::2].count(0)
    return max(even_nuls, odd_nuls) > 0.8 * half and min(even_nuls, odd_nuls) < 0.1 * half


def iter_chunks(stream: BinaryIO, chunk_size: int = CHUNK_SIZE, max_line: int = MAX_LINE,
                markers: tuple[bytes, ...] = ()) -> Iterator[Chunk]:
    """Yield chunks of whole records; a longer record or line grows the buffer.

    A chunk ends at the first row of the last record it holds, whose rows may go on in the
    bytes not read yet (markers: those of request-log lines, whose rows a terminal's wrap
    decides). That record starts the next chunk; it is handed on alone when the input ends,
    fails, or, live, goes quiet (InputQuiet), or once it is longer than a record can be.

    A line longer than max_line is cut there: its first max_line bytes end the chunk
    with a b"\n" that stands for the real one, and the rest of the line is dropped, so
    memory stays bounded (a stream with no newline at all, /dev/zero) and lines keep
    their numbers.
    """
    buffer = bytearray(chunk_size)
    view = memoryview(buffer)
    # gzip: read1 keeps what was decoded before a truncated end; readinto would drop it
    read_into = _read_file_into if _regular_file(stream) and not isinstance(stream, gzip.GzipFile) else _read_into
    filled = 0
    line_no, offset = 1, 0
    dropping = False  # inside the rest of a line that was cut

    def hand_on(end: int, cut_line: bool = False) -> Chunk:
        """buffer[:end] as a chunk; its bytes leave the buffer when the next is asked for."""
        return Chunk(buffer, line_no, end=end + cut_line, offset=offset)

    while True:
        if filled == len(buffer):
            line_start = buffer.rfind(b"\n", 0, filled) + 1
            if filled - line_start >= max_line:  # the line is longer than a line may be
                if line_start:  # the records before it first
                    chunk = hand_on(line_start)
                    yield chunk
                else:
                    view.release()
                    buffer[filled:] = b"\n"  # stands for the real one; a byte more, not a copy of the line
                    view = memoryview(buffer)
                    chunk = hand_on(filled, cut_line=True)
                    yield chunk
                    dropping, line_start = True, filled
                line_no += chunk.lines if chunk.lines is not None else buffer.count(b"\n", 0, chunk.end)
                rest = filled - line_start
                view[:rest] = view[line_start:filled]
                offset, filled = offset + line_start, rest
                if dropping:
                    filled = 0
                continue
            view.release()  # one line or record longer than the buffer: grow it
            buffer.extend(bytes(len(buffer)))
            view = memoryview(buffer)
        try:
            n = read_into(stream, view[filled:])
        except InputError:  # a bound or bad gzip data ends the input: what was read is matched first
            if filled:
                yield Chunk(bytes(view[:filled]), line_no, offset=offset)
            raise
        except InputQuiet:
            if filled and buffer[filled - 1] == 0x0A:  # live, gone quiet: the last record is complete so far
                chunk = hand_on(filled)
                yield chunk
                line_no += chunk.lines if chunk.lines is not None else buffer.count(b"\n", 0, filled)
                offset, filled = offset + filled, 0
            continue
        if n == 0:
            break
        if dropping:  # filled is 0: drop up to and including the cut line's newline
            end = buffer.find(b"\n", 0, n)
            if end < 0:
                continue
            n -= end + 1
            view[:n] = view[end + 1 : end + 1 + n]
            dropping = False
        start = filled
        filled += n
        cut = buffer.rfind(b"\n", start, filled)  # the bytes before start hold no newline
        if cut < 0:
            continue
        end = record_start_before(buffer, cut + 1, markers)
        if end == 0:  # one record so far: wait for the row after it (up to a record's bounds)
            if cut + 1 < RECORD_CARRY:
                continue
            end = cut + 1
        chunk = hand_on(end)
        yield chunk
        line_no += chunk.lines if chunk.lines is not None else buffer.count(b"\n", 0, end)
        rest = filled - end
        view[:rest] = view[end:filled]
        offset += end
        filled = rest
    if filled:
        yield Chunk(bytes(view[:filled]), line_no, offset=offset)


def _regular_file(stream: BinaryIO) -> bool:
    """A file on disk (plain or gzip), not a pipe or a terminal: reads never wait for a writer."""
    try:
        return stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (OSError, ValueError, io.UnsupportedOperation, AttributeError):
        return False


def _read_file_into(stream: BinaryIO, target: memoryview) -> int:
    """Straight into the chunk buffer: one copy of each byte fewer than read1."""
    try:
        return stream.readinto(target) or 0  # type: ignore[attr-defined]
    except (EOFError, gzip.BadGzipFile) as exc:
        raise InputError(f"truncated or corrupt gzip data ({exc})") from None


def _read_into(stream: BinaryIO, target: memoryview) -> int:
    try:
        # What is buffered, else one raw read; never "until full": lines from a pipe are
        # scanned as they arrive, so a live stream is diagnosed as it goes and Ctrl-C can
        # report them. (readinto1 would issue a second, blocking read after a peek.)
        data = stream.read1(len(target))  # type: ignore[attr-defined]
    except (EOFError, gzip.BadGzipFile) as exc:
        raise InputError(f"truncated or corrupt gzip data ({exc})") from None
    target[: len(data)] = data
    return len(data)
