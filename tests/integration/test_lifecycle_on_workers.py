"""The turn's lifecycle on real workers (docs/semantics.md): a backlog is not a loss, a
turn's end cannot be handed over, a run's lease lives as long as its process and no longer, and the
worker that runs a chunk decides its time limits.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import pytest
from sample_tools import effects

from ledger import keys
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
from tests.support.fixtures import BOTH_POOLS
from worker.base.settings import Settings, load_settings
from worker.demo_tools import outbox
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server

#: the backlog scenario of issue 11: one slot, a 1 s soft limit, a short grace, one re-send
BACKLOG = {
    "DRES_SOFT_LIMIT_S": "1",
    "DRES_HARD_LIMIT_S": "4",
    "DRES_HANDOFF_GRACE_S": "1",
    "DRES_MAX_REDISPATCHES": "1",
    "DRES_REAPER_INTERVAL_S": "0.5",
}
BACKLOG_TURNS = 8
#: a visibility timeout above the longer hard limits some tests give their worker
LONG_VT = {"DRES_VISIBILITY_TIMEOUT_S": "60"}


def test_a_backlog_of_two_chunk_turns_on_one_slot_completes_every_turn_with_one_email_each(
    runtime: Runtime, start_worker: Callable[..., WorkerProcess], script: Callable[..., str]
) -> None:
    """Successors wait in the queue far longer than grace x (redispatches + 1): a backlog delays
    turns, it never stops one as a lost hand-off nor sends a run's message twice."""
    start_worker(concurrency=1, overrides=BACKLOG)
    turns = [
        runtime.lifecycle.enqueue(
            f"email {n}",
            model=script([send(f"{n}@x.io", f"Mail {n}"), think(1.5), DONE]),
        ).turn_id
        for n in range(BACKLOG_TURNS)
    ]

    ends = {t: wait_for(runtime.ledger, t, ended(), timeout=60, what=f"{t} end") for t in turns}

    for turn_id, events in ends.items():
        assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
        started = [e.run_id for e in of(events, "run_started")]
        assert len(started) == len(set(started)) == 2, show(events)  # each run claimed once
        assert runtime.ledger.meta(turn_id).redispatches == 0
    assert sorted(m["subject"] for m in outbox(runtime.redis)) == sorted(
        f"Mail {n}" for n in range(BACKLOG_TURNS)
    )


@BOTH_POOLS
def test_a_soft_limit_right_after_the_turn_ended_hands_nothing_over(
    runtime: Runtime, start_worker: Callable[..., WorkerProcess], script: Callable[..., str]
) -> None:
    """The soft limit fires just after the end was recorded (a failpoint, not timing): the
    hand-over it triggers is refused, so no successor runs a finished turn again."""
    start_worker(
        overrides={
            **LONG_VT,
            "DRES_FAILPOINTS": "1",
            "DRES_SOFT_LIMIT_S": "30",
            "DRES_HARD_LIMIT_S": "40",
        }
    )
    runtime.redis.hset(
        keys.chaos_fault(), mapping={"point": "turn.ended", "action": "soft_limit", "skip": 0}
    )
    turn = runtime.lifecycle.enqueue("email Ada", model=script([send("ada@x.io", "Hi"), DONE]))

    events = wait_for(runtime.ledger, turn.turn_id, ended(), what="the turn's end")
    wait_until(lambda: runtime.redis.hget(keys.chaos_fault(), "fired"), what="the failpoint")

    assert runtime.redis.hget(keys.chaos_fault(), "fired") == b"turn.ended"
    stream = runtime.ledger.read_turn(turn.turn_id)
    assert stream[-1].event.type == "turn_ended", "nothing follows the turn's end"
    assert len(of(events, "run_started")) == 1, show(events)
    meta = runtime.ledger.meta(turn.turn_id)
    assert (meta.status, meta.next_run, meta.runs) == ("completed", "", 1)


@BOTH_POOLS
def test_a_first_chunk_runs_under_the_time_limits_of_the_worker_that_runs_it(
    settings: Settings, start_worker: Callable[..., WorkerProcess], script: Callable[..., str]
) -> None:
    """Enqueued by a process whose soft limit is 60 s, the chunk still stops at the worker's own
    0.5 s and self-chains."""
    start_worker()  # DRES_SOFT_LIMIT_S=0.5 (the integration settings)
    api_side = Runtime.from_settings(
        load_settings(soft_limit_s=60.0, hard_limit_s=90.0, visibility_timeout_s=0)
    )
    try:
        turn = api_side.lifecycle.enqueue("think", model=script([think(3.0), DONE]))
        events = wait_for(api_side.ledger, turn.turn_id, ended(), timeout=15, what="turn end")
    finally:
        api_side.redis.close()

    first, second = of(events, "run_started")[:2]
    [handed] = of(events, "run_ended", run_id=first.run_id)
    assert handed.reason == "soft_limit", show(events)
    assert handed.ts - first.ts < settings.soft_limit_s + 1.0
    assert second.cause == "next_chunk"
    assert [e.status for e in of(events, "turn_ended")] == ["completed"]


