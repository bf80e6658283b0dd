"""The Redis clients of dres's processes, built from the settings: the ledger's (a worker's,
patient; the API's, failing fast) and the API's async reader. One server, a Redis Cluster
(``DRES_REDIS_CLUSTER=1``) or the master its Sentinels name (``DRES_REDIS_SENTINELS``); the
broker is never one of these (Celery's own)."""

from __future__ import annotations

from typing import Any, cast

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from ledger.store import Client
from worker.base.settings import Settings
from worker.edges.redis import sentinel

#: seconds: Redis socket timeouts of the worker's ledger client
SOCKET_TIMEOUT_S = 30
#: seconds: Redis connect timeout of a ledger client (a worker's)
CONNECT_TIMEOUT_S = 5
#: seconds a Redis command of the API (the ledger's or the broker's) may take, connecting
#: included, before the store counts as unreachable: the API answers 503 at once instead of
#: riding an outage out as a worker does (docs/faults.md), also when Redis hangs (SIGSTOP)
API_STORE_TIMEOUT_S = 0.5
#: seconds the API's ledger operations (and a person's CLI command) ride out an unreachable
#: Redis before they give up: they answer 503 (exit 2) instead of waiting DRES_STORE_OUTAGE_S
API_STORE_OUTAGE_S = 1.0
#: retries of a cluster client's command while a master restarts or fails over (CLUSTERDOWN,
#: a refused connection), backing off up to a second: about ten seconds in all
CLUSTER_RETRIES = 12


#: connections redis-py's pool opens at most unless told (redis-py 8: ``ConnectionPool``'s 100)
REDIS_PY_POOL = 100
#: connections of a worker's ledger pool beyond two per chunk: the heartbeat's, the reaper's,
#: an approval's notice
POOL_MARGIN = 20
#: chunks this process runs at once (``expect_chunks``)
_chunks = 1


def expect_chunks(chunks: int) -> None:
    """This process runs up to ``chunks`` chunks at once (a gevent worker's ``-c N``): its ledger
    client's pool is sized for them. Called once, at the worker's start."""
    global _chunks
    _chunks = max(1, chunks)


def chunks_expected() -> int:
    """Chunks this process runs at once (1 unless ``expect_chunks`` said otherwise)."""
    return _chunks


def pool_size(chunks: int) -> int:
    """Connections a worker's ledger pool may open for ``chunks`` chunks at once: two each (a
    run's commands and its text flusher's may overlap), beyond a command that would find none
    left failing with redis-py's "Too many connections"."""
    return max(REDIS_PY_POOL, 2 * chunks + POOL_MARGIN)


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
    (``worker.edges.redis.sentinel``: it follows failovers), else one server. The broker is never
    this client (Celery's own).

    ``fail_fast`` (the API's): connecting takes at most ``socket_timeout`` too, and a command is
    tried again only on a broken connection. A cluster client keeps its retries through a
    failover either way.
    """
    connect_timeout = min(socket_timeout, CONNECT_TIMEOUT_S) if fail_fast else CONNECT_TIMEOUT_S
    # each pool (one per node on a cluster, the master's through Sentinel) sized for the chunks
    max_connections = pool_size(_chunks)
    if settings.redis_cluster:
        return RedisCluster.from_url(
            settings.redis_url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=connect_timeout,
            retry=_cluster_retry(),
            max_connections=max_connections,
        )
    extra: dict[str, Any] = {"retry": _reconnect_once()} if fail_fast else {}
    options: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": connect_timeout,
        "health_check_interval": 30,
        "max_connections": max_connections,
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
