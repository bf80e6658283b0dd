"""Continuing a stopped turn (docs/semantics.md): atomic automatic continuation, its limit, and
Continue only for a conversation's newest stop.

The stops are what the reaper records for a foreground run whose lease ran out (``crashed``,
Continue available); each test's continuations go through the real broker.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rigs import (
    DONE,
    WorkerProcess,
    close_runtime,
    crashed_stop,
    ended,
    of,
    show,
    together,
    wait_for,
)
from worker.base.settings import Settings
from worker.edges.runtime import Runtime
from worker.lifecycle import Outcome

pytestmark = pytest.mark.redis_server

CLIENTS = 20


def test_twenty_concurrent_automatic_continuations_of_one_stop_start_exactly_one_run(
    runtime: Runtime, settings: Settings, worker: WorkerProcess, script: Callable[..., str]
) -> None:
    turn_id = crashed_stop(runtime, script([DONE]))
    clients = [Runtime.from_settings(settings) for _ in range(CLIENTS)]
    try:
        calls = [
            (lambda c=c: c.lifecycle.continue_turn(turn_id, auto=True))  # type: ignore[misc]
            for c in clients
        ]
        outcomes = together(calls)
    finally:
        for client in clients:
            close_runtime(client)

    assert all(isinstance(o, Outcome) for o in outcomes), outcomes
    winners = [o for o in outcomes if o.ok]
    assert len(winners) == 1, outcomes
    refusals = {o.reason for o in outcomes if not o.ok}
    assert refusals <= {
        "the turn was continued or changed by another request",
        "the turn is not stopped (status queued)",
        "the turn is not stopped (status running)",
        "the turn is not stopped (status completed)",
    }, refusals

    events = wait_for(runtime.ledger, turn_id, ended("completed"), timeout=10, what="completion")
    runs = of(events, "run_started")
    assert [(e.cause, e.run_id) for e in runs[1:]] == [("auto_continue", winners[0].run_id)]
    meta = runtime.ledger.meta(turn_id)
    assert (meta.status, meta.runs, meta.auto_continues) == ("completed", 2, 1)


def test_the_fourth_automatic_continuation_of_a_turn_is_refused(
    runtime: Runtime, settings: Settings, script: Callable[..., str]
) -> None:
    """Each continued run dies too (claimed here, its lease taken over as the reaper does)."""
    rt = runtime
    turn_id = crashed_stop(rt, script([DONE]))
    for n in range(1, settings.max_auto_continue + 1):
        outcome = rt.lifecycle.continue_turn(turn_id, auto=True)
        assert outcome.ok and outcome.run_id, (n, outcome)
        run = rt.lifecycle.claim(turn_id, outcome.run_id)
        assert run is not None and run.cause == "auto_continue"
        assert rt.lifecycle.take_over(rt.ledger.meta(turn_id), "lease expired (test)").ok
        assert rt.ledger.meta(turn_id).auto_continues == n

    refused = rt.lifecycle.continue_turn(turn_id, auto=True)

    assert not refused.ok
    assert refused.reason == "automatic continuation limit reached (3 of 3)"
    meta = rt.ledger.meta(turn_id)
    assert (meta.status, meta.code, meta.auto_continues) == (
        "stopped",
        "crashed",
        3,
    )
    assert meta.runs == 1 + settings.max_auto_continue
    assert rt.lifecycle.continue_turn(turn_id, auto=False).ok, "a person may still continue it"


def test_continue_of_an_older_stop_of_the_conversation_is_refused(
    runtime: Runtime, worker: WorkerProcess, script: Callable[..., str]
) -> None:
    model = script([DONE])
    older = crashed_stop(runtime, model, conversation_id="conv-1")
    newer = crashed_stop(runtime, model, conversation_id="conv-1")
    before = runtime.ledger.read_turn(older)

    for auto in (False, True):
        outcome = runtime.lifecycle.continue_turn(older, auto=auto)
        assert (outcome.ok, outcome.reason) == (
            False,
            "only the conversation's newest stop can be continued",
        )
    assert runtime.ledger.read_turn(older) == before
    assert runtime.ledger.meta(older).status == "stopped"

    assert runtime.lifecycle.continue_turn(newer, auto=False).ok
    events = wait_for(runtime.ledger, newer, ended("completed"), timeout=10, what="completion")
    assert [e.cause for e in of(events, "run_started")] == ["first", "continue"], show(events)
