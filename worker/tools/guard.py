"""Deferring a soft time limit across a tool's critical section (CONTRACT §7.6).

Celery's prefork pool delivers the soft limit as SIGUSR1, whose handler raises
``SoftTimeLimitExceeded`` wherever the main thread happens to be. Inside ``DeferSignals`` the
handler is swapped for one that only notes the signal; on exit the original handler is restored
and, if the signal came, called — so the exception is raised right after the ``tool_done`` is
recorded, never between a side effect and its record. Swapping the Python-level handler (rather
than only masking the signal) also covers a signal the kernel hands to another thread. The hard
limit (SIGTERM then SIGKILL from the pool) is not deferred: a tool that outlives it stays an
interrupted call.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any

#: signals deferred by default: Celery's soft time limit
SOFT_LIMIT_SIGNALS = (signal.SIGUSR1,)


class DeferSignals:
    def __init__(self, signals: tuple[signal.Signals, ...] = SOFT_LIMIT_SIGNALS) -> None:
        self.signals = signals
        self._saved: dict[signal.Signals, Any] = {}
        self._pending: list[tuple[int, FrameType | None]] = []
        self._depth = 0

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self._pending.append((signum, frame))

    def __enter__(self) -> DeferSignals:
        self._depth += 1
        if self._depth > 1 or threading.current_thread() is not threading.main_thread():
            return self  # signal handlers can only be set from the main thread
        for sig in self.signals:
            self._saved[sig] = signal.signal(sig, self._note)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._depth -= 1
        if self._depth or not self._saved:
            return
        saved, self._saved = self._saved, {}
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        pending, self._pending = self._pending, []
        for signum, frame in pending[:1]:
            handler = saved[signal.Signals(signum)]
            if callable(handler):
                handler(signum, frame)  # Celery's raises SoftTimeLimitExceeded here
            elif handler == signal.SIG_DFL:
                signal.raise_signal(signum)
