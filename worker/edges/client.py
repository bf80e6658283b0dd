"""The Python client (docs/architecture.md): enqueue a turn (record it in the ledger, then send its
first chunk's message), and follow a turn until it ends, continuing a time-limit stop on its own
(docs/semantics.md) through the lifecycle service, which counts each automatic continuation
atomically.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import redis
import structlog
from redis.backoff import ExponentialBackoff

from ledger.codec import Envelope
from ledger.errors import LedgerUnavailable
from ledger.events import Event
from worker.base.clock import Clock
from worker.base.settings import get_settings
from worker.edges.runtime import Runtime

log = structlog.get_logger("dres.client")

#: milliseconds each live read of a followed turn waits for news before it looks at the status
FOLLOW_BLOCK_MS = 250
#: seconds a follower rides out an unreachable Redis (a restart, an outage) before it gives up
FOLLOW_OUTAGE_S = 120.0
#: seconds between its attempts to reach Redis again: the first, doubling up to the last
FOLLOW_BACKOFF_S = (0.2, 5.0)
#: what an unreachable Redis raises (``LedgerUnavailable``: the ledger's retries were spent)
STORE_DOWN = (redis.ConnectionError, redis.TimeoutError, LedgerUnavailable)


def enqueue_turn(
    message: str,
    *,
    conversation_id: str | None = None,
    mode: str = "foreground",
    model: str | None = None,
    tenant: str | None = None,
) -> str:
    """Enqueue a turn with the settings of the environment; returns its ``turn_id``. ``tenant``:
    whose limits it runs under (None: ``default``); a tenant whose queue is full raises
    ``worker.base.errors.QueueFull``."""
    runtime = Runtime.from_settings(get_settings())
    turn = runtime.lifecycle.enqueue(
        message, conversation_id=conversation_id, mode=mode, model=model, tenant=tenant
    )
    return turn.turn_id


class Patience:
    """How long a follower waits for an unreachable Redis: attempts further and further apart
    (``FOLLOW_BACKOFF_S``), until ``budget_s`` of outage in a row; the clock is the seam."""

    def __init__(self, clock: Clock, budget_s: float) -> None:
        self.clock = clock
        self.budget_s = budget_s
        first, cap = FOLLOW_BACKOFF_S
        self.backoff = ExponentialBackoff(cap=cap, base=first / 2)
        self.failures = 0
        self.since: float | None = None

    def reached(self) -> None:
        """Redis answered: the next outage starts afresh."""
        self.failures, self.since = 0, None

    def wait(self, error: Exception) -> None:
        """Sleep before the next attempt; raise ``error`` once the budget is spent."""
        now = self.clock.now()
        if self.since is None:
            self.since = now
        if now - self.since >= self.budget_s:
            raise error
        self.failures += 1
        self.clock.sleep(min(self.backoff.compute(self.failures), self.budget_s))


def follow(
    runtime: Runtime,
    turn_id: str,
    *,
    auto_continue: bool = True,
    block_ms: int = FOLLOW_BLOCK_MS,
    outage_s: float = FOLLOW_OUTAGE_S,
    on_outage: Callable[[Exception], None] | None = None,
) -> Iterator[list[Envelope]]:
    """The turn's events in batches, from its start, then live, until it ends.

    An empty batch means nothing new for ``block_ms`` (a moment to refresh a status line). A
    ``turn_ended`` is the end only when nothing follows it: a Continue goes on in the same
    stream. With ``auto_continue``, a time-limit stop (crash, lost hand-off, chunk limit) of the
    conversation's newest turn is continued with ``auto=True`` while the turn's count allows.

    Redis lost on the way (a restart, an outage) is waited for, up to ``outage_s`` in a row, and
    the turn is followed on after the last event yielded, none twice; ``on_outage`` is told of
    each outage's first error. Redis out of reach at the start is an error at once.
    """
    ledger = runtime.ledger
    ledger.meta(turn_id)  # an unknown turn is an error before anything is yielded
    last: str | None = None
    patience = Patience(runtime.clock, outage_s)
    while True:
        try:
            for batch in ledger.tail(turn_id, last or "0-0", block_ms=block_ms):
                patience.reached()
                if batch:
                    last = batch[-1].stream_id
                yield batch
                if _ended(runtime, turn_id, last, auto_continue):
                    return
        except STORE_DOWN as e:
            if patience.since is None and on_outage is not None:
                on_outage(e)
            patience.wait(e)


def _ended(runtime: Runtime, turn_id: str, last: str | None, auto_continue: bool) -> bool:
    """The turn ended with the event ``last`` and does not go on (by this client's Continue)."""
    meta = runtime.ledger.meta(turn_id)
    if not meta.ended or runtime.ledger.last_id(turn_id) != last:
        return False
    return not (auto_continue and _continued_on_its_own(runtime, turn_id))


def _continued_on_its_own(runtime: Runtime, turn_id: str) -> bool:
    """Continue a stop that may be continued automatically; True if the turn goes on (by this
    request or by another client's that came first)."""
    lifecycle = runtime.lifecycle
    meta = runtime.ledger.meta(turn_id)
    if lifecycle.continue_refusal(meta, auto=True) is not None:
        return False
    if lifecycle.continue_turn(turn_id, auto=True).ok:
        return True
    return not runtime.ledger.meta(turn_id).ended


def watch_turn(turn_id: str, *, auto_continue: bool = True) -> Iterator[Event]:
    """Yield the turn's events (replayed, then live) until it ends (docs/architecture.md),
    continuing a time-limit stop on its own unless ``auto_continue`` is False."""
    runtime = Runtime.from_settings(get_settings())
    try:
        for batch in follow(runtime, turn_id, auto_continue=auto_continue):
            for envelope in batch:
                yield envelope.event
    finally:
        runtime.redis.close()
