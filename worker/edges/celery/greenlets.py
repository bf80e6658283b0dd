"""A run's interrupts under Celery's gevent pool (docs/deploy.md): thrown into the run's greenlet.

``dres worker -P gevent -c N`` runs up to N chunks as greenlets of one thread, so a signal cannot
say which run it is for, and Celery's gevent pool has no soft limit at all: it only wraps a task
in ``gevent.Timeout(time_limit)``, the hard limit (Celery 5.7, ``celery/concurrency/gevent.py``;
celery/celery#3764, which would have added one, was closed unmerged). Here each run has its own
state (its greenlet, the depth of its critical sections, what waits for their end, whether it is
answering an interrupt), and an interrupt is thrown into its greenlet by the hub, as
``gevent.Timeout`` and ``gevent.kill`` throw theirs: it lands at the run's next wait (a socket,
a sleep, a lock). Whether it is raised, noted or dropped is decided at that moment, by the hub,
while the run is parked at that wait:

- ``SoftLimit``: dres's own soft limit, a timer started with the chunk's task (``limited``) at
  the task's ``soft_time_limit``; a chunk hands over at it as under prefork;
- ``TurnCancelled``: the run's Stop watcher saw Stop (``stop``);
- ``Shutdown``: the worker's warm shutdown began (``shut_down``, on Celery's
  ``worker_shutting_down``): every running chunk hands over at once, and a run that starts
  afterwards hands over as it starts.

Inside a critical section (``with guard:``) an interrupt is only noted, and raised when the
outermost section exits: never between a side effect and its record (docs/semantics.md); ``lifted``
lets them in again for a wait with no effect. While the run answers an interrupt (``answering``)
another one is dropped. Celery's hard limit is not deferred (as prefork's SIGKILL is not): a tool
cut by it stays an interrupted call. A chunk that never yields (a long C call, a busy loop) cannot
be interrupted at all under gevent, by either limit: such tools belong on a prefork worker.

``TaskPool`` is Celery's gevent pool with one fix: Celery ends a running task with
``terminate_job`` (a revoke with ``terminate``, and every running task once the broker connection
is lost: ``worker_cancel_long_running_tasks_on_connection_loss``), which kills its greenlet with
``GreenletExit`` wherever it is, between a tool's effect and its record too, and leaves the turn
to the reaper (Celery 5.7.0, ``celery/concurrency/gevent.py``). Prefork's pool sends the child
SIGTERM there, which dres's trap turns into ``Shutdown``; a dres run here gets ``Shutdown`` too,
at its next safe point, and hands its turn over. Tripwire: ``tests/integration/test_gevent_pool.py``
(a revoked chunk hands over after its write's ``tool_done``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

import gevent
from celery.concurrency import gevent as celery_gevent
from greenlet import greenlet

from worker.base.errors import Interrupt, Shutdown, SoftLimit, TurnCancelled
from worker.engine.tools.guard import CriticalSections


class GreenletInterrupts(CriticalSections):
    """One run's interrupts, raised into its greenlet (``worker.engine.tools.guard.Interrupts``)."""

    #: the runs of this process inside their running window (a shutdown interrupts each)
    running_now: ClassVar[set[GreenletInterrupts]] = set()
    #: the runs of this process inside their chunk's task (Celery may end any: ``terminate``)
    tasks_now: ClassVar[set[GreenletInterrupts]] = set()
    #: the worker's shutdown began: a run that starts now hands over at once
    draining: ClassVar[bool] = False

    def __init__(self) -> None:
        self.greenlet: greenlet | None = None
        self.depth = 0
        self.pending: Interrupt | None = None
        #: inside the chunk's task (``limited``): its soft limit may land
        self.in_task = False
        #: inside the run's window (``running``): Stop and a shutdown may land too
        self.in_run = False
        self.answering_now = False
        self.stop_sent = False
        #: Celery ended the chunk before its run began: the run hands over as it begins
        self.terminated = False
        self._active: list[bool] = []

    @property
    def armed(self) -> bool:
        return self.greenlet is not None

    def arm(self) -> None:
        if self.greenlet is None:
            self.greenlet = gevent.getcurrent()

    def _here(self) -> bool:
        return self.greenlet is not None and gevent.getcurrent() is self.greenlet

    # -- delivery, always in the hub, while the run waits ----------------------------------

    def _send(self, interrupt: Interrupt) -> None:
        """From any greenlet (the heartbeat's, a signal handler's): deliver at the next turn of
        the hub's loop, when the run is parked at a wait."""
        gevent.get_hub().loop.run_callback(self._deliver, interrupt)

    def _deliver(self, interrupt: Interrupt) -> None:
        target = self.greenlet
        if target is None or target.dead or self.answering_now or not self._lands(interrupt):
            return
        if self.depth:
            self.pending = self.pending or interrupt
            return
        try:
            target.throw(interrupt)
        except BaseException:  # as gevent.kill's: what the run let out is the hub's to report
            gevent.get_hub().handle_error(target, *sys.exc_info())

    def _lands(self, interrupt: Interrupt) -> bool:
        """Whether ``interrupt`` still concerns the run: a soft limit the whole task long, Stop
        and a shutdown while it runs."""
        return self.in_task if isinstance(interrupt, SoftLimit) else self.in_run

    # -- the windows -------------------------------------------------------------------------

    @contextmanager
    def limited(self, soft_limit_s: float | None) -> Iterator[None]:
        """The chunk's task: its soft limit is a timer of the hub's, which throws ``SoftLimit``
        into this greenlet ``soft_limit_s`` after the task started (as prefork's pool times
        it from the child's start of the job)."""
        self.arm()
        timer = None
        if soft_limit_s:
            timer = gevent.get_hub().loop.timer(soft_limit_s)
            timer.start(self._deliver, SoftLimit("the chunk's soft time limit"))
        self.in_task = True
        self.tasks_now.add(self)
        try:
            yield
        finally:
            self.in_task = False
            self.tasks_now.discard(self)
            if timer is not None:
                timer.close()

    @contextmanager
    def running(self) -> Iterator[None]:
        self.arm()
        self.in_run, self.pending, self.stop_sent = True, None, False
        self.running_now.add(self)
        try:
            if self.draining or self.terminated:
                raise Shutdown("the worker is shutting down")
            yield
        finally:
            self.in_run, self.pending = False, None
            self.running_now.discard(self)

    @contextmanager
    def answering(self) -> Iterator[None]:
        """What lands now is dropped: the answer (a hand-over, a stop) already does what any
        interrupt asks."""
        if not self._here():
            yield
            return
        self.answering_now = True
        try:
            yield
        finally:
            self.answering_now = False

    def stop(self) -> None:
        """From the Stop watcher: ``TurnCancelled`` once (a throw is not lost, as a signal that
        lands just before a blocking call can be)."""
        if self.in_run and not self.stop_sent:
            self.stop_sent = True
            self._send(TurnCancelled("Stop requested"))

    def terminate(self) -> None:
        """Celery ends the chunk (``TaskPool.terminate_job``): a running run hands over at its
        next safe point; one not running yet (its claim under way, on a Redis that went away)
        as it begins; one past its run ends as it would."""
        self.terminated = True
        if self.in_run:
            self._send(Shutdown("the worker is shutting down"))

    @classmethod
    def of(cls, task: greenlet) -> GreenletInterrupts | None:
        """The run whose chunk's task runs in ``task``'s greenlet now, if one does."""
        return next((run for run in cls.tasks_now if run.greenlet is task), None)

    @classmethod
    def shut_down(cls) -> None:
        """The worker's warm shutdown began: every running run hands over at its next wait (or
        its critical section's end), and one that starts later hands over as it starts."""
        cls.draining = True
        for run in list(cls.running_now):
            run._send(Shutdown("the worker is shutting down"))

    # -- critical sections ---------------------------------------------------------------------

    def _release(self) -> None:
        if self.depth == 0 and self.pending is not None:
            pending, self.pending = self.pending, None
            if self._lands(pending) and not self.answering_now:
                raise pending


class TaskPool(celery_gevent.TaskPool):  # type: ignore[misc]  # celery ships no types
    """Celery's gevent pool, whose ``terminate_job`` hands a dres run ``Shutdown`` at its next
    safe point instead of killing its greenlet wherever it is: between a tool's effect and its
    record, or after its claim and before its run began (a run killed there leaves its turn
    held until its lease runs out: a takeover with no death to explain it)."""

    def terminate_job(self, pid: int, signal: int | None = None) -> None:
        run = GreenletInterrupts.of(self._pool_map.get(pid))
        if run is None:
            super().terminate_job(pid, signal)
            return
        run.terminate()
