"""Schedules on real worker processes (docs/semantics.md, schedules): the workers' reapers fire
due ticks, with no beat to run. An ``at`` with two workers running starts exactly one turn, which
completes; an ``every: 1`` schedule while workers are SIGKILLed and restarted never has two turns
for one tick, and its ticks keep coming; once deleted, none of its later ticks starts a turn
(shown by another schedule's later ticks, not by a sleep)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
import redis

from ledger.codec import text
from ledger.events import TurnStarted
from rigs import DONE, WorkerProcess, ended, wait_for, wait_until
from tests.support.fixtures import BOTH_POOLS
from worker.edges.runtime import Runtime
from worker.lifecycle.schedules import tick_turn_id

pytestmark = pytest.mark.redis_server

#: a reaper's look every 0.2 s (the suite's), so two workers race for each tick
WORKERS = {"DRES_REAPER_INTERVAL_S": "0.2"}


def scheduled_turns(runtime: Runtime) -> list[TurnStarted]:
    """Every turn in Redis that a schedule started, by its ``turn_started``."""
    client: redis.Redis = runtime.redis
    metas = [text(k) for k in client.scan_iter(match="dres:turn:{*}:meta", count=1000)]
    turn_ids = [m.split("{", 1)[1].split("}", 1)[0] for m in metas]
    found = runtime.ledger.started(turn_ids)
    return [s for s in found if s is not None and s.schedule_id is not None]


def of_schedule(runtime: Runtime, schedule_id: str) -> list[TurnStarted]:
    return [s for s in scheduled_turns(runtime) if s.schedule_id == schedule_id]


def assert_one_turn_per_tick(turns: list[TurnStarted]) -> None:
    """Each (schedule, tick) has one turn, and that turn's id is the one derived from both."""
    per_tick = Counter((s.schedule_id, s.tick_at) for s in turns)
    assert [k for k, n in per_tick.items() if n > 1] == []
    for s in turns:
        assert s.schedule_id is not None and s.tick_at is not None
        assert s.turn_id == tick_turn_id(s.schedule_id, round(s.tick_at * 1000))


@BOTH_POOLS
def test_an_at_schedule_with_two_workers_running_starts_exactly_one_turn_which_completes(
    runtime: Runtime,
    start_worker: Callable[..., WorkerProcess],
    script: Callable[..., str],
) -> None:
    for _ in range(2):
        start_worker(overrides=WORKERS)
    at = datetime.fromtimestamp(time.time() + 1, UTC).isoformat()
    schedule = runtime.lifecycle.add_schedule("remind the customer", at=at, model=script([DONE]))
    fired = wait_until(
        lambda: (s := runtime.lifecycle.schedule(schedule.schedule_id)) and s.last_turn_id,
        timeout=20,
        what="the at's turn",
    )
    events = wait_for(runtime.ledger, fired, ended("completed"), timeout=30, what="its end")
    assert [e.type for e in events if e.type == "turn_ended"] == ["turn_ended"]
    spent = runtime.lifecycle.schedule(schedule.schedule_id)
    assert spent is not None and spent.next_ms is None
    turns = scheduled_turns(runtime)
    assert [s.turn_id for s in turns] == [fired]
    assert_one_turn_per_tick(turns)


def test_every_1_under_worker_kills_never_starts_two_turns_for_a_tick_and_stops_once_deleted(
    runtime: Runtime,
    start_worker: Callable[..., WorkerProcess],
    script: Callable[..., str],
) -> None:
    workers = [start_worker(overrides=WORKERS) for _ in range(2)]
    model = script([DONE])
    schedule = runtime.lifecycle.add_schedule("check the build", every=1, model=model)
    sid = schedule.schedule_id
    for round_ in range(3):
        # ticks keep coming: two more turns of the schedule, then a worker dies and another starts
        seen = len(of_schedule(runtime, sid))
        wait_until(
            lambda seen=seen: len(of_schedule(runtime, sid)) >= seen + 2,
            timeout=30,
            what=f"two more ticks (round {round_})",
        )
        workers.pop(0).kill_group()
        workers.append(start_worker(overrides=WORKERS))
    assert runtime.lifecycle.remove_schedule(sid)
    deleted_at = time.time()
    # another schedule's two ticks after the delete: every worker's reaper swept since
    other = runtime.lifecycle.add_schedule("the other one", every=1, model=model)

    def later_ticks() -> int:
        turns = of_schedule(runtime, other.schedule_id)
        return len([s for s in turns if (s.tick_at or 0) > deleted_at + 1])

    wait_until(lambda: later_ticks() >= 2, timeout=30, what="the other schedule's later ticks")
    turns = scheduled_turns(runtime)
    assert_one_turn_per_tick(turns)
    mine = [s for s in turns if s.schedule_id == sid]
    assert len(mine) >= 6
    # each turn is one of the schedule's ticks: one interval apart from its making
    assert all((round((s.tick_at or 0) * 1000) - schedule.created_ms) % 1000 == 0 for s in mine)
    # a tick being fired as the delete came may start its one turn; none after it
    assert [s.tick_at for s in mine if (s.tick_at or 0) > deleted_at] == []
