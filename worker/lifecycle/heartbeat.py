"""A running run's heartbeat: it renews the run's lease while the run is alive.

The lease is short (``DRES_LEASE_S``) and independent of the chunk's time limits: a thread of the
process running the chunk renews it every third of the lease (as Temporal's activity heartbeats
do), so a run whose process died, was killed or is paused lets its lease run out within one
lease, and the reaper takes the turn over then. A renewal is a fenced step: once another run
holds the turn, the heartbeat stops and the paused run's own appends are refused.
"""

from __future__ import annotations

import signal
import threading
from types import TracebackType

import redis
import structlog

from ledger.errors import LedgerError
from ledger.turns import TurnStore
from worker.base.clock import Clock
from worker.engine.recorder import RunContext

log = structlog.get_logger("dres.heartbeat")

#: signals the heartbeat thread never takes: the run's main thread handles them
BLOCKED = {signal.SIGUSR1, signal.SIGTERM, signal.SIGINT}


class Heartbeat:
    """``with Heartbeat(...)``: renew ``run``'s lease every ``interval_s`` until the block ends."""

    def __init__(
        self, store: TurnStore, run: RunContext, clock: Clock, *, lease_s: float, interval_s: float
    ) -> None:
        self.store = store
        self.run = run
        self.clock = clock
        self.lease_s = lease_s
        self.interval_s = interval_s
        self.stopping = threading.Event()
        #: renewals done; False once the lease was found lost
        self.beats = 0
        self.held = True
        self._thread = threading.Thread(
            target=self._beat, name=f"dres-heartbeat-{run.run_id}", daemon=True
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
        while not self.stopping.wait(self.interval_s):
            until = int((self.clock.now() + self.lease_s) * 1000)
            try:
                self.held = self.store.renew(self.run.lease, until)
            except (LedgerError, redis.RedisError) as e:
                # Redis away: the next beat tries again; a lease that runs out meanwhile is taken
                # over, and this run is then fenced out.
                log.warning("could not renew the lease", error=repr(e))
                continue
            if not self.held:
                if not self.stopping.is_set():
                    log.warning("lease lost: another run holds the turn", run_id=self.run.run_id)
                return
            self.beats += 1
