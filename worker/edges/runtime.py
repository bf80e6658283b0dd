"""What a worker process needs, built once from the settings: Redis, ledger, tools, Celery.

Built lazily per process: a prefork child builds its own on its first task (redis-py also
reopens connections after a fork by itself).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, cast

import kombu.exceptions
import redis
import redis.asyncio as aioredis
import structlog
from celery import Celery
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from ledger import keys
from ledger.cache import EventCache
from ledger.durability import Confirmer
from ledger.store import Client, Ledger
from ledger.turns import Outgoing
from worker.base import metrics
from worker.base.clock import Clock, Ids, RandomIds, SystemClock
from worker.base.errors import TurnCancelled
from worker.base.failpoints import OFF, Failpoints
from worker.base.settings import Settings
from worker.edges import broker, marks, sentinel
from worker.edges.celery_app import chunk_task, create_app
from worker.edges.marks import MarkingChannel
from worker.engine.loop import AgentLoop
from worker.engine.models import Models
from worker.engine.recorder import RunContext
from worker.engine.tools import Registry
from worker.lifecycle import Lifecycle
from worker.lifecycle.dispatch import run_ids, task_id
from worker.lifecycle.heartbeat import Heartbeat
from worker.lifecycle.reaper import Reaper

log = structlog.get_logger("dres.dispatch")

#: seconds: Redis socket timeouts of the worker's ledger client
SOCKET_TIMEOUT_S = 30
#: seconds: Redis connect timeout of a ledger client (a worker's)
CONNECT_TIMEOUT_S = 5
#: seconds a Redis command of the API (the ledger's or the broker's) may take, connecting
#: included, before the store counts as unreachable: the API answers 503 at once instead of
#: riding an outage out as a worker does (CONTRACT §7.13), also when Redis hangs (SIGSTOP)
API_STORE_TIMEOUT_S = 0.5
#: seconds the API's ledger operations (and a person's CLI command) ride out an unreachable
#: Redis before they give up: they answer 503 (exit 2) instead of waiting DRES_STORE_OUTAGE_S
API_STORE_OUTAGE_S = 1.0
#: retries of a cluster client's command while a master restarts or fails over (CLUSTERDOWN,
#: a refused connection), backing off up to a second: about ten seconds in all
CLUSTER_RETRIES = 12


def _cluster_retry() -> Retry:
    return Retry(ExponentialBackoff(cap=1.0, base=0.05), CLUSTER_RETRIES)


def _reconnect_once() -> Retry:
    """The API's retry of a command: once, at once, on a broken connection only (one a Redis
    restart left in the pool), never on a timeout: a hung Redis costs one timeout, not
    redis-py's default ten attempts."""
    return Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,))


def _reconnect_once_async() -> AsyncRetry:
    return AsyncRetry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,))


def ledger_client(
    settings: Settings,
    socket_timeout: float = SOCKET_TIMEOUT_S,
    *,
    fail_fast: bool = False,
) -> Client:
    """The ledger's Redis (``DRES_REDIS_URL``): a ``RedisCluster`` with ``DRES_REDIS_CLUSTER=1``
    (the URL names any node), the master its Sentinels name with ``DRES_REDIS_SENTINELS``
    (``worker.edges.sentinel``: it follows failovers), else one server. The broker is never
    this client (Celery's own).

    ``fail_fast`` (the API's): connecting takes at most ``socket_timeout`` too, and a command is
    tried again only on a broken connection. A cluster client keeps its retries through a
    failover either way.
    """
    connect_timeout = min(socket_timeout, CONNECT_TIMEOUT_S) if fail_fast else CONNECT_TIMEOUT_S
    if settings.redis_cluster:
        return RedisCluster.from_url(
            settings.redis_url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=connect_timeout,
            retry=_cluster_retry(),
        )
    extra: dict[str, Any] = {"retry": _reconnect_once()} if fail_fast else {}
    options: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": connect_timeout,
        "health_check_interval": 30,
        **extra,
    }
    if settings.sentinels:
        return sentinel.master_client(settings, **options)
    return redis.Redis.from_url(settings.redis_url, **options)


def ledger_reader(
    settings: Settings, socket_timeout: float, connect_timeout: float = API_STORE_TIMEOUT_S
) -> aioredis.Redis:
    """The API's async reader of the ledger's Redis; with ``DRES_REDIS_CLUSTER=1`` a
    ``redis.asyncio.cluster.RedisCluster``, which answers every command the API sends (each names
    one key, or one turn's keys) as one server would, hence the one type here. A command is
    tried again only on a broken connection (one server), as the API's ``ledger_client``."""
    if settings.redis_cluster:
        cluster: Any = aioredis.RedisCluster.from_url(
            settings.redis_url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=connect_timeout,
            retry=_cluster_retry(),
        )
        return cast(aioredis.Redis, cluster)
    options: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": connect_timeout,
        "retry": _reconnect_once_async(),
    }
    if settings.sentinels:
        return sentinel.master_reader(settings, **options)
    return aioredis.Redis.from_url(settings.redis_url, **options)


