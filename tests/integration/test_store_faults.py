"""The store's own faults (docs/faults.md): a real redis-server (AOF on), the ledger's and the
broker's, killed with SIGKILL and started again on the same port and directory while turns run.

Workers ride it out in the same processes (none exits, none stops consuming), a write that
finished while Redis was away is recorded as completed once it is back, and no write runs twice.
fakeredis cannot do this: every fault here is a real server's.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sample_tools import outside_effects

from chaos.takeovers import TAKEOVER_CAUSES, ZOMBIE_LINES
from rigs import DONE, ended, having, of, outside_write, show, wait_for, wait_until
from tests.support.fixtures import BOTH_POOLS, StartWorker, outside_worker, own_redis
from worker.dev.redis_server import RedisServer
from worker.dev.worker_process import WorkerProcess
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server

#: chunk limits long enough for a write of a few seconds, and a lease that an outage outlasts
LONG_CHUNKS = {
    "DRES_SOFT_LIMIT_S": "10",
    "DRES_HARD_LIMIT_S": "15",
    "DRES_BG_SOFT_LIMIT_S": "10",
    "DRES_BG_HARD_LIMIT_S": "15",
    "DRES_VISIBILITY_TIMEOUT_S": "40",
    "DRES_LEASE_S": "2",
}
#: seconds a turn may take to end once Redis is back (Celery's consumer reconnects after up to
#: ~6 s of backoff)
AFTER_S = 40.0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RedisServer]:
    """This test's own redis-server: the ledger and the broker, killed and restarted here."""
    yield from own_redis(tmp_path)


@pytest.fixture
def redis_url(store: RedisServer) -> str:
    return store.url


@pytest.fixture
def long_worker(
    start_worker: StartWorker, effects_file: str, monkeypatch: pytest.MonkeyPatch
) -> StartWorker:
    return outside_worker(start_worker, effects_file, monkeypatch, LONG_CHUNKS)


def restart(store: RedisServer, down_s: float) -> None:
    """SIGKILL the server, keep it down ``down_s`` seconds, start it on the same port and dir."""
    store.kill()
    time.sleep(down_s)  # the outage itself, not a wait for state
    store.start()


def started_writing(runtime: Runtime, turn_id: str, effects_file: str, label: str) -> None:
    wait_for(runtime.ledger, turn_id, having("tool_start", tool="outside_write"), what="the call")
    wait_until(lambda: outside_effects(effects_file, label), timeout=5, what="the write's effect")


def test_a_busy_and_an_idle_worker_each_serve_a_new_turn_after_a_redis_restart(
    runtime: Runtime,
    store: RedisServer,
    long_worker: StartWorker,
    script: Callable[..., str],
    effects_file: str,
) -> None:
    busy = long_worker(extra=("-Q", runtime.settings.foreground_queue))
    idle = long_worker(extra=("-Q", runtime.settings.background_queue))
    first = runtime.lifecycle.enqueue(
        "write a", model=script([outside_write("a", 3.0), DONE], on_resume="restart")
    )
    started_writing(runtime, first.turn_id, effects_file, "a")

    restart(store, 2.0)

    events = wait_for(runtime.ledger, first.turn_id, ended(), timeout=AFTER_S, what="turn end")
    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    assert len(outside_effects(effects_file, "a")) == 1, "the write ran once"
    for mode, label in (("foreground", "b"), ("background", "c")):
        model = script([outside_write(label, 0.0), DONE])
        turn = runtime.lifecycle.enqueue(f"write {label}", mode=mode, model=model)
        events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=AFTER_S, what=mode)
        assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
        assert len(outside_effects(effects_file, label)) == 1
    assert busy.alive() and idle.alive(), "a worker exited after the restart"


