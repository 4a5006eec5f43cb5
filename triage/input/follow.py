"""Reading a log while it is written: --follow, --tee, and a progress bar for big files.

These only move bytes and tell the user how far the scan is; the chunks they yield go
to the matcher like any other input.
"""

from __future__ import annotations

import io
import os
import select
import stat
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from triage.input.reader import Chunk, InputError, InputQuiet

POLL_SECONDS = 0.2
PROGRESS_MIN_BYTES = 64 * 1024 * 1024  # smaller files scan in about a second: no bar


class FollowedFile(io.RawIOBase):
    """A file read like `tail -f`: at its end, wait for more instead of ending.

    Survives rotation (the path now names another file: the rest of the old one is read,
    then the new one from its start) and truncation (the file shrank below what was read:
    read again from its start). It ends only when the reader stops (Ctrl-C).
    """

    def __init__(self, path: str, poll_seconds: float = POLL_SECONDS):
        super().__init__()
        self.path, self.poll_seconds = path, poll_seconds
        self.file = self._open()
        self._said = False  # InputQuiet was raised at the file's end: the next read waits

    def _open(self) -> io.FileIO:
        try:
            return open(self.path, "rb", buffering=0)  # noqa: SIM115 - closed in close()
        except FileNotFoundError:
            raise InputError(f"{self.path}: no such file") from None
        except OSError as exc:
            raise InputError(f"{self.path}: {exc.strerror or exc}") from None

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        while True:
            count = self.file.readinto(target)
            if count:
                self._said = False
                return count
            if not self._said:  # at its end for now: the reader hands on the record it holds
                self._said = True
                raise InputQuiet()
            self._reopen_if_replaced()
            time.sleep(self.poll_seconds)

    def read1(self, size: int = -1) -> bytes:
        buffer = bytearray(size if size > 0 else io.DEFAULT_BUFFER_SIZE)
        count = self.readinto(buffer)
        return bytes(buffer[:count])

    def _reopen_if_replaced(self) -> None:
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            return  # between the rename and the new file: keep waiting
        mine = os.fstat(self.file.fileno())
        if (now.st_ino, now.st_dev) != (mine.st_ino, mine.st_dev):
            self.file.close()
            self.file = self._open()
        elif now.st_size < self.file.tell():
            self.file.seek(0)

    def close(self) -> None:
        self.file.close()
        super().close()


QUIET_SECONDS = 0.3  # a pipe silent this long is a stream still running, not a paste still arriving


class WaitingPipe(io.RawIOBase):
    """A pipe (stdin) that says when the input stops arriving but has not ended: a server
    still running (`vllm serve ... | vllm-triage scan`), not a finished file or paste, whose
    bytes are all there at once. A read that would wait more than `quiet` seconds raises
    InputQuiet first (the reader hands on the record it holds); the read after it calls
    on_wait() (what was held back is printed) and waits while the stream goes on."""

    def __init__(self, fd: int, on_wait: Callable[[], None], quiet: float = QUIET_SECONDS):
        super().__init__()
        self.fd, self.on_wait, self.quiet = fd, on_wait, quiet
        self._said = False  # InputQuiet was raised: the next read waits

    def readable(self) -> bool:
        return True

    def readinto(self, target) -> int:
        if self._said:
            self._said = False
            self.on_wait()
        else:
            ready, _, _ = select.select([self.fd], [], [], self.quiet)
            if not ready:
                self._said = True
                raise InputQuiet()
        data = os.read(self.fd, len(target))
        target[: len(data)] = data
        return len(data)

    def fileno(self) -> int:
        return self.fd  # closing this wrapper leaves stdin itself open


def tee(chunks: Iterator[Chunk], sink: BinaryIO) -> Iterator[Chunk]:
    """Pass every byte through to sink unchanged, as it is read."""
    for chunk in chunks:
        sink.write(memoryview(chunk.data)[: chunk.end])
        sink.flush()
        yield chunk


def big_regular_file(stream: BinaryIO) -> int | None:
    """The size of a plain (not gzip) file on disk worth a progress bar, else None."""
    raw = getattr(stream, "raw", None)
    try:
        info = os.fstat(raw.fileno()) if raw is not None else None
    except (OSError, ValueError, io.UnsupportedOperation):
        return None
    if info is None or not stat.S_ISREG(info.st_mode) or info.st_size < PROGRESS_MIN_BYTES:
        return None
    return info.st_size


def with_progress(chunks: Iterator[Chunk], total: int, label: str) -> Iterator[Chunk]:
    """A progress bar on stderr that advances with the bytes scanned; gone when done."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    columns = (label, BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(file=sys.stderr), transient=True) as progress:
        task = progress.add_task(label, total=total)
        for chunk in chunks:
            progress.advance(task, chunk.end)
            yield chunk


def stdin_is_a_pipe() -> bool:
    """A real pipe or FIFO on fd 0 (`vllm serve ... | vllm-triage scan`), not a file or a test's buffer."""
    try:
        return stat.S_ISFIFO(os.fstat(sys.stdin.fileno()).st_mode)
    except (OSError, ValueError, io.UnsupportedOperation, AttributeError):
        return False
