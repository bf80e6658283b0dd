"""Tenants: fair, bounded, never starved (docs/semantics.md, tenants) — the lifecycle's admission
hook.

A turn belongs to a tenant (``default`` when none is named). New turns start in fair order: when
they have to wait for a worker, they wait here, in Redis, held by no worker and by no Celery
message, and start round-robin across the tenants with waiting turns (``ledger.tenants``). Only
``AHEAD`` new turns at a time are let into the broker's chunk queues beyond what the workers have
taken, so that one tenant's burst does not fill the broker's FIFO queue ahead of a later tenant:
the turns behind wait here, where the order is fair. What an admitted turn needs next — its next
chunk, a hand-over, a crash pickup — goes to the broker at once, as before, holding the turn's
slot; a turn resuming after a wait takes its tenant's next free slot before any new turn does.

``DRES_TENANT_CONCURRENCY`` bounds a tenant's turns holding a slot (running or resuming, across
all workers), ``DRES_TENANT_RATE`` spaces its starts evenly, ``DRES_TENANT_MAX_QUEUED`` refuses one
more waiting turn (``QueueFull``: 429). Every process reads the limits from its own settings:
run the API and the workers with the same ones.

A slot is given back when its turn ends, stops or waits (``leave``); a crash between that step
and the turn's end leaves it taken until a reaper's sweep finds its turn ended, waiting or gone
(``_mend``) — a tenant then runs fewer turns for a while, never more.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import structlog

from ledger.ids import TENANT_RULE, is_tenant
from ledger.tenants import Admissions, Admitted, Ahead, Limits, Tenants
from ledger.turn import TurnMeta, TurnStatus
from ledger.turns import TurnStore
from worker.base import metrics
from worker.base.clock import Clock
from worker.base.errors import InvalidInput, QueueFull
from worker.base.settings import Settings
from worker.engine.recorder import RunContext
from worker.lifecycle.dispatch import Dispatcher
from worker.lifecycle.hooks import NOTHING, Hook

log = structlog.get_logger("dres.tenants")

DEFAULT = "default"
#: new turns let into the broker's chunk queues beyond what the workers took (the messages
#: waiting there): enough that a worker freed finds its next turn queued, few enough that a later
#: tenant's turn waits behind at most these of another's
AHEAD = 2
#: a slot whose turn is gone is given back once it is this old (ms): a new turn takes its slot
#: just before its turn is recorded
GONE_AFTER_MS = 60_000
#: a slot whose turn ended or waits is given back once it is this old (ms): a resuming turn takes
#: its slot just before its step, and an ending one gives it back just after
SETTLED_AFTER_MS = 10_000
#: seconds between two mendings of the slots by one process's reaper
MEND_S = 5.0
#: slots of one tenant looked at per mend, the oldest first
MEND_MOST = 500
#: the causes of a run that goes on with a turn admitted before: after a wait (approval, client
#: tool, timer) or a stop (Continue); each takes its tenant's next free slot before new turns,
#: needs no room in the broker ahead of the workers and spends none of the tenant's rate
RESUMES = frozenset({"approval", "tool_output", "timer", "continue", "auto_continue"})


def tenant_of(tenant: str | None) -> str:
    """The tenant a request names (none: ``default``), or ``InvalidInput`` naming the rule."""
    if tenant is None or tenant == "":
        return DEFAULT
    if not is_tenant(tenant):
        raise InvalidInput(f"tenant: {TENANT_RULE}, not {tenant!r}")
    return tenant


def kind_of(meta: TurnMeta) -> str:
    """``resume`` for a turn going on after a wait or a stop (it goes before new turns), else
    ``new``."""
    return "resume" if meta.runs and meta.next_cause in RESUMES else "new"


class Tenancy(Hook):
    gates = True

    def __init__(
        self,
        store: TurnStore,
        settings: Settings,
        clock: Clock,
        dispatcher: Dispatcher,
    ) -> None:
        self.store = store
        self.tenants: Tenants = store.tenants
        self.settings = settings
        self.clock = clock
        self.dispatcher = dispatcher
        self.limits = Limits(
            concurrency=settings.tenant_concurrency or 0,
            interval_ms=round(settings.tenant_start_interval_s * 1000),
        )
        self._mended_at = -math.inf
        #: the broker's chunk queues on the ledger's server (() none there; None not read yet)
        self._queues: tuple[str, ...] | None = None

    # -- the hook ------------------------------------------------------------------------------

    def refuse(self, tenant: str) -> None:
        most = self.settings.tenant_max_queued
        if most is None:
            return
        waiting = self.tenants.queued(tenant)
        if waiting >= most:
            raise QueueFull(
                f"tenant {tenant!r} has {waiting} turns queued, its most "
                f"(DRES_TENANT_MAX_QUEUED={most}); try again later",
                self.retry_after_s(),
            )

    def start(self, tenant: str, turn_id: str) -> bool:
        ahead = self._ahead()
        if ahead is not None:  # the broker's room read in the same script
            return self.tenants.start(tenant, turn_id, self._now(), self.limits, ahead)
        # the ledger first (nothing waits, the tenant's slots and rate allow), then the broker's
        # room: a slot taken where the broker has none is given back, and the turn waits
        if not self.tenants.start(tenant, turn_id, self._now(), self.limits, AHEAD):
            return False
        try:
            room = self._broker_room(strict=True)
        except Exception:
            self.tenants.leave(turn_id, self._now(), self.limits, 0)
            raise
        if room > 0:
            return True
        self.tenants.leave(turn_id, self._now(), self.limits, 0)
        return False

    def wait(self, meta: TurnMeta, kind: str) -> Sequence[Admitted]:
        admissions = self.tenants.wait(
            meta.tenant, meta.turn_id, kind, self._now(), self.limits, self._room()
        )
        return self._waited(meta, admissions)

    def wait_all(self, metas: Sequence[TurnMeta], kind: str) -> list[Sequence[Admitted]]:
        if not self.store.batches or len(metas) < 2:
            return [self.wait(meta, kind) for meta in metas]
        turns = [(meta.tenant, meta.turn_id) for meta in metas]
        answers = self.tenants.wait_all(turns, kind, self._now(), self.limits, self._room())
        return [self._waited(m, a) for m, a in zip(metas, answers, strict=True)]

    def leave(self, turn_id: str) -> Sequence[Admitted]:
        return self._started(self.tenants.leave(turn_id, self._now(), self.limits, self._room()))

    def claimed(self, run: RunContext) -> Sequence[Admitted]:
        # a new turn's message left the queue: a waiting turn may take its place there (a later
        # chunk's claim costs nothing here: the turn's end and the sweeps let turns through too)
        if run.cause != "first" or not self.tenants.anyone_waiting():
            return NOTHING
        return self.pump()

    def sweep(self) -> Sequence[Admitted]:
        now = self.clock.now()
        if not self._mended_at <= now < self._mended_at + MEND_S:  # (a clock set back mends too)
            self._mended_at = now
            self._mend()
        return self.pump()

    # -- helpers -------------------------------------------------------------------------------

    def pump(self) -> Sequence[Admitted]:
        return self._started(self.tenants.pump(self._now(), self.limits, self._room()))

    def view(self, tenant: str) -> dict[str, object]:
        """``GET /v1/tenants/{tenant}``: its counts and the limits this process applies."""
        counts = self.tenants.counts(tenant_of(tenant))
        return {
            "tenant": tenant,
            "running": counts.running,
            "queued": counts.queued,
            "limits": {
                "concurrency": self.settings.tenant_concurrency,
                "rate": self.settings.tenant_rate or None,
                "max_queued": self.settings.tenant_max_queued,
            },
        }

    def retry_after_s(self) -> int:
        """When a refused request may try again: a start's spacing under a rate, else 1 s."""
        return max(1, math.ceil(self.settings.tenant_start_interval_s))

    def _waited(self, meta: TurnMeta, admissions: Admissions) -> Sequence[Admitted]:
        if admissions.queued and all(a.turn_id != meta.turn_id for a in admissions.admitted):
            metrics.tenant_queued(self._label(meta.tenant))
            log.info("turn waits for its tenant", turn_id=meta.turn_id, tenant=meta.tenant)
        return self._started(admissions)

    def _started(self, admissions: Admissions) -> Sequence[Admitted]:
        for admitted in admissions.admitted:
            if admitted.waited_ms:
                metrics.tenant_waited(self._label(admitted.tenant), admitted.waited_ms / 1000)
        return admissions.admitted

    def _label(self, tenant: str) -> str:
        return tenant if self.settings.metrics_tenant_label else ""

    def _now(self) -> int:
        return int(self.clock.now() * 1000)

    def _ahead(self) -> Ahead | None:
        """The room as the tenants' script reads it itself, when the broker is the ledger's own
        server (its queues' keys, read once); None: it is asked apart (``_room``)."""
        if self._queues is None:
            try:
                self._queues = self.dispatcher.queue_keys() or ()
            except Exception as e:  # asked again next time
                log.warning("could not name the broker's queues", error=repr(e))
                return None
        return Ahead(AHEAD, self._queues) if self._queues else None

    def _room(self) -> int | Ahead:
        """How many new turns may go into the broker's chunk queues now (``AHEAD`` less the
        messages waiting there): read by the tenants' script itself where it can, else asked."""
        ahead = self._ahead()
        return self._broker_room() if ahead is None else ahead

    def _broker_room(self, *, strict: bool = False) -> int:
        """``_room`` asked of the broker (one that cannot be looked into: no bound). A broker
        out of reach raises when ``strict`` (a new turn's start: nothing is recorded, and the
        request is told), else lets none through now (a later look does)."""
        try:
            backlog = self.dispatcher.backlog()
        except Exception as e:
            if strict:
                raise
            log.warning("could not look into the broker", error=repr(e))
            return 0
        return 1_000_000 if backlog is None else max(AHEAD - backlog, 0)

    def _mend(self) -> None:
        """Give back the slots whose turns are gone, ended or waiting (a crash between a turn's
        step and its ``leave``, or a Redis restart that lost the give-back but not the end), each
        if still the one read: of every tenant holding slots, its oldest ``MEND_MOST`` taken
        ``SETTLED_AFTER_MS`` ago or more (a live turn's slot is read again each mend: one
        pipelined read of their metadata per tenant)."""
        now = self._now()
        for tenant in self.tenants.holding_tenants():
            held = self.tenants.running(
                tenant, taken_before_ms=now - SETTLED_AFTER_MS, most=MEND_MOST
            )
            metas = self.store.lines.metas([turn_id for turn_id, _ in held])
            for (turn_id, since), meta in zip(held, metas, strict=True):
                gone = meta is None and now - since >= GONE_AFTER_MS
                settled = meta is not None and (meta.ended or meta.status == TurnStatus.WAITING)
                if (gone or settled) and self.tenants.drop(tenant, turn_id, since, now):
                    log.warning("gave back a slot its turn left behind", turn_id=turn_id)
