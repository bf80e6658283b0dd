"""dres workers with every setting at its default, as rows 7, 7g and D5-D6 run them: their
environment and settings, the settings that decide a pickup, and a set of workers of one pool
process each (or of one gevent process each) whose killed members are replaced.
"""

from __future__ import annotations

import os
import signal
import time
from functools import partial
from pathlib import Path
from typing import Any

from rigs import ROOT, WorkerProcess, poll, subprocess_env
from worker.base.settings import Settings, load_settings

#: seconds a worker may take to log "ready." (two start at once on two shared cores)
WORKER_READY_S = 60.0
#: seconds a worker may take to replace a killed pool process
RESPAWN_S = 30.0
#: seconds between ledger reads while waiting; the figures come from ledger timestamps
POLL_S = 0.05
WORKERS = 2
TOOLS = "bench.bench_tools"
#: the settings that decide a pickup, reported with the rows (absent ones as None)
REPORTED_SETTINGS = (
    "bg_soft_limit_s",
    "bg_hard_limit_s",
    "lease_s",
    "heartbeat_s",
    "reaper_interval_s",
    "visibility_timeout",
    "handoff_grace_s",
)


def worker_env(redis_url: str) -> dict[str, str]:
    """This process's environment without any ``DRES_*`` (every limit, the lease and the reaper
    at their defaults), plus the Redis URL, the bench tools and the project on PYTHONPATH."""
    return subprocess_env({"DRES_REDIS_URL": redis_url, "DRES_TOOLS": TOOLS}, ROOT)


def default_settings(redis_url: str, **fields: object) -> Settings:
    """The settings the workers read from ``worker_env``, for this (the producer's) process;
    ``fields`` are more of them (the failover rows' Sentinels)."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("DRES_")}
    for name in saved:
        del os.environ[name]
    try:
        return load_settings(redis_url=redis_url, tools=TOOLS, **fields)
    finally:
        os.environ.update(saved)


def reported_settings(settings: Settings) -> dict[str, Any]:
    values = {name: getattr(settings, name, None) for name in REPORTED_SETTINGS}
    return {k: v if isinstance(v, int | float | str) else None for k, v in values.items()}


def _one_pool(worker: WorkerProcess) -> bool | None:
    return True if len(worker.children()) == 1 else None


class Workers:
    """``count`` dres workers (prefork, one pool process each; ``pool``: more worker options,
    ``GEVENT``: one process each that runs its chunks itself) on one Redis; a killed one is
    replaced. A worker killed whole is never signalled again (its PID may be reused)."""

    def __init__(
        self, env: dict[str, str], tmp: Path, count: int = WORKERS, pool: tuple[str, ...] = ()
    ) -> None:
        self.env = env
        self.tmp = tmp
        self.count = count
        self.pool = pool
        self.live: list[WorkerProcess] = []
        self.killed: list[WorkerProcess] = []
        self.started = 0
        #: pool processes that have run a task (built their runtime, imported the tools)
        self.warm: set[int] = set()

    def fill(self) -> list[WorkerProcess]:
        """Start workers until ``count`` are up (a dead one is stopped and replaced); the new."""
        for worker in [w for w in self.live if not w.alive()]:
            self.live.remove(worker)
            worker.stop()
            self.killed.append(worker)
        new = []
        while len(self.live) < self.count:
            self.started += 1
            log = self.tmp / f"worker-{self.started}.log"
            worker = WorkerProcess.start(self.env, log, concurrency=1, extra=self.pool, ready=False)
            self.live.append(worker)
            new.append(worker)
        for worker in new:  # started together, waited for together
            worker.wait_ready(timeout=WORKER_READY_S)
        return new

    def settle(self) -> list[WorkerProcess]:
        """``count`` live workers with one pool process each, before a trial; the new workers."""
        new = self.fill()
        if self.pool:  # a gevent worker forks no pool process
            return new
        for worker in self.live:
            if poll(partial(_one_pool, worker), RESPAWN_S, POLL_S) is None:
                raise RuntimeError(
                    f"worker {worker.pid} has pool processes {worker.children()} "
                    f"{RESPAWN_S:.0f} s after a kill, not one:\n{worker.log()[-3000:]}"
                )
        return new

    def pools(self) -> set[int]:
        """The PIDs of the processes that run the live workers' chunks (their pool processes;
        under gevent, the workers themselves)."""
        if self.pool:
            return {worker.pid for worker in self.live}
        return {pid for worker in self.live for pid in worker.children()}

    def owner(self, pid: int, ppid: int) -> WorkerProcess:
        """The live worker whose chunk ran in process ``pid`` (of parent ``ppid``): the parent of
        a prefork pool process, the process itself under gevent."""
        for worker in self.live:
            if worker.pid in (pid, ppid):
                return worker
        live = [w.pid for w in self.live]
        raise RuntimeError(f"no live worker has PID {pid} or {ppid} (live: {live})")

    def kill_child(self, worker: WorkerProcess, pid: int) -> float:
        """SIGKILL the worker's pool process ``pid``; the time of the kill."""
        if pid not in worker.children():
            raise RuntimeError(f"{pid} is not a pool process of worker {worker.pid}")
        os.kill(pid, signal.SIGKILL)
        return time.time()

    def kill_whole(self, worker: WorkerProcess) -> float:
        """SIGKILL the worker's process group (main process and pool); the time of the kill."""
        worker.kill_group()
        killed_at = time.time()
        self.live.remove(worker)
        self.killed.append(worker)
        return killed_at

    def stop(self) -> None:
        for worker in self.live:
            worker.terminate()  # all at once: each warm shutdown takes seconds
        for worker in self.live:
            worker.stop()

    def tails(self, chars: int = 3000) -> str:
        return "\n".join(
            f"--- {w.log_path.name} (pid {w.pid}) ---\n{w.log()[-chars:]}"
            for w in [*self.killed, *self.live]
        )
