"""What rows S1-S3 share: their plan, the workers they run, and a turn's Redis bytes."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.celery_worker import WORKER_ARGS
from ledger import keys
from rigs import WorkerProcess
from worker.edges.runtime import Runtime

MILLION = 1_000_000


@dataclass(frozen=True)
class ScalePlan:
    #: short turns per throughput round, and rounds (each: one worker, then two)
    turns: int
    rounds: int
    #: tokens of the streamed answer, trials per streaming case, seconds between paced tokens
    tokens: int
    trials: int
    pace_s: float
    #: turns measured per cost case, tool calls of a tool turn
    cost_turns: int
    calls: int
    #: trials of the paced streaming case on a ``dres worker -P gevent`` (row S2g; 0: none)
    gevent_trials: int = 0


@contextlib.contextmanager
def workers(
    rt: Runtime,
    count: int,
    env: dict[str, str],
    tmp: Path,
    concurrency: int = 1,
    pool: tuple[str, ...] = (),
) -> Iterator[list[WorkerProcess]]:
    """``count`` workers of ``concurrency`` pool slots each (``pool``: more worker options,
    ``("-P", "gevent")``), ready when each answers a ping."""
    names = [f"scale{i}-{os.getpid()}@bench" for i in range(count)]
    started: list[WorkerProcess] = []
    try:
        for name in names:
            log = tmp / f"{name}-{time.monotonic_ns()}.log"
            extra = (*WORKER_ARGS, *pool, "-n", name)
            started.append(
                WorkerProcess.start(env, log, concurrency=concurrency, extra=extra, ready=False)
            )
        deadline = time.monotonic() + 90
        while True:
            replies = rt.app.control.ping(timeout=0.5) or []
            if set(names) <= {name for reply in replies for name in reply}:
                break
            if time.monotonic() > deadline:
                logs = "\n".join(w.log()[-2000:] for w in started)
                raise TimeoutError(f"workers {names} did not answer a ping:\n{logs}")
        yield started
    finally:
        for worker in started:
            worker.stop()


def turn_bytes(rt: Runtime, turn_id: str) -> int:
    """``MEMORY USAGE`` (every element sampled) of the keys of one turn."""
    names = (keys.turn_events(turn_id), keys.turn_meta(turn_id), keys.turn_cancel(turn_id))
    return sum(int(rt.redis.memory_usage(name, samples=0) or 0) for name in names)


def events_json_bytes(rt: Runtime, turn_id: str) -> int:
    """The raw size of the turn's events: their JSON payloads as stored."""
    entries = rt.redis.xrange(keys.turn_events(turn_id))
    return sum(len(fields[b"e"]) for _, fields in entries)
