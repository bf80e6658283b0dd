"""A runtime hands its pool's ways to what runs the chunks (``worker.lifecycle.pools``): a gevent
pool's runs get greenlet interrupts, the process's one batched heartbeat and its one shared
flusher; a prefork pool's (the default: the API, the tests) signal interrupts, a heartbeat thread
beating each run alone and each run's own flusher. Nothing here reaches Redis: the runtimes are
built, not used against a store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ledger.lease import Lease
from worker.base.settings import Settings
from worker.edges import runtime as runtimes
from worker.edges.celery.greenlets import GreenletInterrupts
from worker.edges.cli.worker import POOLS
from worker.edges.runtime import Runtime, run_chunks_on
from worker.engine.flushes import SharedFlusher
from worker.engine.recorder import RunContext
from worker.engine.tools.guard import DeferSignals
from worker.lifecycle.heartbeat import BatchedBeats, Beats
from worker.lifecycle.pools import PREFORK, Pool

#: nothing listens there: a test that asked Redis would fail, not pass
SETTINGS = Settings(redis_url="redis://127.0.0.1:1/0")


def run(turn_id: str) -> RunContext:
    return RunContext(Lease(turn_id=turn_id, run_id="r1", epoch=1, chunk=0))


@pytest.fixture
def chunks_pool() -> Iterator[None]:
    """``dres worker``'s naming of its pool, undone after the test."""
    yield
    run_chunks_on(PREFORK)


def test_the_worker_pools_are_pools_and_prefork_is_the_runtimes_default() -> None:
    assert all(isinstance(pool, Pool) for pool in POOLS.values())
    assert Runtime.from_settings(SETTINGS).pool is PREFORK
    assert Runtime.for_api(SETTINGS).pool is PREFORK
    gevent, prefork = POOLS["gevent"], POOLS["prefork"]
    # the worker's prefork runs its runs as the runtime's default does
    assert (prefork.interrupts, prefork.heartbeats, prefork.chunks_share_a_process) == (
        PREFORK.interrupts,
        PREFORK.heartbeats,
        PREFORK.chunks_share_a_process,
    )
    assert (gevent.interrupts, gevent.heartbeats, gevent.chunks_share_a_process) == (
        GreenletInterrupts,
        BatchedBeats,
        True,
    )


def test_a_gevent_runtimes_runs_share_one_flusher_and_one_batched_heartbeat() -> None:
    rt = Runtime.from_settings(SETTINGS, pool=POOLS["gevent"])
    first, second = rt.loop("t1", interrupts=()), rt.loop("t2", interrupts=())

    assert isinstance(first.guard, GreenletInterrupts)
    assert first.guard is not second.guard, "each run has its own interrupts"
    assert isinstance(first.flusher, SharedFlusher)
    assert first.flusher is second.flusher, "one flusher writes every run's text"
    beats = {rt.heartbeat(run(t), lambda: None).process_beats for t in ("t1", "t2")}
    assert len(beats) == 1 and isinstance(beats.pop(), BatchedBeats)


def test_a_prefork_runtimes_runs_each_write_their_own_text_and_beat_alone() -> None:
    rt = Runtime.from_settings(SETTINGS)
    loop = rt.loop("t1", interrupts=())

    assert isinstance(loop.guard, DeferSignals)
    assert loop.flusher is None, "each run's own flusher thread"
    beats = rt.heartbeat(run("t1"), lambda: None).process_beats
    assert type(beats) is Beats


@pytest.mark.parametrize("pool", ["prefork", "gevent"])
def test_a_runs_looks_for_stop_read_its_runtimes_heartbeat_not_redis(pool: str) -> None:
    """What the runtime's heartbeat of the turn last read of its Stop flag is what the loop's
    frequent looks answer (no round trip: the Redis here is unreachable)."""
    rt = Runtime.from_settings(SETTINGS, pool=POOLS[pool])
    loop = rt.loop("t1", interrupts=())
    beat = rt.heartbeat(run("t1"), lambda: None)
    beat.process_beats.watching["t1"] = beat  # as joining does, without starting its thread

    beat.stop_seen = False
    assert loop.stop_polled("t1") is False
    beat.stop_seen = True
    assert loop.stop_polled("t1") is True


def test_a_worker_names_its_pool_once_for_the_runtime_of_its_chunks(chunks_pool: None) -> None:
    """``run_worker`` names the pool before its pool starts; the chunk tasks' runtime
    (``tasks.chunks``) takes it, with its ways."""
    assert runtimes._chunks_pool is PREFORK
    app = Runtime.from_settings(SETTINGS).app
    assert Runtime.for_chunks(SETTINGS, app).pool is PREFORK

    run_chunks_on(POOLS["gevent"])
    rt = Runtime.for_chunks(SETTINGS, app)

    assert rt.pool is POOLS["gevent"]
    assert isinstance(rt.loop("t1", interrupts=()).guard, GreenletInterrupts)
