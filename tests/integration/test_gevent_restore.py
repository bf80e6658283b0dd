"""A gevent-only deployment (docs/deploy.md) restores a killed worker's received but unstarted
chunks: the tripwires of ``worker.edges.celery.transport``'s ``_RestoresOnItsOwn`` and
of ``worker.edges.celery.app``'s ``UNACKED_MUTEX_EXPIRE_S``. Each test SIGKILLs a
``dres worker -P gevent -c 2`` that holds one more chunk message than it runs (its prefetch is
larger than its pool), whose turn no run has claimed: no lease runs out, so the reaper leaves it
to the broker (its message is held there, ``worker.edges.celery.marks``), and only kombu's
restore of the unacknowledged messages, on a new gevent worker, delivers it again.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from gevent_support import StartWorker, emailed, held_by_broker, sound

from rigs import DONE, WorkerProcess, of, send, show, think, wait_until
from worker.edges.celery.app import UNACKED_MUTEX_EXPIRE_S, UNACKED_RESTORE_INTERVAL_S
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server

#: chunks longer than the model's wait, with hard limits under the tests' visibility timeout
#: (8 s, ``DRES_ENV``): a restored message is one held that long, a dead worker's
CHUNKS = {"DRES_BG_SOFT_LIMIT_S": "6", "DRES_BG_HARD_LIMIT_S": "7"}
#: seconds each turn waits on its model (first attempt only), holding its greenlet
THINK_S = 4.0
#: turns sent to the dying worker: two run, one is received and waits for a greenlet, one queues
TURNS = 4
#: the dying worker's greenlets, and its prefetch multiplier: it takes messages beyond them
DYING_C, PREFETCH = 2, 4
#: seconds of slack for a loaded machine (worker start, the chunk's own steps)
SLACK_S = 8.0


def started(runtime: Runtime, turn_id: str) -> bool:
    return any(e.event.type == "run_started" for e in runtime.ledger.read_turn(turn_id))


def kill_holding_an_unstarted_chunk(
    runtime: Runtime, start_worker: StartWorker, script: Callable[..., str]
) -> tuple[list[str], list[str]]:
    """``TURNS`` background turns (wait, email, done) on a gevent worker of two greenlets and a
    prefetch of eight, SIGKILLed (its whole group) once it runs two and holds a third message it
    received but could not start; the turns, and those whose message it held unstarted."""
    dying = start_worker(
        concurrency=DYING_C,
        extra=("-P", "gevent", "--prefetch-multiplier", str(PREFETCH)),
        overrides=CHUNKS,
    )
    turns = [
        runtime.lifecycle.enqueue(
            f"email {n}@x.io",
            mode="background",
            model=script([think(THINK_S), send(f"{n}@x.io", "Hi"), DONE]),
        ).turn_id
        for n in range(TURNS)
    ]

    def unstarted_held() -> list[str] | None:
        held = held_by_broker(runtime)
        running = [t for t in turns if started(runtime, t)]
        waiting = [t for t in turns if t not in running and runtime.ledger.meta(t).next_run in held]
        return waiting if len(running) == DYING_C and waiting else None

    waiting = wait_until(unstarted_held, timeout=THINK_S, what="a received, unstarted chunk")
    dying.kill_group()
    assert not [t for t in waiting if started(runtime, t)], "the kill came after they started"
    return turns, waiting


def every_turn_completes_each_email_once(
    runtime: Runtime, turns: list[str], timeout: float
) -> None:
    left = set(turns)

    def done() -> bool:
        left.difference_update([t for t in left if runtime.ledger.meta(t).status.ended])
        return not left

    wait_until(done, timeout=timeout, what="every turn's end", interval=0.25)
    for turn_id in turns:
        events = sound(runtime, turn_id)
        assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    assert emailed(runtime) == Counter({f"{n}@x.io": 1 for n in range(TURNS)})


def successor(start_worker: StartWorker) -> WorkerProcess:
    """A gevent worker with greenlets to spare: its prefetch never fills (a full one would leave
    no BRPOP pending, and Celery's ``synloop`` would restore even without dres's fix)."""
    return start_worker(concurrency=8, extra=("-P", "gevent"), overrides=CHUNKS)


def restore_bound(runtime: Runtime) -> float:
    """Seconds from the kill by which a held message is restored and its turn ends: the
    visibility timeout, a restore interval (two: the sweep may just have passed), the turn."""
    vt = runtime.settings.visibility_timeout
    return vt + 2 * UNACKED_RESTORE_INTERVAL_S + THINK_S + SLACK_S


def test_a_killed_gevent_workers_unstarted_chunk_is_restored_by_a_gevent_worker(
    runtime: Runtime, start_worker: StartWorker, script: Callable[..., str]
) -> None:
    """A gevent worker killed while it holds a chunk message it received but never started:
    a new gevent worker (no prefork worker anywhere) restores it after the visibility timeout,
    and every turn completes, each email sent once."""
    turns, waiting = kill_holding_an_unstarted_chunk(runtime, start_worker, script)
    killed = time.monotonic()
    successor(start_worker)

    every_turn_completes_each_email_once(runtime, turns, restore_bound(runtime))
    took = time.monotonic() - killed
    print(
        f"{len(waiting)} unstarted chunk(s) restored; every turn ended {took:.1f} s after the kill"
    )


def leave_the_mutex_held(runtime: Runtime) -> float:
    """kombu's restore mutex as a worker killed inside a restore leaves it: taken as kombu's
    ``Mutex`` takes it (a redis-py lock: ``SET NX PX`` with this process's token) for the expiry
    a dres worker's channel carries, and never released; the seconds it holds."""
    with runtime.app.connection_for_write() as connection:
        channel: Any = connection.default_channel
        expire = float(channel.unacked_mutex_expire)
        lock = channel.client.lock(channel.unacked_mutex_key, timeout=expire)
        assert lock.acquire(blocking=False), "the mutex was free"
        return expire


def test_a_restore_mutex_left_by_a_killed_worker_delays_the_restore_only_briefly(
    runtime: Runtime, start_worker: StartWorker, script: Callable[..., str]
) -> None:
    """The same kill, and kombu's restore mutex left held as by a worker killed inside a
    restore: it expires within seconds (kombu's own 300 s would stall every restore), the new
    gevent worker restores the held chunk once it has, and every turn completes."""
    turns, waiting = kill_holding_an_unstarted_chunk(runtime, start_worker, script)
    expire = leave_the_mutex_held(runtime)
    taken = runtime.clock.now()
    successor(start_worker)

    every_turn_completes_each_email_once(
        runtime, turns, UNACKED_MUTEX_EXPIRE_S + restore_bound(runtime)
    )
    for turn_id in waiting:
        [run] = of(sound(runtime, turn_id), "run_started")
        # the restore waited for the mutex: else this test could not fail without its expiry
        assert run.ts >= taken + expire - 1, "restored while the mutex was held"
