"""What rows 4 and 5 share (and S1-S3 borrow): their plan, the dres worker they run on (its
settings, its environment, started and stopped), and waiting for turns to end.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ledger import keys
from rigs import ROOT, WorkerProcess
from worker.base.settings import Settings, load_settings
from worker.edges.runtime import Runtime

#: seconds: the foreground chunk limits of the worker (row 4 cuts at the soft one)
SOFT_LIMIT_S = 0.3
HARD_LIMIT_S = 5.0
#: seconds: the background chunk limits (row 5's turns never reach them)
BG_SOFT_LIMIT_S = 60.0
BG_HARD_LIMIT_S = 90.0
#: a handoff may wait this long unclaimed before the reaper re-dispatches it; row 5's queued
#: turns wait for a free process and must not be re-dispatched as lost
HANDOFF_GRACE_S = 120.0
WORKER_CONCURRENCY = 2
WORKER_READY_S = 60.0
#: Celery's per-task INFO lines (two structlog-rendered lines per task, on both sides) would
#: weigh on a no-op baseline; the benchmark measures dres, not log rendering
WORKER_ARGS = ("--loglevel=WARNING",)
#: turn statuses after turn_ended
ENDED = frozenset({"completed", "stopped"})


@dataclass(frozen=True)
class CeleryPlan:
    resume_rounds: int
    #: chunk boundaries of each round's dres turn
    boundaries: int
    #: hops of each round's plain chain
    hops: int
    #: hops of each round's chain of plain tasks cut by their soft limit (information row)
    soft_hops: int
    throughput_rounds: int
    turns: int
    calls_per_turn: int
    #: plain tasks of the information-only larger batch (0: none)
    plain_info: int
    #: rounds of row 4's dres turn on a ``dres worker -P gevent`` after the prefork rounds
    #: (row 4g; 0: none)
    gevent_rounds: int = 0


# -- the worker ---------------------------------------------------------------------------------


def worker_env(redis_url: str) -> dict[str, str]:
    values: dict[str, object] = {
        "REDIS_URL": redis_url,
        "CELERY_INCLUDE": "bench.hop_tasks",
        "TOOLS": "worker.demo_tools,bench.bench_tools",
        "SOFT_LIMIT_S": SOFT_LIMIT_S,
        "HARD_LIMIT_S": HARD_LIMIT_S,
        "BG_SOFT_LIMIT_S": BG_SOFT_LIMIT_S,
        "BG_HARD_LIMIT_S": BG_HARD_LIMIT_S,
        "MAX_CHUNKS": 1000,
        "MAX_MODEL_CALLS": 1000,
        "HANDOFF_GRACE_S": HANDOFF_GRACE_S,
    }
    return {f"DRES_{name}": str(value) for name, value in values.items()}


def bench_settings(redis_url: str, **extra: object) -> Settings:
    """The settings the worker reads from ``worker_env``, for this (the producer's) process;
    ``extra``: more of them (the worker's own ``DRES_*`` must say the same)."""
    return load_settings(
        redis_url=redis_url,
        celery_include="bench.hop_tasks",
        tools="worker.demo_tools,bench.bench_tools",
        soft_limit_s=SOFT_LIMIT_S,
        hard_limit_s=HARD_LIMIT_S,
        bg_soft_limit_s=BG_SOFT_LIMIT_S,
        bg_hard_limit_s=BG_HARD_LIMIT_S,
        max_chunks=1000,
        max_model_calls=1000,
        handoff_grace_s=HANDOFF_GRACE_S,
        **extra,
    )


def process_env(redis_url: str, **extra: str) -> dict[str, str]:
    """This process's environment, ``worker_env``'s settings and ``extra``, the project on
    PYTHONPATH: what a worker (or an API) started by the bench runs with."""
    env = {**os.environ, **worker_env(redis_url), **extra}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    return env


@contextmanager
def running_worker(
    redis_url: str, pool: tuple[str, ...] = ()
) -> Iterator[tuple[Runtime, WorkerProcess, Path]]:
    """A dres worker (``pool``: more options, ``GEVENT``), ready once a plain task has made the
    round trip; stopped whatever happens."""
    with tempfile.TemporaryDirectory(prefix="dres-bench-") as tmp:
        rt = Runtime.from_settings(bench_settings(redis_url))
        key = f"bench:probe:{uuid.uuid4().hex}"
        env = process_env(redis_url)
        worker: WorkerProcess | None = None
        try:
            rt.app.send_task("bench.noop", args=[key, 1], queue=rt.settings.foreground_queue)
            worker = WorkerProcess.start(
                env,
                Path(tmp) / "worker.log",
                concurrency=WORKER_CONCURRENCY,
                extra=(*WORKER_ARGS, *pool),
                ready=False,
            )
            worker.wait(lambda: bool(rt.redis.exists(f"{key}:done")), WORKER_READY_S)
            yield rt, worker, Path(tmp)
        except BaseException:
            if worker is not None:
                print(f"worker log tail:\n{worker.log()[-3000:]}", file=sys.stderr)
            raise
        finally:
            if worker is not None:
                worker.stop()
            rt.redis.close()


def turn_statuses(rt: Runtime, turn_ids: Sequence[str]) -> list[str]:
    pipe = rt.redis.pipeline(transaction=False)
    for turn_id in turn_ids:
        pipe.hget(keys.turn_meta(turn_id), "status")
    return [(s or b"").decode() for s in pipe.execute()]


def wait_turns(rt: Runtime, turn_ids: Sequence[str], timeout: float) -> None:
    pending = list(turn_ids)
    deadline = time.monotonic() + timeout
    while pending:
        statuses = turn_statuses(rt, pending)
        pending = [t for t, s in zip(pending, statuses, strict=True) if s not in ENDED]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(pending)} turn(s) did not end within {timeout:.0f} s")
        time.sleep(0.1)  # the figures come from ledger timestamps, not from this poll
