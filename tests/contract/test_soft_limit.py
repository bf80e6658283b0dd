"""No lost record (docs/semantics.md): a soft limit that fires while a tool runs waits for
tool_done.

Celery's prefork pool delivers the soft limit as SIGUSR1 whose handler raises; these tests install
such a handler and deliver the real signal, in this process and in a forked child process.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest
import redis
from harness import Harness, SeqIds
from sample_tools import SimulatedSoftLimit, effects

from ledger import keys
from ledger.events import RunEnded, ToolDone
from rigs import DONE, having, wait_for
from worker.base.failpoints import Failpoints
from worker.dev.redis_server import RedisServer
from worker.lifecycle import Lifecycle


def raise_soft_limit(signum: int, frame: FrameType | None) -> None:
    raise SimulatedSoftLimit("soft time limit exceeded (SIGUSR1)")


@pytest.fixture
def soft_limit_handler() -> Iterator[None]:
    previous = signal.signal(signal.SIGUSR1, raise_soft_limit)
    yield
    signal.signal(signal.SIGUSR1, previous)


def call(name: str, label: str) -> dict[str, object]:
    return {"tool_calls": [{"name": name, "input": {"label": label}}]}


def test_a_soft_limit_signal_during_a_write_is_raised_after_its_tool_done_is_recorded(
    client: redis.Redis, tmp_path: Path, soft_limit_handler: None
) -> None:
    h = Harness(client, tmp_path)
    h.start([call("write_signalled", "x"), DONE], on_resume="restart")
    assert h.run_next() is None, "the soft limit did not end the chunk"
    types = [e.type for e in h.events()]
    assert types[-3:] == ["tool_start", "tool_done", "run_ended"]
    assert h.run_to_end().status == "completed"
    assert len(effects(client, "write_signalled")) == 1
    assert [e.reason for e in h.events("tool_blocked")] == ["completed"]  # type: ignore[attr-defined]


def test_a_second_soft_limit_landing_in_the_hand_over_does_not_cut_it(
    client: redis.Redis, tmp_path: Path, soft_limit_handler: None
) -> None:
    """The soft limit lands mid-write; while the chunk hands over (its step recorded, its
    successor not yet sent), SIGUSR1 comes again — as the soft limit does in a shutdown's
    hand-over that a Redis outage stretched. The hand-over goes on: the successor is sent and
    the turn completes, rather than the run dying half handed over for the reaper to find."""
    h = Harness(client, tmp_path)
    h.lifecycle = Lifecycle(
        h.ledger, h.settings, h.clock, h.ids, h.messages, cache=h.cache,
        failpoints=Failpoints(client),
    )  # fmt: skip
    client.hset(keys.chaos_fault(), mapping={"point": "chunk.handoff", "action": "soft_limit"})
    h.start([call("write_signalled", "x"), DONE], on_resume="restart")
    assert h.run_next() is None, "the chunk was not handed over"
    assert client.hget(keys.chaos_fault(), "fired") == b"chunk.handoff"
    ended = [e for e in h.events("run_ended") if isinstance(e, RunEnded)]
    assert [e.reason for e in ended] == ["soft_limit"]
    assert h.run_to_end().status == "completed"
    assert len(effects(client, "write_signalled")) == 1


def _run_chunk_in_child(h: Harness) -> None:
    signal.signal(signal.SIGUSR1, raise_soft_limit)
    h.client.connection_pool.reset()  # a forked child opens its own connections
    h.ledger = type(h.ledger)(h.client)
    h.ids = SeqIds("child")  # the parent goes on counting from the same state: keep ids apart
    result = h.run_next()
    os._exit(0 if result is None else 3)  # 0: the chunk ended on the soft limit and handed over


def test_a_soft_limit_delivered_to_a_child_process_mid_write_loses_no_record(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    h = Harness(client, tmp_path)
    h.start([call("slow_write", "report"), DONE], on_resume="restart")
    child = multiprocessing.get_context("fork").Process(target=_run_chunk_in_child, args=(h,))
    child.start()
    try:
        wait_for(h.ledger, h.turn_id, having("tool_start"), timeout=20, what="the write started")
        os.kill(child.pid, signal.SIGUSR1)  # type: ignore[arg-type]
        child.join(timeout=20)
        assert child.exitcode == 0, f"child exited {child.exitcode}"
    finally:
        if child.is_alive():
            child.kill()
    dones = [e for e in h.events("tool_done") if isinstance(e, ToolDone)]
    assert [d.tool for d in dones] == ["slow_write"] and not dones[0].is_error
    assert h.events()[-1].type == "run_ended"
    h.pending = h.ledger.meta(h.turn_id).next_run
    assert h.run_to_end().status == "completed"
    assert len(effects(client, "slow_write")) == 1
    assert [e.reason for e in h.events("tool_blocked")] == ["completed"]  # type: ignore[attr-defined]
