"""What rows S1-S3 share: the environment and the workers they run, and a turn's Redis bytes."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from bench.celery_bench import WORKER_ARGS, worker_env
from ledger import keys
from tests.support import ROOT, WorkerProcess
from worker.edges.runtime import Runtime

MILLION = 1_000_000


def process_env(redis_url: str, **extra: str) -> dict[str, str]:
    env = {**os.environ, **worker_env(redis_url), **extra}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    return env


@contextlib.contextmanager
def workers(rt: Runtime, count: int, env: dict[str, str], tmp: Path) -> Iterator[None]:
    """``count`` workers of one pool process each, ready when each answers a ping."""
    names = [f"scale{i}-{os.getpid()}@bench" for i in range(count)]
    started: list[WorkerProcess] = []
    try:
        for name in names:
            log = tmp / f"{name}-{time.monotonic_ns()}.log"
            extra = (*WORKER_ARGS, "-n", name)
            started.append(WorkerProcess.start(env, log, concurrency=1, extra=extra, ready=False))
        deadline = time.monotonic() + 90
        while True:
            replies = rt.app.control.ping(timeout=0.5) or []
            if set(names) <= {name for reply in replies for name in reply}:
                break
            if time.monotonic() > deadline:
                logs = "\n".join(w.log()[-2000:] for w in started)
                raise TimeoutError(f"workers {names} did not answer a ping:\n{logs}")
        yield
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
