"""Turns crafted at the ledger level, a runtime's closing, and calls made all at once."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from ledger.events import EarlierTurn, Event, Text, ToolStart, TurnContext, TurnStarted
from ledger.signature import input_signature
from rigs.scripts import EMAIL
from worker.edges.runtime import Runtime
from worker.engine.recorder import RunContext, make_event


def crashed_stop(
    rt: Runtime,
    model: str | None = None,
    *,
    conversation_id: str | None = None,
    interrupted_write: bool = False,
) -> str:
    """A foreground turn whose first run died, stopped as the reaper stops it (crashed).

    Crafted at the ledger level, deterministically and without a worker: the turn is created
    (with ``model``, else the settings' model), its first run claimed (``run_started``) and then
    taken over as a dead run by ``take_over``, which for a foreground turn is ``stop_loudly``
    with code crashed and Continue available. No message is sent, so no worker runs anything for
    it. With ``interrupted_write`` the run first records the ``tool_start`` of a write
    (``send_email``) that never got its ``tool_done``.
    """
    turn = rt.lifecycle.create("do the task", model=model, conversation_id=conversation_id)
    run = rt.lifecycle.claim(turn.turn_id, turn.run_id)
    assert run is not None
    if interrupted_write:
        start = ToolStart(
            event_id=rt.ids.new("ev"),
            turn_id=turn.turn_id,
            run_id=turn.run_id,
            chunk=0,
            ts=rt.clock.now(),
            call_id=rt.ids.new("call"),
            tool="send_email",
            input=EMAIL,
            signature=input_signature(EMAIL),
        )
        rt.ledger.append(start, lease=run.lease)
    outcome = rt.lifecycle.take_over(rt.ledger.meta(turn.turn_id), "lease expired (test)")
    assert outcome.ok and outcome.reason == "stopped: crashed", outcome
    return turn.turn_id


def context_of(events: Sequence[Event]) -> tuple[tuple[EarlierTurn, ...], str | None]:
    """What a turn's model sees of its conversation: the earlier turns and the note of an
    unfinished one, from its ``context`` (written when it was let through its conversation's
    line), else from its ``turn_started``."""
    for event in reversed(events):
        if isinstance(event, TurnContext | TurnStarted):
            return event.earlier_turns, event.prior_turn_note
    return (), None


def say(rt: Runtime, run: RunContext, *lines: str) -> None:
    """The run (claimed by the test, which plays it: no worker) appends a ``text`` per line."""
    for line in lines:
        event = make_event(Text, rt.clock, rt.ids, run.turn_id, run.run_id, run.chunk, text=line)
        rt.ledger.append(event, lease=run.lease)


def close_runtime(rt: Runtime) -> None:
    """Close what the runtime opened (its Celery app, its Redis client), if it opened them."""
    if "app" in rt.__dict__:
        rt.app.close()
    if "redis" in rt.__dict__:
        rt.redis.close()


def together(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run each call in its own thread, all released at once; results (or exceptions) in order."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def body(i: int) -> None:
        barrier.wait()
        try:
            results[i] = calls[i]()
        except Exception as e:  # handed to the test, which asserts on every result
            results[i] = e

    threads = [threading.Thread(target=body, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results
