"""Python's cyclic garbage collector held off while a turn's events are decoded or folded.

Neither makes reference cycles, yet each allocates a few containers per event that outlive the
step (the events, their dicts, the journal's entries). With the collector on, every few hundred
allocations it walks the younger generations, and now and then everything alive, a whole turn's
events included: on a long turn that walking costs more than the decoding. Held off, the
collector finds the new objects in one pass when the pause ends.

Pauses are short and bounded by the caller: one XRANGE page and its decoding (a command that
fails ends its pause: the waits before it is sent again are outside), or one fold over events
already in memory. The collector is process-wide, so pauses
from several threads nest: the first one in turns it off (only if it was on), the last one out
turns it back on.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _Pauses:
    """The pauses open in this process, in every thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        #: the first open pause turned the collector off (it was on): the last one turns it on
        self.ours = False

    def enter(self) -> None:
        with self.lock:
            if self.depth == 0:
                self.ours = gc.isenabled()
                if self.ours:
                    gc.disable()
            self.depth += 1

    def leave(self) -> None:
        with self.lock:
            self.depth -= 1
            if self.depth == 0 and self.ours:
                gc.enable()


_PAUSES = _Pauses()


@contextmanager
def gc_paused() -> Iterator[None]:
    _PAUSES.enter()
    try:
        yield
    finally:
        _PAUSES.leave()
