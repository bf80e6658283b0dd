"""Graceful shutdown (docs/faults.md): a worker told to stop (SIGTERM, a deploy) hands each
running chunk to its successor at once, as a soft limit would, and another worker goes on with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from sample_tools import effects

from chaos.invariants import each_run_started_once, nothing_after_turn_ended, runs_closed
from ledger.events import Event
from rigs import (
    DONE,
    WorkerProcess,
    ended,
    having,
    of,
    send,
    show,
    slow_write,
    think,
    wait_for,
    wait_until,
)
from worker.demo_tools import outbox
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server

#: chunks far longer than the test: only the shutdown can end the first one early
LONG = {
    "DRES_SOFT_LIMIT_S": "30",
    "DRES_HARD_LIMIT_S": "40",
    "DRES_BG_SOFT_LIMIT_S": "30",
    "DRES_BG_HARD_LIMIT_S": "40",
    "DRES_VISIBILITY_TIMEOUT_S": "90",
}
#: seconds from the signal to the successor's run_started on the other worker (issue 15)
HAND_OVER_BOUND_S = 5.0


def handed_over(runtime: Runtime, turn_id: str, signalled: float) -> list[Event]:
    """The turn's events once it ended, after checking it was handed over well and in time."""
    events = wait_for(runtime.ledger, turn_id, ended(), timeout=30, what=f"{turn_id} end")
    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    first, successor = of(events, "run_started")
    [handed] = of(events, "run_ended", run_id=first.run_id)
    assert handed.reason == "soft_limit" and "shutting down" in handed.detail, show(events)
    assert successor.cause == "next_chunk"
    assert successor.ts - signalled < HAND_OVER_BOUND_S, show(events)
    envelopes = runtime.ledger.read_turn(turn_id)
    problems = [
        *nothing_after_turn_ended(envelopes),
        *runs_closed(envelopes, ended=True),
        *each_run_started_once(events),
    ]
    assert not problems, problems
    return events


def test_sigterm_hands_a_foreground_and_a_background_turn_to_another_worker_at_once(
    runtime: Runtime, start_worker: Callable[..., WorkerProcess], script: Callable[..., str]
) -> None:
    """Both turns are mid-step (a 20 s step) on the worker that is told to stop: each successor
    starts on the other worker within 5 s of the signal (ledger ``ts``), each turn completes, and
    the model that re-issues its email after the resume is blocked: one email each."""
    leaving = start_worker(concurrency=2, overrides=LONG)
    turns = [
        runtime.lifecycle.enqueue(
            f"email {name}",
            mode=mode,
            model=script([send(f"{name}@x.io", f"Hi {name}"), think(20), DONE], "restart"),
        ).turn_id
        for name, mode in (("ada", "foreground"), ("bob", "background"))
    ]
    for turn_id in turns:
        wait_for(runtime.ledger, turn_id, having("model_start", 2), what="the long step")
    start_worker(concurrency=2, overrides=LONG)

    signalled = time.time()
    leaving.terminate()

    for turn_id in turns:
        events = handed_over(runtime, turn_id, signalled)
        assert [e.reason for e in of(events, "tool_blocked")] == ["completed"], show(events)
    assert sorted(m["to"] for m in outbox(runtime.redis)) == ["ada@x.io", "bob@x.io"]
    assert leaving.process.wait(timeout=15) == 0, "the worker's warm shutdown failed"


def test_sigterm_during_a_tool_hands_over_only_after_its_tool_done(
    runtime: Runtime, start_worker: Callable[..., WorkerProcess], script: Callable[..., str]
) -> None:
    """The signal lands while ``slow_write`` works on after its side effect: the hand-over waits
    for its ``tool_done`` (never between an effect and its record), and the resumed run's repeat
    of the write is blocked as completed."""
    workers = [start_worker(overrides=LONG), start_worker(overrides=LONG)]
    model = script([slow_write("report"), DONE], "restart")
    turn = runtime.lifecycle.enqueue("write a report", mode="background", model=model).turn_id
    wait_for(runtime.ledger, turn, having("tool_start", tool="slow_write"), what="the write")
    leaving = wait_until(
        lambda: next((w for w in workers if turn in w.log()), None), what="the write's worker"
    )

    signalled = time.time()
    leaving.terminate()

    events = handed_over(runtime, turn, signalled)
    first = of(events, "run_started")[0].run_id
    [done] = of(events, "tool_done", tool="slow_write")
    assert done.run_id == first and not done.is_error, show(events)
    assert [e.reason for e in of(events, "tool_blocked")] == ["completed"], show(events)
    assert len(effects(runtime.redis, "slow_write")) == 1
