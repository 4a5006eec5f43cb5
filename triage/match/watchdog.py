"""Time-bounded searches with the stdlib `re`, as the `regex` module bounds its own.

On a candidate line `re` searches two to four times quicker than `regex` with a timeout
(which reads the clock as it goes), and compiles a pattern in half the time. But `re`
has no timeout. A periodic SIGALRM gives it one: sre checks for signals as it matches,
so the handler can stop a search that is still running at its third tick, after at
least `limit` seconds, by raising TimeoutError from inside it.

Signals reach only the main thread, and only where setitimer exists (not Windows), and
the alarm must not be someone else's. Where arm() says no, callers keep `regex`.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

TICKS_TO_STOP = 2  # ticks after the one that first saw a search: it ran at least TICKS_TO_STOP * tick seconds


class Watchdog:
    def __init__(self, limit: float):
        self.tick = limit / TICKS_TO_STOP
        self.started = 0  # searches begun: tells a long search from a new one at the next tick
        self.running = False
        self._seen = -1  # `started` at the last tick that saw a search running
        self._ticks = 0  # ticks in a row that saw that same search running
        self._armed = 0  # nested scans
        self._previous: Any = None

    def arm(self) -> bool:
        """Start ticking (nested calls count); False where the alarm is not ours to use."""
        if self._armed:
            self._armed += 1
            return True
        if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
            return False
        if signal.getsignal(signal.SIGALRM) is not signal.SIG_DFL or signal.getitimer(signal.ITIMER_REAL)[0]:
            return False  # the program (or a test runner) uses the alarm itself
        self._previous = signal.signal(signal.SIGALRM, self._on_tick)
        signal.setitimer(signal.ITIMER_REAL, self.tick, self.tick)
        self._armed = 1
        return True

    def disarm(self) -> None:
        self._armed -= 1
        if self._armed == 0:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous)
            self.running = False

    def bound(self, search: Callable[..., Any]) -> Callable[..., Any]:
        """search, stopped with TimeoutError once it has run `limit` seconds (while armed)."""

        def watched(text: str, *where: int) -> Any:
            self.started += 1
            self.running = True
            try:
                return search(text, *where)
            finally:
                self.running = False

        return watched

    def _on_tick(self, _signum: int, _frame: Any) -> None:
        # Runs between bytecodes or inside sre's matching loop, on the main thread. A search
        # is stopped only when it is running now and it is the one that ran at the last ticks.
        if not self.running or self.started != self._seen:
            self._seen, self._ticks = (self.started, 0) if self.running else (-1, 0)
            return
        self._ticks += 1
        if self._ticks >= TICKS_TO_STOP:
            self._seen, self._ticks = -1, 0
            raise TimeoutError("search stopped by the watchdog")