@BOTH_POOLS
def test_a_write_that_finishes_during_a_6_s_outage_is_recorded_completed(
    runtime: Runtime,
    store: RedisServer,
    long_worker: StartWorker,
    script: Callable[..., str],
    effects_file: str,
) -> None:
    worker = long_worker()
    model = script([outside_write("a", 2.0), DONE], on_resume="restart")
    turn = runtime.lifecycle.enqueue("write a", mode="background", model=model)
    started_writing(runtime, turn.turn_id, effects_file, "a")

    restart(store, 6.0)  # the write's 2 s of work end while Redis is away

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=AFTER_S, what="turn end")
    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    [start] = of(events, "tool_start", tool="outside_write")
    [done] = of(events, "tool_done", tool="outside_write")
    assert (done.call_id, done.run_id, done.is_error) == (start.call_id, start.run_id, False)
    # a resumed run that asks again meets layer 2 (completed), never the interrupted-write guard
    assert {e.reason for e in of(events, "tool_blocked")} <= {"completed"}, show(events)
    assert len(outside_effects(effects_file, "a")) == 1, "the write ran once"
    assert worker.alive()


@BOTH_POOLS
def test_a_restart_during_a_foreground_and_a_background_turn_loses_neither(
    runtime: Runtime,
    store: RedisServer,
    long_worker: StartWorker,
    script: Callable[..., str],
    effects_file: str,
) -> None:
    worker = long_worker(concurrency=2)
    turns = {
        label: runtime.lifecycle.enqueue(
            f"write {label}",
            mode=mode,
            model=script(
                [outside_write(label, 2.0), outside_write(f"{label}2", 0.0), DONE],
                on_resume="restart",
            ),
        )
        for label, mode in (("f", "foreground"), ("g", "background"))
    }
    for label, turn in turns.items():
        started_writing(runtime, turn.turn_id, effects_file, label)

    restart(store, 2.0)

    for label, turn in turns.items():
        events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=AFTER_S, what=label)
        assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
        for written in (label, f"{label}2"):
            assert len(outside_effects(effects_file, written)) == 1, f"{written} ran once"
    assert worker.alive()


def test_a_full_redis_stops_the_running_turn_with_store_full_and_continue_completes_it(
    runtime: Runtime,
    long_worker: StartWorker,
    script: Callable[..., str],
    effects_file: str,
) -> None:
    """At ``maxmemory`` under ``noeviction`` the write's ``tool_done`` is refused: the turn
    stops with ``store_full`` (Continue available, never automatic), the refused ``tool_done``
    recorded by the stop itself; once memory is freed Continue completes it, the write once."""
    worker = long_worker()
    model = script([outside_write("a", 1.0), outside_write("b", 0.0), DONE], on_resume="restart")
    turn = runtime.lifecycle.enqueue("write a then b", model=model)
    started_writing(runtime, turn.turn_id, effects_file, "a")
    runtime.redis.config_set("maxmemory", 1)  # every write refused from now on
    try:
        events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=AFTER_S, what="the stop")
        [stop] = of(events, "turn_ended")
        assert (stop.status, stop.code, stop.can_continue) == ("stopped", "store_full", True)
        [done] = of(events, "tool_done", tool="outside_write")
        assert done.is_error is False, "the write's result was recorded with the stop"
        refused = runtime.lifecycle.continue_turn(turn.turn_id, auto=True)
        assert not refused.ok, "a store_full stop is never continued automatically"
    finally:
        runtime.redis.config_set("maxmemory", 0)

    assert runtime.lifecycle.continue_turn(turn.turn_id, auto=False).ok
    events = wait_for(runtime.ledger, turn.turn_id, ended("completed"), timeout=AFTER_S)
    assert len(outside_effects(effects_file, "a")) == 1, "the recorded write did not run again"
    assert len(outside_effects(effects_file, "b")) == 1
    assert worker.alive()


