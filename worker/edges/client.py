"""Enqueue a turn (CONTRACT §9): record it in the ledger, then send its first chunk's message."""

from __future__ import annotations

from ledger import keys
from ledger.errors import UnknownTurn
from ledger.journal import build_journal
from worker.base.errors import InvalidInput
from worker.base.settings import get_settings
from worker.edges.runtime import Runtime
from worker.engine.history import unfinished_turn_note
from worker.engine.models import make_model
from worker.lifecycle import NewTurn

MODES = ("foreground", "background")


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
    note = prior_turn_note(runtime, conversation_id) if conversation_id else None
    turn = runtime.lifecycle.create(
        message,
        conversation_id=conversation_id,
        mode=mode,
        model=model,
        turn_id=turn_id,
        prior_turn_note=note,
    )
    runtime.lifecycle.launch(turn.turn_id, turn.run_id, mode)
    return turn


def prior_turn_note(runtime: Runtime, conversation_id: str) -> str | None:
    """A short account of the conversation's newest turn if it did not complete, else None."""
    newest = runtime.redis.lindex(keys.conversation_turns(conversation_id), -1)
    if newest is None:
        return None
    turn_id = newest.decode() if isinstance(newest, bytes) else str(newest)
    try:
        meta = runtime.ledger.meta(turn_id)
    except UnknownTurn:
        return None
    if meta.status == "completed":
        return None
    status = {
        "running": "is still running",
        "resuming": "is still running",
        "queued": "has not started yet",
    }.get(meta.status, f"ended as {meta.status} ({meta.code})")
    return unfinished_turn_note(status, build_journal(runtime.ledger.events(turn_id)))


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
