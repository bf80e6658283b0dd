"""Interrupts of a running run, and their deferral across a tool's critical section.

Three signals end a running run at the point they land, each as an ``Interrupt`` (a
``BaseException``, so no ``except Exception`` in a tool, an SDK or its retry helper can swallow
it or take it for a transport error, docs/faults.md):

- ``SIGUSR1``, Celery's prefork soft time limit -> ``SoftLimit`` (Celery's own handler would raise
  ``SoftTimeLimitExceeded``, an ``Exception`` that the Anthropic SDK wraps and retries);
- ``SIGUSR2``, dres's nudge -> ``TurnCancelled`` when this process's Stop watcher sent it
  (``DeferSignals.stop``), else ``Shutdown``: the worker's main process sends it to its pool
  children when it is told to stop (a deploy), so their chunks hand over at once (docs/faults.md);
- ``SIGTERM`` sent to the pool child itself -> ``Shutdown`` too.

Inside a critical section (``with guard:``, a tool call between its ``tool_start`` and its
``tool_done``) a signal is only noted, and raised when the outermost section exits: never between a
side effect and its record (docs/semantics.md). A tool may lift the deferral around a wait that has
no effect of its own (``ToolContext.interruptible()``): an interrupt landing there leaves the call
interrupted.

Outside a run (``DeferSignals.running()``) the signals keep their meaning for the process: Celery's
soft-limit handler, SIGTERM's default; a stray nudge is noted (a shutdown then hands the next chunk
over at once) and otherwise ignored. The hard limit (the pool's SIGTERM, then SIGKILL 0.1 s later)
cannot be deferred past its SIGKILL: a tool that outlives it stays an interrupted call.

That is the prefork pool's way (``DeferSignals``). ``Interrupts`` is what a run asks of any way:
under gevent many runs share one thread, and each run's interrupts are thrown into its greenlet
instead (``worker.edges.celery.greenlets``). Which way a process's runs get is its pool's
(``worker.lifecycle.pools``), handed to each run's loop by the runtime: no call site asks which pool
runs it.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from types import FrameType, TracebackType
from typing import Any, Protocol, Self

from worker.base.errors import Interrupt, Shutdown, SoftLimit, TurnCancelled

#: Celery's soft time limit (billiard's ``SIG_SOFT_TIMEOUT``)
SOFT_LIMIT = signal.SIGUSR1
#: dres's nudge: a Stop request (from this process) or a shutdown (from the worker's main process)
NUDGE = signal.SIGUSR2
#: signals the trap handles; each raises an ``Interrupt`` while a run is running
SIGNALS = (SOFT_LIMIT, NUDGE, signal.SIGTERM)
#: seconds before a Stop nudge its run has not seen is sent again
RESEND_S = 0.5


class Interrupts(Protocol):
    """A run's interrupts (``SoftLimit``, ``TurnCancelled``, ``Shutdown``): where they may land,
    and the critical sections (``with guard:``) across which they wait."""

    @property
    def armed(self) -> bool:
        """Interrupts reach this run where it runs."""
        ...

    def arm(self) -> None:
        """Bind the interrupts to where the run runs (its thread, its greenlet)."""

    def limited(self, soft_limit_s: float | None) -> AbstractContextManager[None]:
        """The chunk's task, from its start: its soft limit lands in it (from the pool, or
        from a timer of the run's own where the pool has none)."""
        ...

    def running(self) -> AbstractContextManager[None]:
        """The run's window: interrupts end it where they land."""
        ...

    def answering(self) -> AbstractContextManager[None]:
        """The run answers an interrupt: a further one never cuts the answer."""
        ...

    def stop(self) -> None:
        """Stop was requested (from the run's Stop watcher): ``TurnCancelled`` at its next
        safe point, also while it waits on a socket or a sleep."""

    def lifted(self) -> AbstractContextManager[None]:
        """Inside a critical section: interrupts land again, for a wait with no effect."""
        ...

    def __enter__(self) -> object: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class _Trap:
    """The one handler of the run's signals in this process (signals are per process).

    Installed over the handlers it finds (Celery's) and kept there: outside a run it hands each
    signal on as before; inside one it raises the signal's interrupt, or, inside a critical
    section, notes it for the section's exit. Entering a section is then a counter, not a handler
    swap (a tool call's hot path).
    """

    def __init__(self) -> None:
        self.depth = 0
        self.pending: Interrupt | None = None
        self.forward: dict[int, Any] = {}
        #: a run is running in the main thread: signals raise its interrupts
        self.running = False
        #: Stop nudges this process sent itself, and those its handler saw: a nudge beyond them
        #: came from outside (a shutdown)
        self.stops_sent = 0
        self.stops_seen = 0
        #: a shutdown nudge came: a run that starts now hands over at once
        self.draining = False
        #: a Celery pool child: the soft limit is Celery's only while one of its tasks runs
        #: (``DeferSignals.tasks_only``); ``in_task`` says whether one does
        self.tasks_only = False
        self.in_task = True
        #: soft limits that reached this process while no task ran, and were dropped
        self.stale_soft_limits = 0
        #: the run answers an interrupt (``DeferSignals.answering``); a SIGTERM that came then
        #: is handed on when the answer is done
        self.answering = False
        self.terminated = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.answering:
            # the run is already doing what any interrupt asks (handing over, stopping): a soft
            # limit is dropped, a nudge only noted, a SIGTERM kept for the answer's end
            if signum == signal.SIGTERM:
                self.terminated = True
            elif signum == NUDGE:
                self.interrupt(signum)
            return
        if signum == SOFT_LIMIT and self.tasks_only and not self.in_task and not self.running:
            # A late soft limit of a task that already ended. The pool's main process times a
            # job until it reads its result; while its event loop is held up (a broker
            # reconnect: Celery's consumer retries in that loop) a job can end unread, and its
            # timer then fires at a child that is idle or writing a result. Celery's handler
            # would raise SoftTimeLimitExceeded there: mid-write it garbles the result pipe and
            # the main process dies of an UnpicklingError ("Unrecoverable error"), seen after a
            # Redis restart with Celery 5.7.0 / billiard 4.2. No task runs: nothing to limit.
            self.stale_soft_limits += 1
            return
        interrupt = self.interrupt(signum)
        if interrupt is None:
            self.forward_signal(signum, frame)
        elif self.running and self.depth:
            self.pending = self.pending or interrupt
        elif self.running:
            raise interrupt

    def interrupt(self, signum: int) -> Interrupt | None:
        """The interrupt ``signum`` means now (None: the process's own handler takes it)."""
        if signum == NUDGE:
            if self.stops_seen < self.stops_sent:
                self.stops_seen = self.stops_sent
                return TurnCancelled("Stop requested")
            self.draining = True
            return Shutdown("the worker is shutting down")
        if not self.running:
            return None
        if signum == SOFT_LIMIT:
            return SoftLimit("the chunk's soft time limit")
        return Shutdown("the worker is shutting down")

    def forward_signal(self, signum: int, frame: FrameType | None) -> None:
        handler = self.forward.get(signum, signal.SIG_DFL)
        if callable(handler):
            handler(signum, frame)  # Celery's raises SoftTimeLimitExceeded here
        elif handler != signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)

    def install(self) -> None:
        for sig in SIGNALS:
            current = signal.getsignal(sig)
            if current is not self:  # first use, or someone installed another handler since
                self.forward[sig] = current
                signal.signal(sig, self)

    def release(self) -> None:
        """The outermost section ended: raise what was noted inside it."""
        if self.depth == 0 and self.pending is not None:
            pending, self.pending = self.pending, None
            if self.running:
                raise pending


