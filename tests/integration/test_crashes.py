"""Crashes (docs/semantics.md): real SIGKILLs of a pool process and of a whole worker.

A background turn whose run dies is picked up again (redelivery or the reaper) and resumes; a
foreground one stops with Continue available. Either way the interrupted write is not run blind
a second time, and nothing is sent twice.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest
from sample_tools import effects

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
from worker.base.settings import Settings
from worker.demo_tools import outbox
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server

#: seconds allowed beyond the lease for a new worker to start and its reaper to act
PICKUP_MARGIN_S = 2.5


def kill_pool_child_mid_write(rt: Runtime, worker: WorkerProcess, turn_id: str) -> list[Event]:
    """Once slow_write's side effect landed (its tool_done not yet), SIGKILL the pool child."""
    events = wait_for(rt.ledger, turn_id, having("tool_start", tool="slow_write"), what="write")
    wait_until(lambda: effects(rt.redis, "slow_write"), timeout=2, what="the write's effect")
    os.kill(worker.pool_child(), signal.SIGKILL)
    return events


def test_a_background_turn_whose_pool_process_is_killed_mid_write_resumes_without_repeating_it(
    runtime: Runtime, worker: WorkerProcess, script: Callable[..., str]
) -> None:
    model = script([slow_write("report"), DONE], on_resume="restart")
    turn = runtime.lifecycle.enqueue("write the report", mode="background", model=model)
    kill_pool_child_mid_write(runtime, worker, turn.turn_id)

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=15, what="turn end")

    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    first, second = of(events, "run_started")
    assert of(events, "run_ended", run_id=first.run_id)[0].reason == "crashed"
    assert second.cause in {"reaper", "redelivery"} and second.chunk == first.chunk
    assert not of(events, "tool_done", tool="slow_write"), "the interrupted call never finished"
    [blocked] = of(events, "tool_blocked")
    assert (blocked.tool, blocked.reason, blocked.is_error) == ("slow_write", "interrupted", True)
    assert blocked.run_id == second.run_id
    assert len(effects(runtime.redis, "slow_write")) == 1, "the write ran once"
    assert runtime.ledger.meta(turn.turn_id).status == "completed"


def test_a_foreground_turn_whose_pool_process_is_killed_stops_and_completes_after_continue(
    runtime: Runtime, worker: WorkerProcess, script: Callable[..., str]
) -> None:
    model = script([slow_write("report"), DONE], on_resume="restart")
    turn = runtime.lifecycle.enqueue("write the report", model=model)
    kill_pool_child_mid_write(runtime, worker, turn.turn_id)

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=15, what="the stop")
    [stop] = of(events, "turn_ended")
    assert (stop.status, stop.code, stop.can_continue) == ("stopped", "crashed", True)
    meta = runtime.ledger.meta(turn.turn_id)
    assert (meta.status, meta.code, runtime.lifecycle.can_continue(meta)) == (
        "stopped",
        "crashed",
        True,
    )

    outcome = runtime.lifecycle.continue_turn(turn.turn_id, auto=False)
    assert outcome.ok, outcome
    events = wait_for(
        runtime.ledger, turn.turn_id, ended("completed"), timeout=10, what="completion"
    )

    runs = of(events, "run_started")
    assert [e.cause for e in runs] == ["first", "continue"], show(events)
    assert runs[1].run_id == outcome.run_id
    [blocked] = of(events, "tool_blocked")
    assert (blocked.tool, blocked.reason) == ("slow_write", "interrupted")
    assert len(effects(runtime.redis, "slow_write")) == 1, "the write ran once"
    meta = runtime.ledger.meta(turn.turn_id)
    assert (meta.status, meta.runs) == ("completed", 2)


def test_a_background_turn_on_a_killed_worker_is_resumed_by_a_new_worker_within_its_lease(
    runtime: Runtime,
    settings: Settings,
    start_worker: Callable[..., WorkerProcess],
    script: Callable[..., str],
) -> None:
    """SIGKILL of the whole worker: its message stays unacked; the new worker's reaper acts."""
    first_worker = start_worker()
    model = script([send("ada@x.io", "Launch"), think(2.0), DONE], on_resume="restart")
    turn = runtime.lifecycle.enqueue("email Ada, then think", mode="background", model=model)
    wait_for(runtime.ledger, turn.turn_id, having("model_start", step=1), what="the second call")

    first_worker.kill_group()
    killed_at = time.time()
    start_worker()
    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=15, what="turn end")

    first, second = of(events, "run_started")
    picked_up_s = second.ts - killed_at
    lease_s = settings.lease_s
    print(f"killed worker -> new run_started: {picked_up_s:.2f} s (lease {lease_s} s)")
    assert picked_up_s < lease_s + PICKUP_MARGIN_S, show(events)
    assert second.cause == "reaper"
    assert of(events, "run_ended", run_id=first.run_id)[0].reason == "crashed"
    assert [e.status for e in of(events, "turn_ended")] == ["completed"]
    [blocked] = of(events, "tool_blocked")
    assert (blocked.tool, blocked.reason) == ("send_email", "completed")
    assert [m["subject"] for m in outbox(runtime.redis)] == ["Launch"]
