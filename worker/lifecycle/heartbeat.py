"""A running run's heartbeat: it renews the run's lease while the run is alive.

The lease is short (``DRES_LEASE_S``) and independent of the chunk's time limits: a thread of the
process running the chunk renews it every third of the lease (as Temporal's activity heartbeats
do), so a run whose process died, was killed or is paused lets its lease run out within one
lease, and the reaper takes the turn over then. A renewal is a fenced step: once another run
holds the turn, the heartbeat stops and the paused run's own appends are refused.

The same thread watches for Stop (CONTRACT §7.8): every ``poll_s`` it reads the turn's Stop flag,
and once it is set calls ``on_stop``, which interrupts the run's thread wherever it waits — on a
provider that has not sent a byte, in an SDK's retry sleep — at a safe point (the guard defers it
past a tool's ``tool_done``).
"""

from __future__ import annotations

import contextvars
import signal
import threading
from collections.abc import Callable
from types import TracebackType

import structlog

from ledger.turns import TurnStore
from worker.base.clock import Clock
from worker.engine.recorder import RunContext
from worker.engine.tools.guard import SIGNALS

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
        lease_s: float,
        interval_s: float,
        poll_s: float | None = None,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
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
        # The thread logs with the run's bound context (turn_id, run_id, chunk, epoch).
        context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=context.run, args=(self._beat,), name=f"dres-heartbeat-{run.run_id}", daemon=True
        )

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stopping.set()
        # No join: the run's ending must not wait on a renewal stuck on a slow Redis; a late
        # renewal is refused once the turn has ended or been handed over.

    def _beat(self) -> None:
        # The soft limit (SIGUSR1) and shutdown signals must reach the main thread: delivered to
        # this one, they would not interrupt a blocking call of the run (a socket read, a sleep).
        signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED)
        renew_at = self.clock.now() + self.interval_s
        stop_seen = False
        while not self.stopping.wait(self.tick_s):
            if self.on_stop is not None:
                # Once seen, the flag is not read again; on_stop is called on every tick (it
                # sends its nudge again only while the run has not taken it).
                stop_seen = stop_seen or self._stop_requested()
                if stop_seen and not self.stopping.is_set():
                    self.on_stop()
            if self.clock.now() < renew_at:
                continue
            renew_at = self.clock.now() + self.interval_s
            if not self._renew():
                return

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
            self.held = self.store.renew(self.run.lease, until)
        except Exception as e:
            # Redis away (or a connection the run's interrupt left broken, until the run drops
            # it): the next beat tries again; a lease that runs out meanwhile is taken over, and
            # this run is then fenced out.
            log.warning("could not renew the lease", error=repr(e))
            return True
        if not self.held:
            if not self.stopping.is_set():
                log.warning("lease lost: another run holds the turn", run_id=self.run.run_id)
            return False
        self.beats += 1
        return True
