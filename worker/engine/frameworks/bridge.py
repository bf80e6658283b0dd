"""One framework run: its coroutine on the process's event loop (``worker.engine.eventloop``),
the chunk's own thread serving what it asks of dres.

Everything dres does for a run stays in the chunk's thread, where it does it for its own loop:
Redis writes, the executor and its guard, the pool's interrupts (prefork's soft-limit signal lands
in the main thread; gevent's is thrown into the chunk's greenlet), the Stop polls. The framework's
coroutine only sends requests: ``post`` (text deltas: in order, answered by nobody) and ``ask``
(everything else: the coroutine waits for the chunk's answer, or for the exception the chunk hands
it — ``Halt`` when dres ended the run). The chunk's thread takes them one at a time with ``next``,
so the framework's calls are served in the order it made them, whatever it runs concurrently.

When the chunk's thread leaves (an interrupt, a Stop, a record that failed) it ``abandon``\\ s the
run: every question still open is answered ``Halt`` and the coroutine's task is cancelled; the
framework unwinds on the loop by itself, and nothing it sends after is read.
"""

from __future__ import annotations

import asyncio
import queue
from collections import deque
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from worker.engine import eventloop
from worker.engine.frameworks.base import Halt


@dataclass
class Ask:
    """A question of the framework's coroutine; ``answer`` resolves it on the loop."""

    op: Any
    future: asyncio.Future[Any] = field(repr=False)
    loop: asyncio.AbstractEventLoop = field(repr=False)
    answered: bool = False

    def answer(self, value: Any) -> None:
        if not self.answered:
            self.answered = True
            self.loop.call_soon_threadsafe(_settle, self.future, value, None)

    def fail(self, error: BaseException) -> None:
        if not self.answered:
            self.answered = True
            self.loop.call_soon_threadsafe(_settle, self.future, None, error)


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():  # the task was cancelled meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


class Done:
    """The coroutine ended (its outcome: ``Bridge.outcome``)."""


DONE = Done()


class Bridge:
    def __init__(self) -> None:
        self._items: queue.Queue[Any] = queue.Queue()
        #: items taken out of order (a call's own answer awaited while others queued)
        self._later: deque[Any] = deque()
        self._future: Future[Any] | None = None
        self._open: list[Ask] = []

    # -- the coroutine's side (on the loop) ----------------------------------------------------

    def post(self, op: Any) -> None:
        """Tell the chunk something; no answer."""
        self._items.put(op)

    async def ask(self, op: Any) -> Any:
        """Ask the chunk and wait for its answer (or the exception it hands back)."""
        loop = asyncio.get_running_loop()
        ask = Ask(op, loop.create_future(), loop)
        self._items.put(ask)
        return await ask.future

    # -- the chunk's side --------------------------------------------------------------------

    def start(self, make: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        """Start the framework's coroutine on the process's loop."""
        self._future = asyncio.run_coroutine_threadsafe(self._main(make), eventloop.loop())

    async def _main(self, make: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        try:
            return await make()
        except BaseExceptionGroup as group:  # a framework that gathers its tool calls
            raise _unwrapped(group) from None
        finally:
            self._items.put(DONE)

    def next(self, poll_s: float, idle: Callable[[], None]) -> Any:
        """The next item (an ``Ask``, a posted op, or ``DONE``), calling ``idle`` every
        ``poll_s`` while none comes (the Stop poll)."""
        if self._later:
            return self._later.popleft()
        while True:
            try:
                item = self._items.get(timeout=poll_s)
            except queue.Empty:
                idle()
                continue
            if isinstance(item, Ask):
                self._open.append(item)
            return item

    def put_back(self, item: Any) -> None:
        """An item taken while waiting for another, served after it."""
        self._later.append(item)

    def outcome(self) -> Any:
        """After ``DONE``: the coroutine's result, or what it raised."""
        assert self._future is not None
        return self._future.result()

    def abandon(self) -> None:
        """The chunk leaves: open questions answered ``Halt``, the coroutine cancelled."""
        for ask in self._open:
            ask.fail(Halt())
        for item in self._later:
            if isinstance(item, Ask):
                item.fail(Halt())
        while True:
            try:
                item = self._items.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, Ask):
                item.fail(Halt())
        if self._future is not None:
            self._future.cancel()

    def forget(self, ask: Ask) -> None:
        if ask in self._open:
            self._open.remove(ask)


def _unwrapped(group: BaseExceptionGroup[Any]) -> BaseException:
    """The exception a group stands for: ``Halt`` if dres halted the run, else its first."""
    halts = group.subgroup(lambda e: isinstance(e, Halt))
    if halts is not None:
        return Halt()
    first: BaseException = group.exceptions[0]
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first


def run_on_loop(coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
    """A coroutine run on the process's loop from the chunk's thread (a tool called outside a
    framework run, a framework's async approval rule): its result."""
    return eventloop.run(coro, timeout)


__all__ = ["DONE", "Ask", "Bridge", "Done", "run_on_loop"]
