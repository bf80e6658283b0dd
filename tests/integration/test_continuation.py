"""Continuing a stopped turn (CONTRACT §7.7): atomic automatic continuation, its limit, and
Continue only for a conversation's newest stop.

The stops are what the reaper records for a foreground run whose lease ran out (``crashed``,
Continue available); each test's continuations go through the real broker.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from integration_support import (
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

from worker.control import Outcome
from worker.runtime import Runtime
from worker.settings import Settings
from worker.turns import claim_run

pytestmark = pytest.mark.redis_server

CLIENTS = 20


def test_twenty_concurrent_automatic_continuations_of_one_stop_start_exactly_one_run(
    runtime: Runtime, settings: Settings, worker: WorkerProcess, script: Callable[..., str]
) -> None:
    turn_id = crashed_stop(runtime, script([DONE]))
    clients = [Runtime.from_settings(settings) for _ in range(CLIENTS)]
    try:
        calls = [
            (lambda c=c: c.control.continue_turn(turn_id, auto=True))  # type: ignore[misc]
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
    assert (meta.status, meta.runs, meta.extra["auto_continues"]) == ("completed", 2, "1")


def test_the_fourth_automatic_continuation_of_a_turn_is_refused(
    runtime: Runtime, settings: Settings, script: Callable[..., str]
) -> None:
    """Each continued run dies too (claimed here, its lease taken over as the reaper does)."""
    rt = runtime
    turn_id = crashed_stop(rt, script([DONE]))
    for n in range(1, settings.max_auto_continue + 1):
        outcome = rt.control.continue_turn(turn_id, auto=True)
        assert outcome.ok and outcome.run_id, (n, outcome)
        run = claim_run(
            rt.ledger, turn_id, outcome.run_id, clock=rt.clock, ids=rt.ids, settings=rt.settings
        )
        assert run is not None and run.cause == "auto_continue"
        assert rt.control.take_over(rt.ledger.meta(turn_id), "lease expired (test)").ok
        assert rt.ledger.meta(turn_id).extra["auto_continues"] == str(n)

    refused = rt.control.continue_turn(turn_id, auto=True)

    assert not refused.ok
    assert refused.reason == "automatic continuation limit reached (3 of 3)"
    meta = rt.ledger.meta(turn_id)
    assert (meta.status, meta.extra["code"], meta.extra["auto_continues"]) == (
        "stopped",
        "crashed",
        "3",
    )
    assert meta.runs == 1 + settings.max_auto_continue
    assert rt.control.continue_turn(turn_id, auto=False).ok, "a person may still continue it"


def test_continue_of_an_older_stop_of_the_conversation_is_refused(
    runtime: Runtime, worker: WorkerProcess, script: Callable[..., str]
) -> None:
    model = script([DONE])
    older = crashed_stop(runtime, model, conversation_id="conv-1")
    newer = crashed_stop(runtime, model, conversation_id="conv-1")
    before = runtime.ledger.read_turn(older)

    for auto in (False, True):
        outcome = runtime.control.continue_turn(older, auto=auto)
        assert (outcome.ok, outcome.reason) == (
            False,
            "only the conversation's newest stop can be continued",
        )
    assert runtime.ledger.read_turn(older) == before
    assert runtime.ledger.meta(older).status == "stopped"

    assert runtime.control.continue_turn(newer, auto=False).ok
    events = wait_for(runtime.ledger, newer, ended("completed"), timeout=10, what="completion")
    assert [e.cause for e in of(events, "run_started")] == ["first", "continue"], show(events)
