"""Stop (docs/semantics.md): a running turn is cancelled within a second or two at a safe point, and
a resuming turn's queued chunk never runs."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from rigs import (
    DONE,
    WorkerProcess,
    broker_drained,
    ended,
    having,
    of,
    send,
    show,
    wait_for,
    wait_until,
)
from worker.base.settings import Settings
from worker.demo_tools import outbox
from worker.edges.runtime import Runtime
from worker.engine.recorder import RunContext

pytestmark = pytest.mark.redis_server

#: seconds: the contract's "within a second or two"
STOP_WITHIN_S = 2.0


def test_stop_during_a_running_chunk_cancels_the_turn_within_two_seconds(
    runtime: Runtime, worker: WorkerProcess, script: Callable[..., str]
) -> None:
    slow = {**send("a@x.io", "A"), "delay_s": 30}
    turn = runtime.lifecycle.enqueue("think long, then email", model=script([slow, DONE]))
    wait_for(runtime.ledger, turn.turn_id, having("model_start"), what="the model call")

    stopped_at = time.monotonic()
    outcome = runtime.lifecycle.stop(turn.turn_id)
    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=5, what="turn end")
    elapsed = time.monotonic() - stopped_at

    print(f"stop -> turn_ended: {elapsed * 1000:.0f} ms")
    assert outcome.ok, outcome
    assert elapsed < STOP_WITHIN_S
    [end] = of(events, "turn_ended")
    assert (end.status, end.code) == ("stopped", "cancelled"), show(events)
    assert [e.reason for e in of(events, "run_ended")] == ["stopped"]
    assert len(of(events, "run_started")) == 1
    assert not of(events, "tool_start"), "nothing ran after the Stop"
    assert outbox(runtime.redis) == []
    assert runtime.ledger.meta(turn.turn_id).status == "stopped"


def test_stop_while_resuming_prevents_the_queued_chunk_from_running(
    runtime: Runtime,
    settings: Settings,
    start_worker: Callable[..., WorkerProcess],
    script: Callable[..., str],
) -> None:
    """The first chunk ran (here) and queued its successor's message; Stop comes before it runs."""
    rt = runtime
    turn = rt.lifecycle.create("email a", model=script([send("a@x.io", "A"), DONE]))
    run = rt.lifecycle.claim(turn.turn_id, turn.run_id)
    assert isinstance(run, RunContext)
    successor = rt.lifecycle.hand_over(run)
    rt.lifecycle.launch(turn.turn_id, successor, "foreground")  # the message waits in the queue
    assert rt.redis.llen(settings.foreground_queue) == 1

    outcome = rt.lifecycle.stop(turn.turn_id)
    assert (outcome.ok, outcome.reason) == (True, "cancelled before the next chunk ran")

    start_worker()
    wait_until(lambda: broker_drained(rt.redis, settings), what="the queued message consumed")

    events = rt.ledger.events(turn.turn_id)
    assert not of(events, "run_started", run_id=successor), show(events)
    [end] = of(events, "turn_ended")
    assert (end.status, end.code) == ("stopped", "cancelled")
    meta = rt.ledger.meta(turn.turn_id)
    assert (meta.status, meta.code, meta.next_run, meta.runs) == ("stopped", "cancelled", "", 1)
    assert outbox(rt.redis) == []
