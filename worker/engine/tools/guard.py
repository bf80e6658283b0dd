"""Deferring a soft time limit across a tool's critical section (CONTRACT §7.6).

Celery's prefork pool delivers the soft limit as SIGUSR1, whose handler raises
``SoftTimeLimitExceeded`` wherever the main thread happens to be. Inside ``DeferSignals`` a
handler of ours only notes the signal; on exit the original handler is called if the signal came —
so the exception is raised right after the ``tool_done`` is recorded, never between a side effect
and its record. Trapping at the Python level (rather than only masking the signal) also covers a
signal the kernel hands to another thread. The hard
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


class _Trap:
    """The one handler of the deferred signals in this process.

    Installed over the handler it finds (Celery's) and kept there: outside a critical section it
    hands each signal straight on; inside one it only notes it, and the section's exit hands it
    on. Entering a section is then a counter, not a handler swap (a tool call's hot path).
    """

    def __init__(self) -> None:
        self.depth = 0
        self.pending: tuple[int, FrameType | None] | None = None
        self.forward: dict[int, Any] = {}

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.depth:
            self.pending = self.pending or (signum, frame)
            return
        self.deliver(signum, frame)

    def deliver(self, signum: int, frame: FrameType | None) -> None:
        handler = self.forward.get(signum, signal.SIG_DFL)
        if callable(handler):
            handler(signum, frame)  # Celery's raises SoftTimeLimitExceeded here
        elif handler != signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)

    def install(self, sig: signal.Signals) -> None:
        current = signal.getsignal(sig)
        if current is not self:  # first use, or someone installed another handler since
            self.forward[sig] = current
            signal.signal(sig, self)


_TRAP = _Trap()


class DeferSignals:
    """Critical sections in which the soft-limit signal waits. ``arm()`` once per run first."""

    def __init__(self, signals: tuple[signal.Signals, ...] = SOFT_LIMIT_SIGNALS) -> None:
        self.signals = signals
        self._armed = False
        self._active: list[bool] = []

    def arm(self) -> None:
        """Put the trap over the current handlers (Celery's), once per run, in the main thread.

        Signal handlers can only be set, and only run, in the main thread; elsewhere the
        sections defer nothing.
        """
        self._armed = threading.current_thread() is threading.main_thread()
        if self._armed:
            for sig in self.signals:
                _TRAP.install(sig)

    def __enter__(self) -> DeferSignals:
        active = self._armed and threading.current_thread() is threading.main_thread()
        self._active.append(active)
        if active:
            _TRAP.depth += 1
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._active.pop():
            return
        _TRAP.depth -= 1
        if _TRAP.depth == 0 and _TRAP.pending is not None:
            pending, _TRAP.pending = _TRAP.pending, None
            _TRAP.deliver(*pending)
