"""Enqueue a turn (CONTRACT §9): record it in the ledger, then send its first chunk's message."""

from __future__ import annotations

from worker.runtime import Runtime
from worker.settings import get_settings
from worker.turns import NewTurn, create_turn

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
        raise ValueError(f"mode must be foreground or background, not {mode!r}")
    if not message.strip():
        raise ValueError("message is empty")
    turn = create_turn(
        runtime.ledger,
        message,
        clock=runtime.clock,
        ids=runtime.ids,
        conversation_id=conversation_id,
        mode=mode,
        model=model,
        turn_id=turn_id,
    )
    runtime.control.launch(turn.turn_id, turn.run_id, mode)
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
