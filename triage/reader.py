"""Turn any input (file, stdin, gzip) into chunks of whole lines, in flat memory.

Nothing is decoded here: the matcher looks for anchors in raw bytes and only the
lines it keeps are decoded (see records.py).
"""

from __future__ import annotations

import gzip
import io
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

CHUNK_SIZE = 4 * 1024 * 1024
GZIP_MAGIC = b"\x1f\x8b"


class InputError(Exception):
    """An input that cannot be read; the message is one line for the user."""


@dataclass(slots=True)
class Chunk:
    data: bytes  # whole lines; only the last chunk of an input may lack a final b"\n"
    first_line: int  # 1-based number of the first line in data


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
    return name, _maybe_gunzip(stream)


def _maybe_gunzip(stream: BinaryIO) -> BinaryIO:
    buffered = stream if hasattr(stream, "peek") else io.BufferedReader(stream)  # type: ignore[arg-type]
    if buffered.peek(2)[:2] == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=buffered)  # type: ignore[return-value]
    return buffered  # type: ignore[return-value]


def iter_chunks(stream: BinaryIO, chunk_size: int = CHUNK_SIZE) -> Iterator[Chunk]:
    """Yield chunks that end at a line boundary; a longer line grows the buffer."""
    buffer = bytearray(chunk_size)
    view = memoryview(buffer)
    filled = 0
    line_no = 1
    while True:
        if filled == len(buffer):  # one line longer than the buffer: grow it
            view.release()
            buffer.extend(bytes(len(buffer)))
            view = memoryview(buffer)
        n = _read_into(stream, view[filled:])
        if n == 0:
            break
        filled += n
        cut = buffer.rfind(b"\n", 0, filled)
        if cut < 0:
            continue
        data = bytes(view[: cut + 1])
        yield Chunk(data, line_no)
        line_no += data.count(b"\n")
        rest = filled - (cut + 1)
        view[:rest] = view[cut + 1 : filled]
        filled = rest
    if filled:
        yield Chunk(bytes(view[:filled]), line_no)


def _read_into(stream: BinaryIO, target: memoryview) -> int:
    try:
        return stream.readinto(target) or 0  # type: ignore[attr-defined]
    except (EOFError, gzip.BadGzipFile) as exc:
        raise InputError(f"truncated or corrupt gzip data ({exc})") from None
