"""The store's own faults (CONTRACT §7.13): a real redis-server (AOF on), the ledger's and the
broker's, killed with SIGKILL and started again on the same port and directory while turns run.

Workers ride it out in the same processes (none exits, none stops consuming), a write that
finished while Redis was away is recorded as completed once it is back, and no write runs twice.
fakeredis cannot do this: every fault here is a real server's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sample_tools import OUTSIDE_EFFECTS, outside_effects

from tests.support import DONE, WorkerProcess, ended, having, of, show, wait_for, wait_until
from tests.support.fixtures import StartWorker, started
from worker.dev.redis_server import RedisServer
from worker.edges.client import enqueue
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
    yield from started(
        lambda: RedisServer(data_dir=tmp_path / "redis").start(), "a real redis-server"
    )


@pytest.fixture
def redis_url(store: RedisServer) -> str:
    return store.url


@pytest.fixture
def effects_file(tmp_path: Path) -> str:
    return str(tmp_path / "effects.jsonl")


@pytest.fixture
def long_worker(
    start_worker: StartWorker, effects_file: str, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., WorkerProcess]:
    for name, value in LONG_CHUNKS.items():
        monkeypatch.setenv(name, value)  # this process's runtime reads the same settings

    def start(**kwargs: Any) -> WorkerProcess:
        overrides = {**LONG_CHUNKS, OUTSIDE_EFFECTS: effects_file}
        return start_worker(overrides=overrides, **kwargs)

    return start


def write(label: str, seconds: float) -> dict[str, Any]:
    """A step calling ``outside_write``: its effect lands in a file, then ``seconds`` of work."""
    call = {"name": "outside_write", "input": {"label": label, "seconds": seconds}}
    return {"tool_calls": [call]}


def restart(store: RedisServer, down_s: float) -> None:
    """SIGKILL the server, keep it down ``down_s`` seconds, start it on the same port and dir."""
    store.kill()
    time.sleep(down_s)  # the outage itself, not a wait for state
    store.start()


def effects_of(effects_file: str, label: str) -> list[dict[str, Any]]:
    return [row for row in outside_effects(effects_file) if row["label"] == label]


def started_writing(runtime: Runtime, turn_id: str, effects_file: str, label: str) -> None:
    wait_for(runtime.ledger, turn_id, having("tool_start", tool="outside_write"), what="the call")
    wait_until(lambda: effects_of(effects_file, label), timeout=5, what="the write's effect")


def test_a_busy_and_an_idle_worker_each_serve_a_new_turn_after_a_redis_restart(
    runtime: Runtime,
    store: RedisServer,
    long_worker: Callable[..., WorkerProcess],
    script: Callable[..., str],
    effects_file: str,
) -> None:
    busy = long_worker(extra=("-Q", runtime.settings.foreground_queue))
    idle = long_worker(extra=("-Q", runtime.settings.background_queue))
    first = enqueue(runtime, "write a", model=script([write("a", 3.0), DONE], on_resume="restart"))
    started_writing(runtime, first.turn_id, effects_file, "a")

    restart(store, 2.0)

    events = wait_for(runtime.ledger, first.turn_id, ended(), timeout=AFTER_S, what="turn end")
    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    assert len(effects_of(effects_file, "a")) == 1, "the write ran once"
    for mode, label in (("foreground", "b"), ("background", "c")):
        model = script([write(label, 0.0), DONE])
        turn = enqueue(runtime, f"write {label}", mode=mode, model=model)
        events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=AFTER_S, what=mode)
        assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
        assert len(effects_of(effects_file, label)) == 1
    assert busy.alive() and idle.alive(), "a worker exited after the restart"


def test_a_write_that_finishes_during_a_6_s_outage_is_recorded_completed(
    runtime: Runtime,
    store: RedisServer,
    long_worker: Callable[..., WorkerProcess],
    script: Callable[..., str],
    effects_file: str,
) -> None:
    worker = long_worker()
    model = script([write("a", 2.0), DONE], on_resume="restart")
    turn = enqueue(runtime, "write a", mode="background", model=model)
    started_writing(runtime, turn.turn_id, effects_file, "a")

    restart(store, 6.0)  # the write's 2 s of work end while Redis is away

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=AFTER_S, what="turn end")
    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    [start] = of(events, "tool_start", tool="outside_write")
    [done] = of(events, "tool_done", tool="outside_write")
    assert (done.call_id, done.run_id, done.is_error) == (start.call_id, start.run_id, False)
    # a resumed run that asks again meets layer 2 (completed), never the interrupted-write guard
    assert {e.reason for e in of(events, "tool_blocked")} <= {"completed"}, show(events)
    assert len(effects_of(effects_file, "a")) == 1, "the write ran once"
    assert worker.alive()


def test_a_restart_during_a_foreground_and_a_background_turn_loses_neither(
    runtime: Runtime,
    store: RedisServer,
    long_worker: Callable[..., WorkerProcess],
    script: Callable[..., str],
    effects_file: str,
) -> None:
    worker = long_worker(concurrency=2)
    turns = {
        label: enqueue(
            runtime,
            f"write {label}",
            mode=mode,
            model=script([write(label, 2.0), write(f"{label}2", 0.0), DONE], on_resume="restart"),
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
            assert len(effects_of(effects_file, written)) == 1, f"{written} ran once"
    assert worker.alive()


def test_a_worker_with_a_free_slot_stays_up_through_a_restart_while_a_chunk_runs(
    runtime: Runtime,
    store: RedisServer,
    long_worker: Callable[..., WorkerProcess],
    script: Callable[..., str],
    effects_file: str,
) -> None:
    """A pool slot is free, so the consumer is waiting in BRPOP when Redis goes, while a
    chunk's message is unacknowledged: the case kombu's close path used to die on."""
    worker = long_worker(concurrency=2)
    model = script([write("a", 3.0), DONE], on_resume="restart")
    turn = enqueue(runtime, "write a", mode="background", model=model)
    started_writing(runtime, turn.turn_id, effects_file, "a")

    restart(store, 2.0)

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=AFTER_S, what="turn end")
    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    assert len(effects_of(effects_file, "a")) == 1, "the write ran once"
    after = enqueue(runtime, "write b", mode="background", model=script([write("b", 0.0), DONE]))
    events = wait_for(runtime.ledger, after.turn_id, ended(), timeout=AFTER_S, what="next turn")
    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    assert worker.alive(), "the worker exited after the restart"