@BOTH_POOLS
def test_a_live_runs_heartbeat_keeps_its_lease_through_a_step_many_leases_long(
    runtime: Runtime,
    settings: Settings,
    start_worker: Callable[..., WorkerProcess],
    script: Callable[..., str],
) -> None:
    """A 3 s step under a 1 s lease: the heartbeat renews it, so no reaper takes the turn over."""
    start_worker(overrides={**LONG_VT, "DRES_SOFT_LIMIT_S": "10", "DRES_HARD_LIMIT_S": "15"})
    turn = runtime.lifecycle.enqueue("think long", model=script([think(3.0), DONE]))
    wait_for(runtime.ledger, turn.turn_id, having("run_started"), what="the run's start")
    first = runtime.ledger.meta(turn.turn_id).lease_until

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=15, what="turn end")

    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    assert len(of(events, "run_started")) == 1, "the live run was never taken over"
    assert not of(events, "run_ended", reason="crashed")
    [done] = of(events, "turn_ended")
    assert done.ts - of(events, "run_started")[0].ts > 3 * settings.lease_s
    assert first > 0


@BOTH_POOLS
def test_a_live_runs_heartbeat_keeps_its_lease_while_a_long_tool_runs(
    runtime: Runtime, start_worker: Callable[..., WorkerProcess], script: Callable[..., str]
) -> None:
    """``slow_write`` works for a second after its side effect, over three 0.3 s leases, inside
    the soft-limit deferral: the heartbeat thread renews the lease meanwhile, so the reaper never
    takes the turn over and the write runs once."""
    start_worker(overrides={"DRES_LEASE_S": "0.3"})
    model = script([slow_write("long"), DONE])
    turn = runtime.lifecycle.enqueue("write slowly", mode="background", model=model)

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=15, what="turn end")

    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    assert not of(events, "run_ended", reason="crashed"), show(events)
    [start] = of(events, "tool_start", tool="slow_write")
    [done] = of(events, "tool_done", tool="slow_write")
    assert done.ts - start.ts >= 1.0 > 3 * 0.3
    assert len(effects(runtime.redis, "slow_write")) == 1


@BOTH_POOLS
def test_a_paused_run_is_taken_over_and_when_it_wakes_it_cannot_write(
    runtime: Runtime, start_worker: Callable[..., WorkerProcess], script: Callable[..., str]
) -> None:
    """SIGSTOP of the process running a background turn: its heartbeat stops, the other
    worker's reaper takes the turn over once the lease runs out and finishes it; SIGCONT then
    wakes a zombie whose every append is fenced out."""
    limits = {**LONG_VT, "DRES_BG_SOFT_LIMIT_S": "20", "DRES_BG_HARD_LIMIT_S": "30"}
    paused_worker = start_worker(overrides=limits)
    model = script([think(4.0), DONE])
    turn = runtime.lifecycle.enqueue("think", mode="background", model=model)
    [first] = of(
        wait_for(runtime.ledger, turn.turn_id, having("model_start"), what="the first step"),
        "run_started",
    )
    child = paused_worker.running_chunks()
    start_worker(overrides=limits)
    os.kill(child, signal.SIGSTOP)
    try:
        events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=20, what="turn end")
    finally:
        os.kill(child, signal.SIGCONT)
    crashed = of(events, "run_ended", run_id=first.run_id, reason="crashed")
    assert crashed, show(events)
    taken_over_at = len(runtime.ledger.read_turn(turn.turn_id))

    # The zombie wakes mid-step; its next write is refused and it stops.
    wait_until(
        lambda: "another run holds the turn" in paused_worker.log(),
        timeout=15,
        what="the woken run fenced out",
    )
    stream = runtime.ledger.read_turn(turn.turn_id)
    assert len(stream) == taken_over_at, "the zombie appended nothing"
    assert [e.event.run_id for e in stream].count(first.run_id) == _written_before(
        stream, first.run_id
    )
    assert [e.status for e in of(events, "turn_ended")] == ["completed"]


def _written_before(stream: list[object], run_id: str) -> int:
    """Events of ``run_id`` up to its takeover's ``run_ended`` (everything it may own)."""
    count = 0
    for envelope in stream:
        event: Event = envelope.event  # type: ignore[attr-defined]
        if event.run_id == run_id:
            count += 1
            if event.type == "run_ended":
                break
    return count
