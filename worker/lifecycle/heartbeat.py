"""A running run's heartbeat: it renews the run's lease while the run is alive.

The lease is short (``DRES_LEASE_S``) and independent of the chunk's time limits: a thread of the
process running the chunk renews it every third of the lease (as Temporal's activity heartbeats
do), so a run whose process died, was killed or is paused lets its lease run out within one
lease, and the reaper takes the turn over then. A renewal is a fenced step: once another run
holds the turn, the heartbeat stops and the paused run's own appends are refused.

The same thread watches for Stop (docs/semantics.md): every ``poll_s`` it reads the turn's Stop
flag, and once it is set calls ``on_stop``, which interrupts the run's thread wherever it waits — on
a provider that has not sent a byte, in an SDK's retry sleep — at a safe point (the guard defers it
past a tool's ``tool_done``).

The thread is the process's own (``Beats``, which the runtime hands to each run's heartbeat),
started with its first run and kept: a run's heartbeat joins it and leaves it, so a chunk does not
wait for a new thread to be scheduled before it starts (a pool process runs one chunk at a time;
several runs of one process share the thread). Each beat runs in the context of the run that made
it, so it logs with that run's bound fields.

A process that runs many chunks at once (``dres worker -P gevent -c N``, docs/deploy.md), whose
"thread" is a greenlet, has ``BatchedBeats`` instead (its pool's, ``worker.lifecycle.pools``): one
tick for every run, at which every held turn's Stop flag is read and every due lease renewed in one
round trip (``ledger.beats``), with the same lease and Stop semantics as a run's own beats.

What a heartbeat last read of its turn's Stop flag is the answer of ``Beats.stop_seen``: the run's
frequent looks (between two deltas of a stream, in a sleep) read it instead of asking Redis, so a
process of many runs asks once per tick for all of them, not once per look per run.
"""

from __future__ import annotations

import contextvars
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from ledger.beats import Heartbeats, Renewed
from ledger.turns import TurnStore
from worker.base.clock import Clock
from worker.engine.recorder import RunContext
from worker.engine.tools.guard import SIGNALS, keep_signals_off_this_thread

log = structlog.get_logger("dres.heartbeat")

#: signals the heartbeat thread never takes: the run's main thread handles them
BLOCKED = {*SIGNALS, signal.SIGINT}