class CancellableClock:
    """A clock whose sleeps end early, raising ``TurnCancelled``, once Stop is requested."""

    def __init__(self, inner: Clock, cancelled: Callable[[], bool], poll_s: float) -> None:
        self.inner = inner
        self.cancelled = cancelled
        self.poll_s = poll_s

    def now(self) -> float:
        return self.inner.now()

    def sleep(self, seconds: float) -> None:
        end = self.inner.now() + seconds
        while (left := end - self.inner.now()) > 0:
            if self.cancelled():
                raise TurnCancelled("Stop requested")
            self.inner.sleep(min(left, self.poll_s))


class CeleryDispatcher:
    """Sends chunk messages by task name; the worker that runs a chunk sets its time limits."""

    def __init__(self, app: Celery, settings: Settings) -> None:
        self.app = app
        self.settings = settings
        #: the app's Queue objects: publishing to a declared one skips re-declaring it
        self.queues = {queue.name: queue for queue in app.conf.task_queues}
        #: the broker is the ledger's own server (DRES_BROKER_URL unset or the same URL, no
        #: cluster), through dres's transport, which keeps a message on request (``prepare``)
        self.shares_store = (
            settings.broker_url in ("", settings.redis_url)
            and not settings.redis_cluster
            and app.conf.broker_transport in (broker.TRANSPORT, broker.SENTINEL_TRANSPORT)
        )

    def dispatch(self, turn_id: str, run_id: str, mode: str) -> None:
        self.app.send_task(
            chunk_task(mode),
            args=[turn_id, run_id],
            task_id=task_id(turn_id, run_id),
            queue=self.queues[self.settings.queue(mode)],
        )

    def prepare(self, turn_id: str, run_id: str, mode: str) -> Outgoing | None:
        """``Dispatcher.prepare``: Celery makes the message as it would send it (headers, queue,
        priority list), and dres's transport keeps it instead of writing it."""
        if not self.shares_store:
            return None
        with marks.held() as kept:
            try:
                self.dispatch(turn_id, run_id, mode)
            except kombu.exceptions.OperationalError as e:
                # the broker out of reach before anything was kept: the step goes alone, and
                # ``dispatch`` after it meets the outage as it always did
                log.warning("could not make the message to send with the step", error=str(e))
                return None
        if len(kept) == 1 and kept[0] is not None:
            return kept[0]
        if not kept:  # sent after all, by a transport that keeps nothing: sent again after the
            # step (a second message of one run is claimed once)
            log.warning("a transport sent a message it was asked to keep", run_id=run_id)
        return None

    def revoke(self, turn_id: str, run_id: str) -> None:
        """Best effort (``Dispatcher``): the claim of a revoked run is refused anyway, so a broker
        out of reach costs a worker one look at a stale message, not a Stop its answer."""
        try:
            self.app.control.revoke(task_id(turn_id, run_id))
        except kombu.exceptions.OperationalError as e:
            log.warning("could not revoke a stopped run's message", run_id=run_id, error=str(e))

    def marked(self, turn_id: str, run_id: str) -> bool:
        """Is the run's message in the broker, by its mark (``worker.edges.marks``)? One
        ``EXISTS`` on a pooled broker connection; False also when the transport keeps no marks."""
        with self.app.pool.acquire(block=True) as connection:
            channel: Any = connection.default_channel
            if not isinstance(channel, MarkingChannel) or not channel.marks_messages():
                return False
            return bool(channel.client.exists(keys.chunk_message(turn_id, run_id)))

    def queued_runs(self) -> set[str] | None:
        """Run ids in the chunk queues or held unacknowledged (kombu's Redis transport): every
        message read, O(backlog) bytes. The reaper asks for a due run without a mark, or with
        one old enough to doubt while the queues are short (``Reaper``)."""
        replies = self._read_queues(lambda pipe, key: pipe.lrange(key, 0, -1), unacked=True)
        return None if replies is None else run_ids(m for reply in replies for m in reply)

    def backlog(self) -> int | None:
        """Messages waiting in the chunk queues (every priority list): one ``LLEN`` each."""
        replies = self._read_queues(lambda pipe, key: pipe.llen(key), unacked=False)
        return None if replies is None else sum(int(n) for n in replies)

    def _read_queues(self, read: Any, *, unacked: bool) -> list[Any] | None:
        """``read(pipe, key)`` for each chunk queue's priority list (and the unacknowledged
        messages' values when ``unacked``), in one round trip; None: not kombu's Redis transport,
        whose queues cannot be looked into here."""
        with self.app.connection_for_read() as connection:
            channel: Any = connection.default_channel
            client = getattr(channel, "client", None)
            if client is None or not hasattr(channel, "unacked_key"):
                return None
            names = [self.settings.foreground_queue, self.settings.background_queue]
            lists = [
                channel._q_for_pri(name, pri) for name in names for pri in channel.priority_steps
            ]
            pipe = client.pipeline(transaction=False)
            for key in lists:
                read(pipe, key)
            if unacked:
                pipe.hvals(channel.unacked_key)
            return list(pipe.execute())