_TRAP = _Trap()


class CriticalSections:
    """The critical sections of a run's interrupts, alike for every way to interrupt it:
    ``with guard:`` defers what lands until the outermost section exits, ``lifted`` lets it in
    again for a wait with no effect. A way says whether the caller is its run (``_here``: its
    thread, its greenlet), where the sections' depth lives (``depth``) and what their end
    raises (``_release``)."""

    depth: int
    _active: list[bool]

    def _here(self) -> bool:
        raise NotImplementedError

    def _release(self) -> None:
        raise NotImplementedError

    @contextmanager
    def lifted(self) -> Iterator[None]:
        """Inside a critical section: let interrupts through again, for a wait with no effect of
        its own. What was noted is raised on entry; the section's deferral resumes on exit."""
        if not self._here():
            yield
            return
        depth, self.depth = self.depth, 0
        try:
            self._release()
            yield
        finally:
            self.depth = depth

    def __enter__(self) -> Self:
        active = self._here()
        self._active.append(active)
        if active:
            self.depth += 1
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._active.pop():
            return
        self.depth -= 1
        if exc is None:
            self._release()


class DeferSignals(CriticalSections):
    """A run's interrupts: its running window, and the critical sections in which they wait.

    ``with guard.running():`` around a run in the main thread arms them; elsewhere (a run in
    another thread, as some tests do) nothing is deferred and nothing is raised by a signal.
    """

    def __init__(self) -> None:
        self._armed = False
        self._active: list[bool] = []
        #: monotonic time this run's Stop nudge was sent (None: not sent)
        self._stop_sent_at: float | None = None

    @staticmethod
    def tasks_only() -> None:
        """In a Celery pool child: from now on a soft limit counts only between
        ``task_started`` and ``task_ended`` (one that arrives outside is dropped)."""
        _TRAP.tasks_only, _TRAP.in_task = True, False

    @staticmethod
    def task_started() -> None:
        _TRAP.in_task = True

    @staticmethod
    def task_ended() -> None:
        _TRAP.in_task = False

    @property
    def armed(self) -> bool:
        """Signals reach this run: it runs in the main thread of its process."""
        return self._armed

    def arm(self) -> None:
        """Put the trap over the current handlers (Celery's), in the main thread only.

        Signal handlers can only be set, and only run, in the main thread; elsewhere the
        sections defer nothing.
        """
        self._armed = threading.current_thread() is threading.main_thread()
        if self._armed:
            _TRAP.install()

    def limited(self, soft_limit_s: float | None) -> AbstractContextManager[None]:
        """The pool times the chunk and signals its soft limit: nothing to start here."""
        return nullcontext()

    @contextmanager
    def running(self) -> Iterator[None]:
        """The window in which signals end the run by raising their interrupts.

        A run that starts after a shutdown nudge hands over at once.
        """
        self.arm()
        if not self._armed:
            yield
            return
        _TRAP.running, _TRAP.pending = True, None
        self._stop_sent_at = None
        try:
            if _TRAP.draining:
                raise Shutdown("the worker is shutting down")
            yield
        finally:
            _TRAP.running, _TRAP.pending = False, None

    @contextmanager
    def answering(self) -> Iterator[None]:
        """While the run answers an interrupt after its window (the hand-over that a soft limit or
        a shutdown asked for, the stop that Stop asked for): a further interrupt — the soft limit
        landing in a shutdown's hand-over, which a store outage can stretch to seconds — is
        never raised in the middle of the answer, which would leave the run neither ended nor
        handed over (its turn then waits out the lease for the reaper). The answer already does
        what a soft limit or a nudge asks: they are dropped (a shutdown nudge still drains the
        process). A SIGTERM is handed on to the process's own handler once the answer is done;
        the hard limit's SIGKILL ends it anyway."""
        if not (self._armed and threading.current_thread() is threading.main_thread()):
            yield
            return
        _TRAP.answering, _TRAP.terminated = True, False
        try:
            yield
        finally:
            _TRAP.answering = False
            if _TRAP.terminated:
                _TRAP.terminated = False
                _TRAP.forward_signal(signal.SIGTERM, None)

    def stop(self) -> None:
        """Ask the run to stop (from the Stop watcher's thread): ``TurnCancelled`` is raised in
        the run's thread at its next safe point, also while it waits on a socket or a sleep.

        Called again while the nudge is still unseen, it sends it again every ``RESEND_S``: a
        signal that lands after the interpreter's last check and before a blocking call starts
        is handled only when that call returns."""
        if not (self._armed and _TRAP.running):
            return
        now = time.monotonic()
        if self._stop_sent_at is None:
            _TRAP.stops_sent += 1
        elif _TRAP.stops_seen >= _TRAP.stops_sent or now - self._stop_sent_at < RESEND_S:
            return  # seen (raised, or noted for its section's end), or sent a moment ago
        self._stop_sent_at = now
        main = threading.main_thread().ident
        if main is not None:
            signal.pthread_kill(main, NUDGE)

    def _here(self) -> bool:
        return self._armed and threading.current_thread() is threading.main_thread()

    @property  # the trap's: signals are per process
    def depth(self) -> int:
        return _TRAP.depth

    @depth.setter
    def depth(self, value: int) -> None:
        _TRAP.depth = value

    def _release(self) -> None:
        _TRAP.release()


def keep_signals_off_this_thread(signals: Iterable[int]) -> None:
    """First in a helper thread of the runs (the heartbeat, a text flusher): ``signals`` must
    reach the run's thread, where they interrupt a blocking call. A "thread" that is a greenlet
    of that very thread (gevent's patched ``threading``) blocks nothing: its mask would be the
    whole process's, SIGTERM included."""
    if threading.get_native_id() != threading.main_thread().native_id:
        signal.pthread_sigmask(signal.SIG_BLOCK, signals)