@BOTH_POOLS
def test_a_paused_redis_is_ridden_out_by_the_running_run_without_a_takeover(
    runtime: Runtime,
    store: RedisServer,
    long_worker: StartWorker,
    script: Callable[..., str],
    effects_file: str,
) -> None:
    """SIGSTOP for longer than the lease (a partition stand-in), then SIGCONT: every command
    waits instead of failing, the heartbeat cannot renew meanwhile, and the run goes on: its
    write recorded once, no takeover. (Which of the heartbeat and the reaper speaks first after
    SIGCONT is a race here; tests/contract/test_lifecycle.py pins the reaper's side.)"""
    worker = long_worker()
    model = script([outside_write("a", 1.0), DONE], on_resume="restart")
    turn = runtime.lifecycle.enqueue("write a", mode="background", model=model)
    started_writing(runtime, turn.turn_id, effects_file, "a")
    assert store.process is not None
    os.kill(store.process.pid, signal.SIGSTOP)
    try:
        time.sleep(3.0)  # the pause itself (the lease is 2 s), not a wait for state
    finally:
        os.kill(store.process.pid, signal.SIGCONT)

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=AFTER_S, what="turn end")
    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    assert len(of(events, "run_started")) == 1, f"a live run was taken over:\n{show(events)}"
    assert len(outside_effects(effects_file, "a")) == 1
    assert worker.alive()


@BOTH_POOLS
def test_a_run_that_outlasts_its_outage_window_gives_up_and_its_turn_resumes_without_a_repeat(
    runtime: Runtime,
    store: RedisServer,
    long_worker: StartWorker,
    effects_file: str,
    script: Callable[..., str],
) -> None:
    """Beyond ``DRES_STORE_OUTAGE_S`` the run gives up without writing; once Redis is back the
    reaper resumes the background turn, whose write is now an interrupted one: the guard refuses
    to run it blind again, and the turn completes with one effect. Under gevent the chunk's ack
    fails during the outage, and the worker goes on taking messages (``edges/celery/marks.py``)."""
    worker = long_worker(overrides={"DRES_STORE_OUTAGE_S": "1"})
    model = script([outside_write("a", 2.0), DONE], on_resume="restart")
    turn = runtime.lifecycle.enqueue("write a", mode="background", model=model)
    started_writing(runtime, turn.turn_id, effects_file, "a")

    restart(store, 4.0)  # the write ends 1 s in, its record gives up 1 s later

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=AFTER_S, what="turn end")
    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    assert not of(events, "tool_done", tool="outside_write"), show(events)
    assert [e.reason for e in of(events, "tool_blocked")] == ["interrupted"], show(events)
    assert len(of(events, "run_started")) == 2, show(events)
    assert len(outside_effects(effects_file, "a")) == 1, "the interrupted write never ran again"
    assert worker.alive()


def test_a_worker_with_a_free_slot_stays_up_through_a_restart_while_a_chunk_runs(
    runtime: Runtime,
    store: RedisServer,
    long_worker: StartWorker,
    script: Callable[..., str],
    effects_file: str,
) -> None:
    """A pool slot is free, so the consumer is waiting in BRPOP when Redis goes, while a
    chunk's message is unacknowledged: the case kombu's close path used to die on."""
    worker = long_worker(concurrency=2)
    model = script([outside_write("a", 3.0), DONE], on_resume="restart")
    turn = runtime.lifecycle.enqueue("write a", mode="background", model=model)
    started_writing(runtime, turn.turn_id, effects_file, "a")

    restart(store, 2.0)

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=AFTER_S, what="turn end")
    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    assert len(outside_effects(effects_file, "a")) == 1, "the write ran once"
    after = runtime.lifecycle.enqueue(
        "write b", mode="background", model=script([outside_write("b", 0.0), DONE])
    )
    events = wait_for(runtime.ledger, after.turn_id, ended(), timeout=AFTER_S, what="next turn")
    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    assert worker.alive(), "the worker exited after the restart"


def kept_its_turn(runtime: Runtime, turn_id: str, worker: WorkerProcess, effects: str) -> None:
    """The live run ended its turn itself (``live_run_kept``), its write ``a`` once, and the
    worker rode the outage out."""
    events = wait_for(runtime.ledger, turn_id, ended(), timeout=AFTER_S, what="turn end")
    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    live_run_kept(events, worker)
    assert len(outside_effects(effects, "a")) == 1, "the write ran once"
    assert worker.alive()