class Heartbeat:
    """``with Heartbeat(...)``: renew ``run``'s lease every ``interval_s`` until the block ends;
    with ``on_stop``, also look for a Stop request every ``poll_s`` and call it once."""

    def __init__(
        self,
        store: TurnStore,
        run: RunContext,
        clock: Clock,
        *,
        beats: Beats,
        lease_s: float,
        interval_s: float,
        poll_s: float | None = None,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        #: the process's heartbeat thread, which this one joins while its block runs
        self.process_beats = beats
        self.run = run
        self.clock = clock
        self.lease_s = lease_s
        self.interval_s = interval_s
        self.on_stop = on_stop
        #: seconds between the thread's wake-ups
        self.tick_s = min(interval_s, poll_s) if on_stop and poll_s else interval_s
        self.stopping = threading.Event()
        #: renewals done; False once the lease was found lost
        self.beats = 0
        self.held = True
        #: the run's logging context (turn_id, run_id, chunk, epoch): each beat runs in it
        self.context = contextvars.copy_context()
        self.renew_at = 0.0
        self.stop_seen = False
        #: monotonic seconds of the next tick (the process's heartbeat thread keeps it)
        self.next_tick = 0.0

    @property
    def watches(self) -> bool:
        """Does this heartbeat read its turn's Stop flag (and so know it)?"""
        return self.on_stop is not None

    def __enter__(self) -> Heartbeat:
        self.renew_at = self.clock.now() + self.interval_s
        try:
            self.process_beats.join(self)
        except BaseException:
            # An interrupt (a soft limit, a shutdown: a signal handler's exception, or a
            # greenlet's) that lands in here, the heartbeat already joined, reaches no
            # ``__exit__``: the run hands its turn over while its orphaned heartbeat goes on
            # renewing, until a renewal refused by that very hand-over says another run holds
            # the turn (a false "lease lost", counted by chaos as a live run taken over).
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.process_beats.leave(self)
        # No wait for a beat under way: the run's ending must not wait on a renewal stuck on a
        # slow Redis; a late renewal is refused once the turn has ended or been handed over.

    def tick(self) -> bool:
        """One wake-up: look for Stop, renew when due. False once the lease was found lost."""
        if self.stopping.is_set():
            return False
        if self.on_stop is not None:
            # Once seen, the flag is not read again; on_stop is called on every tick (it sends
            # its nudge again only while the run has not taken it).
            self.stop_seen = self.stop_seen or self._stop_requested()
            if self.stop_seen and not self.stopping.is_set():
                self.on_stop()
        if self.clock.now() < self.renew_at:
            return True
        self.renew_at = self.clock.now() + self.interval_s
        return self._renew()

    def _stop_requested(self) -> bool:
        try:
            return self.store.stop_requested(self.run.turn_id)
        except Exception as e:  # a beat must never end the thread: the next tick tries again
            log.warning("could not check for a Stop request", error=repr(e))
            return False

    def _renew(self) -> bool:
        """Renew the lease; False once another run holds the turn."""
        until = int((self.clock.now() + self.lease_s) * 1000)
        try:
            held: Renewed = self.store.renew(self.run.lease, until)
        except Exception as e:
            held = e
        return self._renewed(held)

    def _renewed(self, held: Renewed) -> bool:
        if isinstance(held, Exception):
            # Redis away (or a connection the run's interrupt left broken, until the run drops
            # it): the next beat tries again; a lease that runs out meanwhile is taken over, and
            # this run is then fenced out.
            log.warning("could not renew the lease", error=repr(held))
            return True
        self.held = held
        if not self.held:
            if not self.stopping.is_set():
                log.warning("lease lost: another run holds the turn", run_id=self.run.run_id)
            return False
        self.beats += 1
        return True

    # -- a beat of many runs at once (``BatchedBeats``) -------------------------------------

    def asks(self) -> Ask | None:
        """What this wake-up asks of Redis (as ``tick``); None: the run's heartbeat ended."""
        if self.stopping.is_set():
            return None
        until_ms = None
        if self.clock.now() >= self.renew_at:
            self.renew_at = self.clock.now() + self.interval_s
            until_ms = int((self.clock.now() + self.lease_s) * 1000)
        return Ask(self.on_stop is not None and not self.stop_seen, until_ms)

    def answered(self, stopped: bool, held: Renewed | None) -> bool:
        """The answers to ``asks`` (``held`` None: no renewal was due), taken as ``tick`` takes
        its own; False once the lease was found lost."""
        self.stop_seen = self.stop_seen or stopped
        if self.on_stop is not None and self.stop_seen and not self.stopping.is_set():
            self.on_stop()
        return True if held is None else self._renewed(held)


@dataclass(frozen=True)
class Ask:
    #: read the turn's Stop flag
    watch: bool
    #: renew the lease to this ms time (None: no renewal due)
    until_ms: int | None


class Beats:
    """The process's heartbeat thread and the runs it beats for, each on its own tick and in
    its own round trips (a prefork pool process runs one chunk at a time)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._wake = threading.Condition()
        self._runs: list[Heartbeat] = []
        #: the heartbeats that read their turn's Stop flag, by turn (``stop_seen``)
        self.watching: dict[str, Heartbeat] = {}
        self._thread: threading.Thread | None = None

    def join(self, beat: Heartbeat) -> None:
        with self._wake:
            beat.next_tick = time.monotonic() + beat.tick_s
            self._runs.append(beat)
            if beat.watches:
                self.watching[beat.run.turn_id] = beat
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="dres-heartbeat", daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def leave(self, beat: Heartbeat) -> None:
        with self._wake:
            if beat in self._runs:
                self._runs.remove(beat)
            if self.watching.get(beat.run.turn_id) is beat:
                del self.watching[beat.run.turn_id]

    def stop_seen(self, turn_id: str) -> bool | None:
        """What this process's heartbeat of ``turn_id`` last read of its Stop flag (at most a
        ``DRES_CANCEL_POLL_S`` tick old; True once seen); None when no heartbeat of this process
        reads it (the caller asks Redis)."""
        if self.pid != os.getpid():
            return None
        beat = self.watching.get(turn_id)
        if beat is None or beat.stopping.is_set():
            return None
        return beat.stop_seen

    def _loop(self) -> None:
        # The soft limit (SIGUSR1) and shutdown signals must reach the run's thread: delivered to
        # this one, they would not interrupt a blocking call of the run (a socket read, a sleep).
        keep_signals_off_this_thread(BLOCKED)
        while True:
            with self._wake:
                if not self._runs:
                    self._wake.wait()
                    continue
                now = time.monotonic()
                due = self._due(now)
                if not due:
                    self._wake.wait(min(beat.next_tick for beat in self._runs) - now)
                    continue
                for beat in due:
                    beat.next_tick = now + beat.tick_s
            self._beat(due)  # outside the lock: a renewal may wait on a slow Redis

    def _due(self, now: float) -> list[Heartbeat]:
        return [beat for beat in self._runs if beat.next_tick <= now]

    def _beat(self, due: list[Heartbeat]) -> None:
        for beat in due:
            try:
                beating = beat.context.run(beat.tick)
            except Exception:  # one run's failure must not stop the beats of the process
                log.exception("a heartbeat failed; the next tick tries again")
                beating = True
            if not beating:
                self.leave(beat)


class BatchedBeats(Beats):
    """The heartbeat of a process that runs many chunks at once (gevent): at each tick every
    run's Stop flag is read and every due lease renewed, all in one round trip per store
    (``ledger.beats``); Stop is handed to the run it concerns (its ``on_stop``)."""

    def __init__(self) -> None:
        super().__init__()
        self._stores: dict[int, Heartbeats] = {}

    def _due(self, now: float) -> list[Heartbeat]:
        # one tick for all: once any run is due, every run is beaten with it
        return list(self._runs) if super()._due(now) else []

    def _beat(self, due: list[Heartbeat]) -> None:
        by_store: dict[int, list[Heartbeat]] = {}
        for beat in due:
            by_store.setdefault(id(beat.store), []).append(beat)
        for beats in by_store.values():
            try:
                self._beat_together(beats)
            except Exception as e:  # the next tick tries again; a lease may run out meanwhile
                log.warning("could not renew the leases", runs=len(beats), error=repr(e))

    def _beat_together(self, due: list[Heartbeat]) -> None:
        asks = [(beat, beat.asks()) for beat in due]
        live = [(beat, ask) for beat, ask in asks if ask is not None]
        for beat, ask in asks:
            if ask is None:
                self.leave(beat)
        renewing = [(beat, ask.until_ms) for beat, ask in live if ask.until_ms is not None]
        watching = [beat for beat, ask in live if ask.watch]
        store = due[0].store
        heartbeats = self._stores.get(id(store))
        if heartbeats is None or heartbeats.store is not store:
            heartbeats = self._stores[id(store)] = Heartbeats(store)
        answer = heartbeats.beat(
            [(beat.run.lease, until_ms) for beat, until_ms in renewing],
            [beat.run.turn_id for beat in watching],
        )
        held: dict[int, Renewed] = {
            id(beat): renewed for (beat, _), renewed in zip(renewing, answer.held, strict=True)
        }
        stopped = {id(beat) for beat, stop in zip(watching, answer.stopped, strict=True) if stop}
        for beat, _ in live:
            taken = beat.context.run(beat.answered, id(beat) in stopped, held.get(id(beat)))
            if not taken:
                self.leave(beat)