@dataclass
class Runtime:
    settings: Settings
    clock: Clock
    ids: Ids
    #: the Celery app to dispatch with (a worker's own); None: one built from the settings
    celery: Celery | None = None
    #: seconds the ledger rides out an unreachable Redis; None: ``DRES_STORE_OUTAGE_S`` (a
    #: worker's runs). The API passes a short one: it answers 503 instead of waiting.
    store_outage_s: float | None = None
    #: seconds a Redis command (ledger or broker) may take before the store counts as
    #: unreachable, failing fast (the API's); None: a worker's patience
    store_timeout_s: float | None = None

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        celery: Celery | None = None,
        *,
        store_outage_s: float | None = None,
    ) -> Runtime:
        return cls(settings, SystemClock(), RandomIds(), celery, store_outage_s)

    @classmethod
    def for_api(cls, settings: Settings) -> Runtime:
        """The API's: its Redis commands and chunk messages fail within about a second while
        the store is unreachable, and the API answers 503 (CONTRACT §7.13)."""
        return cls(
            settings,
            SystemClock(),
            RandomIds(),
            store_outage_s=API_STORE_OUTAGE_S,
            store_timeout_s=API_STORE_TIMEOUT_S,
        )

    @cached_property
    def redis(self) -> Client:
        if self.store_timeout_s is None:
            return ledger_client(self.settings)
        return ledger_client(self.settings, self.store_timeout_s, fail_fast=True)

    @cached_property
    def ledger(self) -> Ledger:
        outage_s = self.store_outage_s
        return Ledger(
            self.redis,
            finished_ttl_s=self.settings.finished_ttl_s,
            outage_s=self.settings.store_outage_s if outage_s is None else outage_s,
            listener=metrics.StoreMetrics(),
        )

    @cached_property
    def confirmer(self) -> Confirmer | None:
        """Confirms a write's records as ``DRES_DURABILITY`` asks; None at ``ack``."""
        durability = self.settings.write_durability
        return Confirmer(self.ledger, durability) if durability.waits else None

    @cached_property
    def events(self) -> EventCache:
        """The turns this process read lately: a turn's next chunk here reads only what is new."""
        return EventCache(self.ledger)

    @cached_property
    def registry(self) -> Registry:
        return Registry.from_settings(self.settings)

    @cached_property
    def app(self) -> Celery:
        return self.celery or create_app(self.settings, publish_timeout_s=self.store_timeout_s)

    @cached_property
    def lifecycle(self) -> Lifecycle:
        dispatcher = CeleryDispatcher(self.app, self.settings)
        return Lifecycle(
            self.ledger,
            self.settings,
            self.clock,
            self.ids,
            dispatcher,
            cache=self.events,
            heartbeat=self.heartbeat,
            failpoints=self.failpoints,
        )

    def heartbeat(self, run: RunContext, on_stop: Callable[[], None]) -> Heartbeat:
        return Heartbeat(
            self.lifecycle.store,
            run,
            self.clock,
            lease_s=self.settings.lease_s,
            interval_s=self.settings.heartbeat_s,
            poll_s=self.settings.cancel_poll_s,
            on_stop=on_stop,
        )

    @cached_property
    def failpoints(self) -> Failpoints:
        return Failpoints(self.redis) if self.settings.failpoints else OFF

    @cached_property
    def models(self) -> Models:
        return Models()

    def reaper(self) -> Reaper:
        return Reaper(self.lifecycle)

    def loop(self, turn_id: str, interrupts: tuple[type[BaseException], ...]) -> AgentLoop:
        cancelled = self.lifecycle.is_cancelled
        clock = CancellableClock(
            self.clock, lambda: cancelled(turn_id), self.settings.cancel_poll_s
        )
        return AgentLoop(
            ledger=self.ledger,
            registry=self.registry,
            make_model=lambda spec: self.models.get(spec or self.settings.model, clock),
            settings=self.settings,
            clock=clock,
            ids=self.ids,
            interrupts=interrupts,
            is_cancelled=cancelled,
            tool_redis=self.redis,
            failpoints=self.failpoints,
            cache=self.events,
            durable=self.confirmer,
        )