def live_run_kept(events: list[Any], worker: WorkerProcess) -> None:
    """No run of the turn was taken for dead (issue 46): no ``run_started`` of a takeover's
    cause (a hand-over, when the worker cancels its chunks as it loses the broker, is none), and
    no line of the worker's saying a live run found its turn taken."""
    causes = {e.cause for e in of(events, "run_started")}
    assert not TAKEOVER_CAUSES & causes, f"a live run was taken over:\n{show(events)}"
    log = worker.log()
    assert not [line for line in ZOMBIE_LINES if line in log], "a live run found its turn taken"


@BOTH_POOLS
@pytest.mark.parametrize("outage", ["restart", "pause"])
def test_a_live_run_outlasting_its_lease_in_a_redis_outage_keeps_its_turn(
    runtime: Runtime,
    store: RedisServer,
    long_worker: StartWorker,
    script: Callable[..., str],
    effects_file: str,
    outage: str,
) -> None:
    """Redis away for twice the lease (SIGKILL and an AOF restart, or SIGSTOP) while a live run
    works: no heartbeat can renew its lease meanwhile, so once Redis is back the lease has run
    out. Neither the reaper nor the run's own message, which kombu puts back in its queue when
    the consumer reconnects (a free pool slot takes it), may take the turn for dead before the
    live run's heartbeat renews: the run ends the turn itself, its write once."""
    worker = long_worker(concurrency=2)
    model = script([outside_write("a", 7.0), DONE], on_resume="restart")
    turn = runtime.lifecycle.enqueue("write a", mode="background", model=model)
    started_writing(runtime, turn.turn_id, effects_file, "a")

    if outage == "restart":
        restart(store, 4.0)
    else:
        store.pause()
        try:
            time.sleep(4.0)  # the pause itself (the lease is 2 s), not a wait for state
        finally:
            store.resume()

    kept_its_turn(runtime, turn.turn_id, worker, effects_file)


def aof_tail(store: RedisServer) -> Path:
    """The AOF file redis-server appends to now (Redis 7: the newest ``*.incr.aof``)."""
    [*_, newest] = sorted(
        (store.data_dir / "appendonlydir").glob("*.incr.aof"), key=lambda p: p.stat().st_mtime
    )
    return newest


@BOTH_POOLS
def test_a_restart_that_loses_the_aofs_last_renewals_takes_no_live_run_for_dead(
    runtime: Runtime,
    store: RedisServer,
    long_worker: StartWorker,
    script: Callable[..., str],
    effects_file: str,
) -> None:
    """``appendfsync everysec`` loses up to the last two seconds of acknowledged writes when
    redis-server is killed while a slow disk holds back its writes (a loaded host): here the
    AOF is cut back after the SIGKILL to where it stood a lease ago, so that the live run's
    renewals since are lost and the turn comes back from the restart with its lease run out.
    The restart is short: no command of the worker's fails (redis-py reconnects inside it) and
    none stalls, yet the reaper must wait for the run's heartbeat rather than take it for dead
    (the chaos run's false takeover, seed 61, trial 83)."""
    worker = long_worker(overrides={"DRES_LEASE_S": "3"})
    model = script([outside_write("a", 8.0), DONE], on_resume="restart")
    turn = runtime.lifecycle.enqueue("write a", mode="background", model=model)
    started_writing(runtime, turn.turn_id, effects_file, "a")
    aof = aof_tail(store)
    kept, lease_until = aof.stat().st_size, runtime.ledger.meta(turn.turn_id).lease_until
    # renewals a full lease beyond it: cut back, the lease has run out by the restart
    wait_until(
        lambda: runtime.ledger.meta(turn.turn_id).lease_until >= lease_until + 3000,
        timeout=10,
        what="a lease's worth of renewals",
    )

    store.kill()
    with aof.open("r+b") as f:
        f.truncate(kept)  # the writes a busy disk held back are lost with the process
    store.start()

    kept_its_turn(runtime, turn.turn_id, worker, effects_file)
