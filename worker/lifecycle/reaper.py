"""The reaper: finds turns nobody is moving and moves them, loudly (docs/commands.md,
docs/semantics.md).

It looks at the turns in the active index whose time has come:
- a running turn whose lease ran out (its worker died, was killed or is paused: a live run's
  heartbeat renews the lease): a background turn resumes under a new run, a foreground one stops
  with Continue available;
- a pending run not yet claimed: while its message waits in the broker (a backlog: more turns
  than worker slots) nothing is done; a message that is nowhere (lost between the record and the
  send, or by the broker) is sent again, up to ``max_redispatches`` times, then the turn stops
  with Continue available. The message's mark in the broker answers "still there?" for each due
  run at O(1) (``worker.edges.celery.marks``); only a run without one costs a read of the queues;
- a turn waiting for approval whose first request expired stops (``approval_expired``);
- a turn held behind its conversation's line is let through once the line is free (its release
  is normally done by the end of the turn before it: this is for a crash in between);
- a turn missing from its conversation's list (a crash right after its creation) is listed;
- an ended or vanished turn leaves the index.
Every action is an atomic step of the turn's state machine, so every worker may run a reaper.

After an outage of Redis (a restart, a failover, a pause) every live run's lease may have run
out unrenewed: the reaper takes no run for dead until a lease and the time to reconnect have
passed since it last failed to reach Redis, saw it answer only after a stall, or found it
restarted (``_calm_for``). A redelivered message of a run whose lease ran out leaves the turn
to it (``ChunkPath.not_claimed``).
"""

from __future__ import annotations

import math
import os
import random
import secrets
import socket
import threading
import time
from collections.abc import Callable

import structlog

from ledger.errors import CorruptTurn, LedgerUnavailable, TransitionRefused, UnknownTurn
from ledger.presence import BEAT_S, Presence
from ledger.store import STORE_ERRORS, MetaValue
from ledger.turn import Step, StopCode, TurnMeta, TurnStatus
from worker.base import metrics
from worker.base.forks import no_fork
from worker.lifecycle.service import Lifecycle
from worker.lifecycle.timers import timer_due

log = structlog.get_logger("dres.reaper")

#: turns taken from the index at once (one round trip reads them all, one wakes their timers)
BATCH = 200
#: seconds a reaper holds the turns it took (others take other turns meanwhile); a turn's look
#: sets its next itself, so only a reaper that dies with turns taken lets a hold run out
HOLD_S = 5.0
#: seconds a sweep goes on taking full batches (10,000 timers due at once are woken in one
#: sweep of each worker's reaper, not 200 a sweep); the sweep after it takes the rest
SWEEP_BUDGET_S = 5.0
#: a run's mark (its message is in the broker) is taken at its word for this many hand-off
#: graces after the run was sent; after that it is checked against the broker while the queues
#: are short: a worker killed between taking a message from its queue and holding it
#: unacknowledged (kombu's Redis transport does these in two steps) loses the message and
#: leaves its mark, which is deleted only with an acknowledgement
MARK_TRUST_GRACES = 2.0
#: messages in the chunk queues up to which an old mark is checked by reading them (~1 KB each);
#: behind a longer backlog the wait is the backlog's, and the mark is trusted until it shrinks
SHORT_BACKLOG = 1000
#: seconds a live run's heartbeat may take to reach Redis once it answers again, beyond the
#: reaper's own look: each may be asleep in a backoff when it comes back, the ledger's
#: (``ledger.store.BACKOFF_CAP_S``, 1 s) and redis-py's own retry's (its cap, 1 s)
RECONNECT_S = 2.0
#: seconds at least between a sweep and the one a timer's time brings forward
TIMER_GAP_S = 0.02
#: each wait between sweeps is ``reaper_interval_s`` times 1 +- this, at random: workers started
#: together (a deploy) do not sweep in step, and the due turns' sweeps are spread out
JITTER = 0.2


