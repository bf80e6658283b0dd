"""This process's event loop, for what dres runs through async libraries (MCP sessions, the
agents of other frameworks: docs/loops.md): one loop in a daemon thread, started on first use and
again after a fork (a forked child inherits the parent's loop object but not its thread).

Under ``-P gevent`` the thread is a greenlet (``threading`` is patched) and the loop's ``select``
yields to the hub, so the loop's tasks and the pool's greenlets share the process.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_loop_pid = 0
_loop_lock = threading.Lock()


def loop() -> asyncio.AbstractEventLoop:
    """This process's event loop, in a daemon thread (started after a fork)."""
    global _loop, _loop_pid
    with _loop_lock:
        if _loop is None or _loop_pid != os.getpid():
            _loop, _loop_pid = asyncio.new_event_loop(), os.getpid()
            threading.Thread(target=_loop.run_forever, name="dres-aio", daemon=True).start()
        return _loop


def run(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """``coro`` run on the process's loop from another thread; its result, or ``TimeoutError``
    after ``timeout`` (the coroutine is then cancelled)."""
    future = asyncio.run_coroutine_threadsafe(coro, loop())
    try:
        return future.result(timeout)
    except BaseException:
        future.cancel()
        raise
