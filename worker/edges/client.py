"""The Python client (CONTRACT §9): enqueue a turn (record it in the ledger, then send its first
chunk's message), and follow a turn until it ends, continuing a time-limit stop on its own
(§7.7) through the lifecycle service, which counts each automatic continuation atomically.
"""

from __future__ import annotations

from collections.abc import Iterator

import redis
import structlog

from ledger.codec import Envelope
from ledger.errors import LedgerError
from ledger.events import Event
from worker.base.errors import InvalidInput
from worker.base.settings import get_settings
from worker.edges.conversation import Context, conversation_context
from worker.edges.runtime import Runtime
from worker.engine.models import make_model
from worker.lifecycle import NewTurn

log = structlog.get_logger("dres.client")

MODES = ("foreground", "background")
#: milliseconds each live read of a followed turn waits for news before it looks at the status
FOLLOW_BLOCK_MS = 250


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
    if not message.strip():
        raise InvalidInput("message is empty")
    make_model(model or runtime.settings.model, runtime.clock)  # a bad spec fails here, not later
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


def follow(
    runtime: Runtime,
    turn_id: str,
    *,
    auto_continue: bool = True,
    block_ms: int = FOLLOW_BLOCK_MS,
) -> Iterator[list[Envelope]]:
    """The turn's events in batches, from its start, then live, until it ends.

    An empty batch means nothing new for ``block_ms`` (a moment to refresh a status line). A
    ``turn_ended`` is the end only when nothing follows it: a Continue goes on in the same
    stream. With ``auto_continue``, a time-limit stop (crash, lost hand-off, chunk limit) of the
    conversation's newest turn is continued with ``auto=True`` while the turn's count allows.
    """
    ledger = runtime.ledger
    ledger.meta(turn_id)  # an unknown turn is an error before anything is yielded
    last: str | None = None
    for batch in ledger.tail(turn_id, block_ms=block_ms):
        if batch:
            last = batch[-1].stream_id
        yield batch
        meta = ledger.meta(turn_id)
        if not meta.ended or ledger.last_id(turn_id) != last:
            continue
        if auto_continue and _continued_on_its_own(runtime, turn_id):
            continue
        return


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
