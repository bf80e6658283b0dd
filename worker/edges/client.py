"""The Python client (CONTRACT §9): enqueue a turn (record it in the ledger, then send its first
chunk's message), and follow a turn until it ends, continuing a time-limit stop on its own
(§7.7) through the lifecycle service, which counts each automatic continuation atomically.
"""

from __future__ import annotations

from collections.abc import Iterator

from ledger.codec import Envelope
from ledger.events import Event
from worker.base.errors import InvalidInput
from worker.base.settings import get_settings
from worker.edges.conversation import Context, conversation_context
from worker.edges.runtime import Runtime
from worker.engine.models import make_model
from worker.lifecycle import NewTurn

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
    """Record the turn (status queued, first run pending) and dispatch its first chunk."""
    if mode not in MODES:
        raise InvalidInput(f"mode must be foreground or background, not {mode!r}")
    if not message.strip():
        raise InvalidInput("message is empty")
    make_model(model or runtime.settings.model, runtime.clock)  # a bad spec fails here, not later
    context = conversation_context(runtime, conversation_id) if conversation_id else Context()
    turn = runtime.lifecycle.create(
        message,
        conversation_id=conversation_id,
        mode=mode,
        model=model,
        turn_id=turn_id,
        prior_turn_note=context.prior_turn_note,
        earlier_turns=context.earlier_turns,
    )
    runtime.lifecycle.launch(turn.turn_id, turn.run_id, mode)
    return turn


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