class Reaper:
    def __init__(
        self, lifecycle: Lifecycle, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.lifecycle = lifecycle
        #: the clock of outages (the ledger's ``last_error_at`` is on it too)
        self.monotonic = monotonic
        #: when this reaper last saw Redis answer only after a stall, or found it restarted
        #: (None: never)
        self._stalled_at: float | None = None
        #: the Redis server's run id as last read (``Ledger.server_run``; None: not read yet)
        self._server: str | None = None
        self.store = lifecycle.store
        self.settings = lifecycle.settings
        self.clock = lifecycle.clock
        #: the broker's run ids, read at most once per sweep (None: not read yet this sweep)
        self._queued: set[str] | None = None
        self._queued_read = False
        #: the chunk queues' length, read at most once per sweep (None: not looked into)
        self._backlog: int | None = None
        self._backlog_read = False

    def sweep(self) -> dict[str, str]:
        """Look at every due turn once; returns what was done to each."""
        self._queued, self._queued_read = None, False
        self._backlog, self._backlog_read = None, False
        now_ms = self.lifecycle.ms()
        try:
            started = self.monotonic()
            self._look_at_server()
            if not self.store.batches:  # a Redis Cluster: one turn at a time, as read
                due = self.store.due(now_ms, BATCH)
                if self._stalled(started, self.settings.heartbeat_s):
                    now_ms = self.lifecycle.ms()
                done = {turn_id: self.check(turn_id, now_ms) for turn_id in due}
            else:
                done = self._take_and_look(started, now_ms)
            # the hooks' periodic look: tenants' waiting turns that may start (a rate's next
            # start, a slot a crash left taken), whatever the due turns were
            self.lifecycle.let_through(self.lifecycle.hooks.sweep())
            self._fire_schedules()
            return done
        except (*STORE_ERRORS, LedgerUnavailable):
            self.store.ledger.note_unreachable()  # live runs get a full lease after it
            raise

    def _fire_schedules(self) -> None:
        """The due schedules' ticks (``Schedules.fire_due_schedules``); a failure there is
        logged and never breaks the sweep of turns (the next sweep looks again)."""
        try:
            self.lifecycle.fire_due_schedules()
        except Exception as e:
            log.warning("could not fire the due schedules", error=repr(e))

    def _take_and_look(self, started: float, now_ms: int) -> dict[str, str]:
        """Take the due turns a batch at a time (held from the other reapers while looked at)
        and look at each batch, until one is not full or the sweep's budget is spent."""
        done: dict[str, str] = {}
        hold_ms = int(HOLD_S * 1000)
        while True:
            taken = self.monotonic()
            due = self.store.take_due(now_ms, BATCH, hold_ms)
            if self._stalled(taken, self.settings.heartbeat_s):
                now_ms = self.lifecycle.ms()
            done.update(self._look_at(due, now_ms))
            if len(due) < BATCH or self.monotonic() - started > SWEEP_BUDGET_S:
                return done
            now_ms = self.lifecycle.ms()

    def _look_at(self, due: list[str], now_ms: int) -> dict[str, str]:
        """Look at a batch of due turns: their metadata read at once, the timers that fell due
        woken together (``Timers.wake_all``), every other turn by itself (``check``)."""
        if not due:
            return {}
        started = self.monotonic()
        metas = self.store.metas(due)
        self._stalled(started, self.settings.lease_s - self.settings.heartbeat_s)
        done: dict[str, str] = {}
        timers = []
        for turn_id, meta in zip(due, metas, strict=True):
            if isinstance(meta, TurnMeta) and timer_due(meta, now_ms):
                timers.append(meta)
                continue
            with structlog.contextvars.bound_contextvars(turn_id=turn_id):
                done[turn_id] = self._checked(turn_id, now_ms, meta)
        done.update(self.lifecycle.wake_all(timers))
        return done

    def check(self, turn_id: str, now_ms: int) -> str:
        with structlog.contextvars.bound_contextvars(turn_id=turn_id):
            return self._check(turn_id, now_ms)

    def _look_at_server(self) -> None:
        """Read the server's run id: a new one is a restart (or a failover) that this process
        may not have seen fail at all (redis-py reconnects inside a command, and a short outage
        between two sweeps costs none of them a stall), and that kept every live run from
        renewing, its last renewal perhaps lost with the AOF's last second: an outage."""
        server = self.store.ledger.server_run()
        if self._server is not None and server != self._server:
            log.warning("redis restarted: live runs get a full lease to renew", server=server)
            self._stalled_at = self.monotonic()
        self._server = server

    def _stalled(self, started: float, over_s: float) -> bool:
        """Did Redis answer a read begun at ``started`` only after a stall of more than
        ``over_s`` (a paused server, a partition that healed, a restart ridden out inside the
        client)? The heartbeats waited as long, so it counts as an outage."""
        if self.monotonic() - started <= over_s:
            return False
        self._stalled_at = self.monotonic()
        return True

    def _check(self, turn_id: str, now_ms: int) -> str:
        meta: TurnMeta | UnknownTurn | CorruptTurn
        started = self.monotonic()
        try:
            meta = self.store.meta(turn_id)
        except (UnknownTurn, CorruptTurn) as e:
            meta = e
        # A pause that began after the sweep's first read: only one long enough to let a
        # renewed lease run out counts (a busy process's own latency, in a gevent worker
        # beside many runs, must not put off every take-over), a restart is the run id's
        self._stalled(started, self.settings.lease_s - self.settings.heartbeat_s)
        return self._checked(turn_id, now_ms, meta)

    def _checked(
        self, turn_id: str, now_ms: int, meta: TurnMeta | UnknownTurn | CorruptTurn
    ) -> str:
        """What to do with a due turn, given its metadata as read (or why it could not be)."""
        if isinstance(meta, UnknownTurn):
            self.store.unwatch(turn_id)
            return "gone"
        if isinstance(meta, CorruptTurn):
            log.error("turn metadata unreadable; left alone", error=str(meta))
            self.store.unwatch(turn_id)
            return "unreadable"
        if not meta.listed:
            self.store.list_in_conversation(turn_id, meta.conversation_id)
        if meta.ended:
            self.store.unwatch(turn_id)
            return "finished"
        if meta.status == TurnStatus.RUNNING:
            if meta.lease_until > now_ms:
                self.store.watch(turn_id, meta.lease_until)
                return "alive"
            calm, grace = self._calm_for(), self.settings.lease_s + RECONNECT_S
            if calm < grace:
                # This process could not reach Redis a moment ago, or found it restarted: an
                # outage that every worker saw (a restart, a failover, a pause) kept every live
                # run from renewing its lease too. Each gets a full lease after the outage, and
                # the time to reach Redis again, to renew before any is taken for dead.
                self.store.watch(turn_id, self.lifecycle.ms(grace - calm))
                return "alive"
            return self.lifecycle.take_over(meta, "lease expired: the run's worker died").reason
        if meta.status == TurnStatus.WAITING:
            return self.lifecycle.expire_if_due(meta)
        return self._pending(meta)

    def _calm_for(self) -> float:
        """Seconds since this process last failed to reach the ledger's Redis, or this reaper
        saw it answer only after a stall or found it restarted (inf: none of these)."""
        seen = [t for t in (self.store.ledger.last_error_at, self._stalled_at) if t is not None]
        return self.monotonic() - max(seen) if seen else float("inf")

    def _held(self, meta: TurnMeta) -> str:
        """A turn queued behind its conversation's line: let it through if the line is free,
        else look again later."""
        released = self.lifecycle.advance(meta.conversation_id)
        if released is not None and released.turn_id == meta.turn_id:
            return "released"
        self.store.watch(meta.turn_id, self.lifecycle.ms(self.settings.handoff_grace_s))
        return "held"

    def _pending(self, meta: TurnMeta) -> str:
        if meta.held:
            return self._held(meta)
        grace = self.settings.handoff_grace_s
        waited = self.clock.now() - meta.dispatched
        if waited < grace:
            self.store.watch(meta.turn_id, self.lifecycle.ms(grace - waited))
            return "waiting"
        if self._in_broker(meta):
            # In the broker: a backlog delays a turn, it never stops it nor gets a second message.
            self.store.watch(meta.turn_id, self.lifecycle.ms(grace))
            return "queued"
        if meta.redispatches >= self.settings.max_redispatches:
            detail = f"the next chunk was sent {meta.redispatches + 1} times and never started"
            expect: dict[str, MetaValue] = {"next_run": meta.next_run, "epoch": meta.epoch}
            return self.lifecycle.stop_loudly(
                meta, Step.STOP_PENDING, expect, StopCode.HANDOFF_LOST, detail
            ).reason
        try:
            self.store.transition(
                meta.turn_id,
                Step.REDISPATCH,
                expect={"next_run": meta.next_run, "redispatches": meta.redispatches},
                fields={"redispatches": meta.redispatches + 1, "dispatched": self.clock.now()},
            )
        except (TransitionRefused, UnknownTurn) as e:  # claimed meanwhile: the next look sees
            log.info("pending run moved on before its re-dispatch", error=str(e))
            return "changed"
        self.lifecycle.launch(meta.turn_id, meta.next_run, meta.mode)
        log.warning("re-dispatched a lost message", turn_id=meta.turn_id, run_id=meta.next_run)
        return "redispatched"

    def _in_broker(self, meta: TurnMeta) -> bool:
        """Is the pending run's message in the broker (queued, or held by a worker), or can the
        broker not be looked into (then nothing is taken for lost)? Its mark answers at O(1)
        (``worker.edges.celery.marks``); without one, or with one old enough to doubt while the
        queues are short (``_doubted``), the broker's queues are read as before, at most once per
        sweep: a message sent without a mark is never taken for lost."""
        dispatcher = self.lifecycle.dispatcher
        try:
            if dispatcher.marked(meta.turn_id, meta.next_run) and not self._doubted(meta):
                return True
        except Exception as e:  # an unreachable broker: take nothing for lost this sweep
            log.warning("could not look into the broker", error=repr(e))
            return True
        queued = self._broker_runs()
        return queued is None or meta.next_run in queued

    def _doubted(self, meta: TurnMeta) -> bool:
        """Is this run's mark old enough to check, with queues short enough to read?"""
        trusted = MARK_TRUST_GRACES * self.settings.handoff_grace_s
        if self.clock.now() - meta.dispatched < trusted:
            return False
        if not self._backlog_read:  # once per sweep, whatever the number of due runs
            self._backlog_read = True
            self._backlog = self.lifecycle.dispatcher.backlog()
        return self._backlog is not None and self._backlog <= SHORT_BACKLOG

    def _broker_runs(self) -> set[str] | None:
        if not self._queued_read:
            self._queued_read = True
            try:
                self._queued = self.lifecycle.dispatcher.queued_runs()
            except Exception as e:  # an unreachable broker: take nothing for lost this sweep
                log.warning("could not look into the broker", error=repr(e))
                self._queued = None
        return self._queued


class ReaperThread(threading.Thread):
    """The worker's main process's own thread: says every ``presence.BEAT_S`` that the worker is
    alive (``ledger.presence``: ``GET /healthz`` counts the workers) and, with ``sweeps``, sweeps
    every ``reaper_interval_s`` (+-``JITTER``), until stopped. ``depart`` (as the worker's warm
    shutdown begins: it takes no new chunk) and ``stop`` take the worker off the list at once;
    a worker that departs goes on sweeping until it stops."""

    def __init__(self, reaper: Reaper, *, sweeps: bool = True) -> None:
        super().__init__(name="dres-reaper", daemon=True)
        self.reaper = reaper
        self.sweeps = sweeps
        self.stopping = threading.Event()
        self.departing = False
        #: set by ``stop`` and ``depart``: the thread looks at once
        self._wake = threading.Event()
        self.presence = Presence(reaper.store.client)
        #: this worker in the list: its host and process, and a few random bytes (a pid reused)
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"

    def wait_s(self) -> float:
        """Seconds until the next sweep."""
        return self.reaper.settings.reaper_interval_s * random.uniform(1 - JITTER, 1 + JITTER)

    def run(self) -> None:
        beat_at = time.monotonic()  # at once: the worker is counted as soon as it is ready
        sweep_at = beat_at + self.wait_s() if self.sweeps else math.inf
        if self.sweeps:
            log.info("reaper started", interval_s=self.reaper.settings.reaper_interval_s)
        while True:
            self._wake.wait(max(0.0, min(beat_at, sweep_at) - time.monotonic()))
            self._wake.clear()  # the flags are read after: a wake-up now is not lost
            with no_fork():  # the pool's forks wait: no child starts with a lock it holds
                if self.stopping.is_set() or self.departing:
                    if beat_at < math.inf:  # after any beat under way: none puts it back
                        self._leave()
                        beat_at = math.inf
                    if self.stopping.is_set():
                        return
                elif time.monotonic() >= beat_at:
                    self._beat()
                    beat_at = time.monotonic() + BEAT_S
                if time.monotonic() >= sweep_at:
                    self._sweep()
                    sweep_at = time.monotonic() + min(self.wait_s(), self._next_timer_s())

    def _next_timer_s(self) -> float:
        """Seconds until the next timer falls due (``TurnStore.next_timer``), at least
        ``TIMER_GAP_S``: every worker's reaper sweeps then, so timers due together are woken by
        all of them at once, at their time (inf: none hinted, or Redis away)."""
        try:
            now_ms = self.reaper.lifecycle.ms()
            due_ms = self.reaper.store.next_timer(now_ms)
        except Exception as e:  # Redis away: the regular sweeps go on
            log.warning("could not read when the next timer falls due", error=repr(e))
            return math.inf
        return math.inf if due_ms is None else max(TIMER_GAP_S, (due_ms - now_ms) / 1000)

    def depart(self) -> None:
        """Take this worker off the list of the live ones, and beat no more; sweep on. Only sets
        flags: called from the worker's shutdown signal handler."""
        self.departing = True
        self._wake.set()

    def stop(self) -> None:
        """Stop, leaving the list (``depart``) if it has not yet."""
        self.stopping.set()
        self._wake.set()

    def _leave(self) -> None:
        try:
            self.presence.leave(self.worker_id)
        except Exception as e:  # its entry ages out of the window instead
            log.warning("could not take this worker off the list", error=repr(e))

    def _beat(self) -> None:
        try:
            self.presence.beat(self.worker_id, self.reaper.lifecycle.ms())
        except Exception as e:  # Redis away: the next beat tries again
            log.warning("could not say this worker is alive", error=repr(e))

    def _sweep(self) -> None:
        try:
            actions = self.reaper.sweep()
        except Exception as e:  # a sweep must never kill the thread; the next one retries
            log.error("reaper sweep failed", error=repr(e))
            return
        metrics.reaper_swept(actions.values())
        quiet = {
            "alive",
            "waiting",
            "queued",
            "awaiting_approval",
            "awaiting_client",
            "timer",
            "held",
            # timers woken: one line a batch already ("timers fell due", worker.lifecycle.timers)
            "woken",
            "woken_held",
        }
        moved = {t: a for t, a in actions.items() if a not in quiet}
        if moved:
            log.info("reaper sweep", actions=moved)
