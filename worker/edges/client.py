"""The Python client (CONTRACT §9): enqueue a turn (record it in the ledger, then send its first
chunk's message), and follow a turn until it ends, continuing a time-limit stop on its own
(§7.7) through the lifecycle service, which counts each automatic continuation atomically.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import redis
import structlog
from redis.backoff import ExponentialBackoff

from ledger.codec import Envelope
from ledger.errors import LedgerError, LedgerUnavailable
from ledger.events import Event
from worker.base.clock import Clock
from worker.base.errors import InvalidInput
from worker.base.settings import get_settings
from worker.edges.api_schemas import is_blank
from worker.edges.conversation import Context, conversation_context
from worker.edges.runtime import Runtime
from worker.engine.models import make_model
from worker.lifecycle import NewTurn

log = structlog.get_logger("dres.client")

MODES = ("foreground", "background")
#: milliseconds each live read of a followed turn waits for news before it looks at the status
FOLLOW_BLOCK_MS = 250
#: seconds a follower rides out an unreachable Redis (a restart, an outage) before it gives up
FOLLOW_OUTAGE_S = 120.0
#: seconds between its attempts to reach Redis again: the first, doubling up to the last
FOLLOW_BACKOFF_S = (0.2, 5.0)
#: what an unreachable Redis raises (``LedgerUnavailable``: the ledger's retries were spent)
STORE_DOWN = (redis.ConnectionError, redis.TimeoutError, LedgerUnavailable)


def enqueue(
    runtime: Runtime,
    message: str,
    *,
    conversation_id: str | None = None,
    mode: str = "foreground",
    model: str | None = None,
    turn_id: str | None = None,
) -> NewTurn:
    """Record the turn (status queued, first run pending) and dispatch its first chunk.

    All or nothing, as far as Redis lets it be: when a step fails after the turn may have been
    recorded (Redis out of memory or gone part way, the broker unreachable), the turn is taken
    back before the error is raised, so the caller's failure leaves no turn that runs later. If
    even that cannot reach Redis, the turn stays queued and the reaper sends its chunk, as after
    a crash between the two steps; a repeat with the API's Idempotency-Key finds it.
    """
    if mode not in MODES:
        raise InvalidInput(f"mode must be foreground or background, not {mode!r}")
    if is_blank(message):
        raise InvalidInput("message is empty")
    make_model(model or runtime.settings.model, runtime.clock)  # a bad spec fails here, not later
    if conversation_id:
        # A new message supersedes a turn of the conversation that waits for approval: it
        # stops, its requests void, and the new turn's note says what was waiting (§7.14).
        runtime.lifecycle.supersede(conversation_id)
    context = conversation_context(runtime, conversation_id) if conversation_id else Context()
    lifecycle = runtime.lifecycle
    turn_id = turn_id or runtime.ids.new("turn")
    conversation_id = conversation_id or runtime.ids.new("conv")
    try:
        turn = lifecycle.create(
            message,
            conversation_id=conversation_id,
            mode=mode,
            model=model,
            turn_id=turn_id,
            prior_turn_note=context.prior_turn_note,
            earlier_turns=context.earlier_turns,
        )
        lifecycle.launch(turn.turn_id, turn.run_id, mode)
    except Exception as e:
        _take_back(runtime, turn_id, conversation_id, e)
        raise
    return turn


def _take_back(runtime: Runtime, turn_id: str, conversation_id: str, error: Exception) -> None:
    try:
        withdrawn = runtime.lifecycle.withdraw(turn_id, conversation_id)
    except (redis.RedisError, LedgerError) as e:
        log.warning(
            "could not take back what a failed creation may have recorded; a turn recorded "
            "is dispatched by the reaper",
            turn_id=turn_id,
            error=repr(error),
            withdraw_error=repr(e),
        )
        return
    if not withdrawn:
        log.warning("a turn whose creation failed went on", turn_id=turn_id, error=repr(error))


def enqueue_turn(
    message: str,
    *,
    conversation_id: str | None = None,
    mode: str = "foreground",
    model: str | None = None,
) -> str:
    """Enqueue a turn with the settings of the environment; returns its ``turn_id``."""
    runtime = Runtime.from_settings(get_settings())
    return enqueue(
        runtime, message, conversation_id=conversation_id, mode=mode, model=model
    ).turn_id


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
    """Yield the turn's events (replayed, then live) until it ends (CONTRACT §9), continuing a
    time-limit stop on its own unless ``auto_continue`` is False."""
    runtime = Runtime.from_settings(get_settings())
    try:
        for batch in follow(runtime, turn_id, auto_continue=auto_continue):
            for envelope in batch:
                yield envelope.event
    finally:
        runtime.redis.close()
