"""Timers (docs/semantics.md, timers) on real ``dres worker`` processes and a real redis-server of
the test's own (AOF on): a turn whose tool returned ``wait_until`` waits held by no worker — a
one-process worker serves another turn meanwhile — and wakes within 2 s of its time under the
production reaper interval, on both pools; it outlives a SIGKILLed worker and a Redis restart, and
a time that passed while no worker ran wakes the turn once one starts. One effect each time.
``tests/contract/test_timers.py`` is the in-process counterpart.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sample_tools import effects

from ledger.turn import TurnStatus
from rigs import DONE, ended, having, of, show, wait_for
from tests.support.fixtures import BOTH_POOLS, StartWorker, own_redis
from worker.dev.redis_server import RedisServer
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server

#: seconds from now a test's timer falls due: room for the turn to reach its wait first
TIMER_S = 5.0
#: the production reaper interval (DRES_REAPER_INTERVAL_S's default), not the suite's 0.2 s
DEFAULT_REAPER = {"DRES_REAPER_INTERVAL_S": "1.0"}
#: docs/semantics.md (timers): a timer's turn resumes within this many seconds of its wake_at
WAKE_S = 2.0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RedisServer]:
    """This test's own redis-server (AOF on): restarted by a test."""
    yield from own_redis(tmp_path)


@pytest.fixture
def redis_url(store: RedisServer) -> str:
    return store.url


def remind(at: float, label: str = "a") -> dict[str, Any]:
    return {"text": "", "tool_calls": [{"name": "remind_at", "input": {"at": at, "label": label}}]}


def waits_on_its_timer(runtime: Runtime, turn_id: str) -> None:
    wait_for(runtime.ledger, turn_id, having("run_ended", reason="waiting"), what="the wait")
    meta = runtime.ledger.meta(turn_id)
    assert (meta.status, meta.waiting_for) == (TurnStatus.WAITING, "timer"), meta


def woke_once(runtime: Runtime, turn_id: str, wake_at: float) -> list[Any]:
    """The turn completed; its runs: the first, then one woken by its timer, not before it."""
    events = wait_for(runtime.ledger, turn_id, ended(), timeout=40, what="the turn's end")
    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    started_runs = of(events, "run_started")
    assert [e.cause for e in started_runs] == ["first", "timer"], show(events)
    assert started_runs[1].ts >= wake_at, show(events)
    assert len(effects(runtime.ledger.client, "remind_at")) == 1
    return events


@BOTH_POOLS
def test_a_waiting_timer_leaves_a_one_process_worker_free_and_wakes_on_time(
    runtime: Runtime, start_worker: StartWorker, script: Any
) -> None:
    start_worker(concurrency=1, overrides=DEFAULT_REAPER)
    wake_at = time.time() + TIMER_S
    waiting = runtime.lifecycle.enqueue("remind me", model=script([remind(wake_at), DONE]))
    waits_on_its_timer(runtime, waiting.turn_id)

    other = runtime.lifecycle.enqueue("hello", model=script([DONE]))
    other_events = wait_for(runtime.ledger, other.turn_id, ended(), what="the other turn")

    events = woke_once(runtime, waiting.turn_id, wake_at)
    woken = of(events, "run_started")[1]
    # the one worker process served the other turn while this one waited on its timer
    assert of(other_events, "turn_ended")[0].status == "completed", show(other_events)
    assert of(other_events, "turn_ended")[0].ts < woken.ts
    assert woken.ts - wake_at <= WAKE_S, f"woke {woken.ts - wake_at:.2f} s after its time"


def test_a_timer_outlives_a_sigkilled_worker_and_a_redis_restart_and_wakes_on_a_new_worker(
    runtime: Runtime, start_worker: StartWorker, script: Any, store: RedisServer
) -> None:
    worker = start_worker(concurrency=1)
    wake_at = time.time() + TIMER_S
    turn = runtime.lifecycle.enqueue("remind me", model=script([remind(wake_at), DONE]))
    waits_on_its_timer(runtime, turn.turn_id)

    worker.kill_group()
    store.kill()
    store.start()  # the same port and AOF: the wait and the reaper's index come back
    assert runtime.ledger.meta(turn.turn_id).waiting_for == "timer"
    # the time passes while no worker runs (the outage itself, not a wait for state)
    time.sleep(max(0.0, wake_at - time.time()) + 0.5)
    start_worker(concurrency=1)

    woke_once(runtime, turn.turn_id, wake_at)


def test_a_stopped_timer_never_wakes(
    runtime: Runtime, start_worker: StartWorker, script: Any
) -> None:
    start_worker(concurrency=1)
    wake_at = time.time() + 2.0
    turn = runtime.lifecycle.enqueue("remind me", model=script([remind(wake_at), DONE]))
    waits_on_its_timer(runtime, turn.turn_id)

    runtime.lifecycle.stop(turn.turn_id)
    # a later timer of another turn wakes: the reaper swept past this one's time meanwhile
    later = runtime.lifecycle.enqueue("later", model=script([remind(wake_at + 1, "b"), DONE]))
    wait_for(runtime.ledger, later.turn_id, ended(), timeout=30, what="the later turn")

    events = runtime.ledger.events(turn.turn_id)
    assert [e.cause for e in of(events, "run_started")] == ["first"], show(events)
    assert runtime.ledger.meta(turn.turn_id).code == "cancelled"
