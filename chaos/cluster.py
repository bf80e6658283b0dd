"""The chaos runner's machines: a redis-server it can kill, restart and pause, a restartable
worker (prefork, or ``-P gevent`` with ``pool="gevent"``; with ``pair``, a second one beside it),
and a look into the broker that counts its messages per run."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from rigs import ROOT, UNACKED, WorkerProcess
from worker.base.settings import load_settings
from worker.dev.redis_server import RedisServer
from worker.edges.runtime import Runtime

#: every interval shrunk so that a trial's faults play out in seconds
ENV = {
    "DRES_SOFT_LIMIT_S": "0.5",
    "DRES_HARD_LIMIT_S": "2",
    "DRES_BG_SOFT_LIMIT_S": "0.5",
    "DRES_BG_HARD_LIMIT_S": "2",
    "DRES_VISIBILITY_TIMEOUT_S": "5",
    "DRES_LEASE_S": "1.5",
    "DRES_HANDOFF_GRACE_S": "1",
    "DRES_REAPER_INTERVAL_S": "0.2",
    "DRES_MAX_REDISPATCHES": "3",
    "DRES_CANCEL_POLL_S": "0.05",
    "DRES_FAILPOINTS": "1",
    "DRES_TOOLS": "worker.demo_tools,chaos.tools",
    "DRES_JOURNAL_READ_BACKOFF_S": "0.2",
}
#: kombu's Redis transport keeps a message of priority p > 0 in ``queue + SEP + step``
PRIORITY_SEP = "\x06\x16"
PRIORITY_STEPS = (3, 6, 9)


@dataclass(frozen=True)
class Profile:
    """How the worker runs: its pool size and the settings it gets beyond ``ENV``."""

    concurrency: int = 2
    env: tuple[tuple[str, str], ...] = ()
    #: Celery's pool: ``prefork``, or ``gevent`` (many turns' chunks as greenlets of one process)
    pool: str = "prefork"


DEFAULT = Profile()
#: one pool process, so a turn's next chunk waits in the queue behind the others' chunks far
#: longer than the handoff grace; one re-dispatch allowed, so taking a queued message for a lost
#: one would soon stop a turn ``handoff_lost``
BACKLOG = Profile(concurrency=1, env=(("DRES_MAX_REDISPATCHES", "1"),))
#: hard limits past the longest store fault (10 s paused, 4 s down, then Celery's reconnect): a
#: chunk that waits out the outage inside a tool's record is not killed by its hard limit, so
#: what is tried is the ride-out, not one more SIGKILL of the pool child (and the visibility
#: timeout past them, as the worker requires)
STORE = Profile(
    env=(
        ("DRES_HARD_LIMIT_S", "20"),
        ("DRES_BG_HARD_LIMIT_S", "20"),
        ("DRES_VISIBILITY_TIMEOUT_S", "25"),
    )
)

#: the pools a chaos run's workers may run
GEVENT = "gevent"
POOLS = ("prefork", GEVENT)
#: turns a gevent trial runs beside the one its fault aims at: many turns in flight in the one
#: process a fault strikes (docs/deploy.md)
FLIGHT = 50
#: a gevent worker's greenlets: room for every turn of a trial at once
GEVENT_CONCURRENCY = 64
#: a gevent backlog worker's: far fewer than the trial's turns, so that their next chunks wait
#: in the queue well past the handoff grace, as prefork's one process makes them wait
GEVENT_BACKLOG_CONCURRENCY = 8


def under(pool: str, profile: Profile) -> Profile:
    """``profile`` as ``pool`` runs it: a gevent worker holds a trial's every turn at once, or,
    in place of prefork's one process (the backlog's), a few greenlets for its many turns."""
    if pool != GEVENT:
        return profile
    small = profile.concurrency == 1
    concurrency = GEVENT_BACKLOG_CONCURRENCY if small else GEVENT_CONCURRENCY
    return Profile(concurrency, profile.env, GEVENT)


def with_tenants(profile: Profile, limit: int) -> Profile:
    """``profile`` for a tenant trial of bound ``limit``: a pool with room for a tenant at its
    bound and another's turn beside it, so that the bound, not the pool, is what holds a tenant
    back (the backlog's one process stays one)."""
    if not limit or profile.concurrency == 1:
        return profile
    return Profile(max(profile.concurrency, limit + 1), profile.env, profile.pool)


@dataclass
class Cluster:
    """A restartable redis-server and prefork worker."""

    tmp: Path
    #: the worker resumes naively (``DRES_NAIVE=1``): no note, no hard-block, no guard
    naive: bool = False
    #: the workers' pool (``POOLS``): every profile is run under it
    pool: str = "prefork"
    #: a tenant's bound (``DRES_TENANT_CONCURRENCY``) for the workers and the runner; 0: none
    tenants: int = 0
    #: a second worker of the same profile beside the first (``second``): the timer trials',
    #: whose two reapers race to wake each turn
    pair: bool = False
    server: RedisServer = field(init=False)
    worker: WorkerProcess | None = None
    second: WorkerProcess | None = None
    profile: Profile = DEFAULT
    #: workers started again because they died (a fault), and because a trial needed another
    #: profile
    restarts: int = 0
    switches: int = 0

    def __post_init__(self) -> None:
        self.env = {
            **os.environ,
            **ENV,
            "DRES_NAIVE": "1" if self.naive else "0",
            **({"DRES_TENANT_CONCURRENCY": str(self.tenants)} if self.tenants else {}),
            **self.start_store(),
            "PYTHONPATH": str(ROOT),
        }
        os.environ.update({k: v for k, v in self.env.items() if k.startswith("DRES_")})
        self.runtime = Runtime.from_settings(load_settings())
        self.broker = self.broker_client()

    def start_store(self) -> dict[str, str]:
        """Start the store (the ledger and the broker); the DRES_* settings that name it."""
        self.server = RedisServer(data_dir=self.tmp / "redis").start()
        return {"DRES_REDIS_URL": self.server.url}

    def broker_client(self) -> redis.Redis:
        """The Celery broker's Redis (the ledger's unless ``DRES_BROKER_URL`` says otherwise)."""
        return redis.Redis.from_url(self.runtime.settings.broker, socket_timeout=5)

    def stop_store(self) -> None:
        self.server.cleanup()

    def ensure_worker(self, profile: Profile | None = None) -> None:
        """A live worker of ``profile`` (default: the one running), and with ``pair`` a second:
        a dead one is started again, one of another profile is stopped first."""
        wanted = with_tenants(under(self.pool, profile or self.profile), self.tenants)
        if self.worker is None or not self.worker.alive() or wanted != self.profile:
            if self.second is not None and wanted != self.profile:
                self.second.stop()  # of the old profile too (its switch counted once)
                self.second = None
            self.worker = self.started(self.worker, wanted, "worker")
        if self.pair and (self.second is None or not self.second.alive()):
            # a node name of its own: two workers of one host
            self.second = self.started(self.second, wanted, "worker-second", ("-n", "second@%h"))

    def started(
        self, old: WorkerProcess | None, wanted: Profile, name: str, extra: tuple[str, ...] = ()
    ) -> WorkerProcess:
        """A worker of ``wanted`` in place of ``old`` (stopped first, counted a switch when it
        lived, a restart when it died), its log ``name-R-S.log``."""
        if old is not None:
            if old.alive():
                self.switches += 1
            else:
                self.restarts += 1
            old.stop()
        self.profile = wanted
        log = self.tmp / f"{name}-{self.restarts}-{self.switches}.log"
        env = {**self.env, **dict(wanted.env)}
        extra = (*extra, "-P", GEVENT) if wanted.pool == GEVENT else extra
        worker = WorkerProcess.start(
            env, log, concurrency=wanted.concurrency, extra=extra, ready=False
        )
        worker.wait_ready(timeout=30)
        return worker

    def worker_alive(self) -> bool:
        """The worker lives (with ``pair``, both)."""
        second = not self.pair or (self.second is not None and self.second.alive())
        return second and self.worker is not None and self.worker.alive()

    def restart_redis(self, down_s: float) -> None:
        """SIGKILL redis-server (the ledger's and the broker's), keep it down ``down_s`` seconds,
        start it again on the same port and directory: it reloads its AOF."""
        self.server.kill()
        time.sleep(down_s)  # the outage itself
        self.server.start()

    def pause_redis(self, for_s: float) -> None:
        """SIGSTOP redis-server for ``for_s`` seconds, then SIGCONT (a partition stand-in: the
        connections stay open, every command waits)."""
        self.server.pause()
        try:
            time.sleep(for_s)  # the outage itself
        finally:
            self.server.resume()

    def fail_over(self, how: str) -> None:
        """Fail the master over (``how``: ``command`` or ``kill``): only a Sentinel rig can."""
        raise NotImplementedError(f"a failover ({how}) needs chaos.failover.SentinelCluster")

    def recover(self) -> None:
        """Make the store whole for the next trial: nothing to do here, a store fault ends with
        redis-server back."""

    def terminate_worker(self) -> None:
        """SIGTERM the worker (a deploy): a warm shutdown; ``ensure_worker`` starts the next."""
        if self.worker is not None:
            self.worker.terminate()

    def census(self) -> BrokerCensus:
        settings = self.runtime.settings
        return BrokerCensus(self.broker, (settings.foreground_queue, settings.background_queue))

    def close(self) -> None:
        for worker in (self.worker, self.second):
            if worker is not None:
                worker.stop()
        self.stop_store()


@dataclass
class BrokerCensus:
    """Counts the broker's messages per task id (one per run: ``turn_id:run_id``) each time it
    looks, and keeps the most it ever saw of each. An observer of its own, not the worker's
    reading of the broker, so that a wrong reading there cannot hide here."""

    client: redis.Redis
    queues: tuple[str, ...]
    most: dict[str, int] = field(default_factory=dict)

    def look(self) -> None:
        # One MULTI: a message restored from ``unacked`` to its queue moves in one transaction,
        # so reading both at once never sees it twice. (A delivery moves it in two steps, the
        # queue's pop first: in between it is in neither, which can only undercount.)
        with self.client.pipeline(transaction=True) as pipe:
            for queue in self.queues:
                pipe.lrange(queue, 0, -1)
                for step in PRIORITY_STEPS:
                    pipe.lrange(f"{queue}{PRIORITY_SEP}{step}", 0, -1)
            pipe.hvals(UNACKED)
            replies = pipe.execute()
        counts: dict[str, int] = {}
        for task in task_ids(raw for reply in replies for raw in reply):
            counts[task] = counts.get(task, 0) + 1
        for task, n in counts.items():
            self.most[task] = max(n, self.most.get(task, 0))


def task_ids(messages: Iterable[Any]) -> list[str]:
    """The task ids of kombu Redis-transport messages (a queue's JSON messages, or the unacked
    hash's ``[message, exchange, routing key]`` values); anything else is passed over."""
    found = []
    for raw in messages:
        try:
            message = json.loads(raw)
            if isinstance(message, list):
                message = message[0]
            found.append(str(message["headers"]["id"]))
        except (ValueError, KeyError, IndexError, TypeError):
            continue
    return found
