"""Integration fixtures: a real redis-server, real prefork worker subprocesses, real signals.

Every test that asks for them gets an empty Redis (``flushall``), the dres environment (0.5 s
soft limits, a fast reaper) in this process and in its workers, a ``Runtime`` built from the same
settings, and ``start_worker``, a factory of ``python -m worker.edges.cli worker`` subprocesses,
each in its own session. The finalizer stops every worker by PID (SIGTERM, wait, then SIGKILL of its
process group), so no test leaves one running.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from itertools import count
from pathlib import Path
from typing import Any

import pytest
import redis
from integration_support import close_runtime

from worker.base.settings import Settings, load_settings
from worker.dev.redis_server import RedisServer
from worker.dev.worker_process import WorkerProcess
from worker.edges.runtime import Runtime

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"

#: the dres settings of these tests (seconds): a lease of 1 s, renewed every third of it
DRES_ENV = {
    "DRES_TOOLS": "worker.dev.demo_tools,sample_tools",
    "DRES_SOFT_LIMIT_S": "0.5",
    "DRES_HARD_LIMIT_S": "3",
    "DRES_BG_SOFT_LIMIT_S": "0.5",
    "DRES_BG_HARD_LIMIT_S": "3",
    "DRES_VISIBILITY_TIMEOUT_S": "8",
    "DRES_LEASE_S": "1",
    "DRES_HANDOFF_GRACE_S": "1",
    "DRES_REAPER_INTERVAL_S": "0.2",
    "DRES_CANCEL_POLL_S": "0.05",
}

StartWorker = Callable[..., WorkerProcess]
Script = Callable[..., str]


@pytest.fixture
def dres_env(redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This test's DRES_* environment, set here too (for ``load_settings``); Redis emptied."""
    env = {**DRES_ENV, "DRES_REDIS_URL": redis_server.url}
    for name in list(os.environ):
        if name.startswith("DRES_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    return env


@pytest.fixture
def settings(dres_env: dict[str, str]) -> Settings:
    return load_settings()


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    """The test process's side of dres (ledger, control, dispatch), as an API process has it."""
    rt = Runtime.from_settings(settings)
    yield rt
    close_runtime(rt)


@pytest.fixture
def start_worker(dres_env: dict[str, str], tmp_path: Path) -> Iterator[StartWorker]:
    """``start_worker(concurrency=1, extra=(), ready=True, overrides=None)`` starts a prefork
    worker process; ``overrides`` are DRES_* settings of that worker only."""
    started: list[WorkerProcess] = []
    base = {k: v for k, v in os.environ.items() if not k.startswith("DRES_")}
    pythonpath = os.pathsep.join(p for p in (str(TESTS), base.get("PYTHONPATH", "")) if p)
    env = {**base, **dres_env, "PYTHONPATH": pythonpath}

    def start(
        concurrency: int = 1,
        extra: tuple[str, ...] = (),
        ready: bool = True,
        overrides: dict[str, str] | None = None,
    ) -> WorkerProcess:
        log_path = tmp_path / f"worker-{len(started) + 1}.log"
        process = WorkerProcess.start(
            {**env, **(overrides or {})},
            log_path,
            concurrency=concurrency,
            extra=extra,
            ready=False,
        )
        started.append(process)
        if ready:
            process.wait_ready()
        return process

    yield start
    for process in started:
        process.terminate()  # all at once: each warm shutdown takes seconds
    for process in started:
        process.stop()
    for process in started:
        # pytest shows this only for a failed test
        print(f"--- {process.log_path.name} (pid {process.pid}) ---\n{process.log()[-8000:]}")


@pytest.fixture
def worker(start_worker: StartWorker) -> WorkerProcess:
    """One ready worker with a single pool process."""
    return start_worker()


@pytest.fixture
def script(tmp_path: Path) -> Script:
    """``script(steps, on_resume="continue")`` writes a scripted-model file; its model spec."""
    numbers = count(1)

    def write(steps: list[dict[str, Any]], on_resume: str = "continue") -> str:
        path = tmp_path / f"script-{next(numbers)}.json"
        path.write_text(json.dumps({"steps": steps, "on_resume": on_resume}))
        return f"scripted:{path}"

    return write
