"""A worker's main process forks its pool while its own threads (the reaper) run.

``fork()`` copies one thread. A lock another thread held at that instant stays held in the child
for ever: a module's import lock (the reaper's first ``import prometheus_client`` held the locks of
``urllib.error`` and ``wsgiref``; every chunk of the child forked then blocked in its own first
``import httpx`` until its time limit), a connection's, a logger's. So a thread of the main process
does its work inside ``no_fork()``, and ``guard_forks()`` makes every fork wait for that work to
end, or ``FORK_WAIT_S`` at most (a fork that waited that long goes ahead: better a child at risk
than a pool that stops replacing its children while Redis hangs).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: the longest a fork waits for the main process's threads to leave ``no_fork()``
FORK_WAIT_S = 5.0

_lock = threading.RLock()  # re-entrant: a thread inside ``no_fork()`` may itself fork
_held = threading.local()
_guarded = False


@contextmanager
def no_fork() -> Iterator[None]:
    """No fork of this process starts while the block runs."""
    with _lock:
        yield


def _before() -> None:
    _held.acquired = _lock.acquire(timeout=FORK_WAIT_S)


def _after_in_parent() -> None:
    if getattr(_held, "acquired", False):
        _held.acquired = False
        _lock.release()


def _after_in_child() -> None:
    global _lock
    _held.acquired = False
    _lock = threading.RLock()  # the child's own: nothing in it holds the parent's


def guard_forks() -> None:
    """Make this process's forks wait for ``no_fork()`` blocks; once per process."""
    global _guarded
    if not _guarded:
        _guarded = True
        os.register_at_fork(
            before=_before, after_in_parent=_after_in_parent, after_in_child=_after_in_child
        )
