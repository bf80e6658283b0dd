"""At start, refuse a Redis that may evict dres's keys (docs/configuration.md,
``DRES_ALLOW_EVICTION``).

A Redis that runs full of memory under any ``maxmemory-policy`` but ``noeviction`` deletes keys
to make room: ``allkeys-*`` any key (a turn's ledger stream, its lease, a queued chunk message),
``volatile-*`` the keys with a TTL (a stopped turn's keys, which Continue still needs, a Stop
flag, an API ``Idempotency-Key``). A ledger that lost a ``tool_done`` lets a resumed run repeat
the write it recorded. ``noeviction`` makes a full Redis refuse writes instead: an error dres
sees, not a silent loss.

So ``dres worker`` and ``dres api`` read the policy of the ledger's Redis (every master of a
cluster; the master its Sentinels name now) and of the broker's (when it is another) before they
serve, and stop with one line naming the store, the address and the fix, unless
``DRES_ALLOW_EVICTION=1``: then a warning and the gauge ``dres_store_eviction_allowed{store,
policy}`` at 1. A Redis that will not say (a
managed service that refuses ``CONFIG``, or answers it empty) is trusted with a warning, as
Sidekiq does; one that cannot be reached is not checked, with a warning: a worker may start
while Redis is briefly away.

``read_stores`` does the I/O, ``verdict`` decides from a ``Reading``, ``check_stores`` acts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import redis
import structlog
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from worker.base import metrics
from worker.base.errors import ConfigError
from worker.base.settings import Settings
from worker.edges.redis import sentinel

log = structlog.get_logger("dres.store")

#: the one policy under which Redis never deletes a key to make room
NOEVICTION = "noeviction"
#: seconds the check waits for a Redis to connect, and then to answer, before it skips it
CHECK_TIMEOUT_S = 3.0
#: URL schemes of a Redis; a broker URL of another kind (sentinel://, amqp://) is not checked
REDIS_SCHEMES = frozenset({"redis", "rediss", "unix"})

Store = Literal["ledger", "broker"]
#: ``ok``: noeviction; ``refused``/``allowed``: another policy, without/with DRES_ALLOW_EVICTION;
#: ``unread``: the Redis would not say; ``unreached``: it could not be reached
Verdict = Literal["ok", "refused", "allowed", "unread", "unreached"]


@dataclass(frozen=True)
class Reading:
    """What one Redis said its ``maxmemory-policy`` is."""

    store: Store
    #: ``host:port`` (a socket's path)
    address: str
    #: empty when it was not read
    policy: str = ""
    #: why it was not read
    error: str = ""
    #: False: the Redis could not be reached at all
    reached: bool = True


def verdict(reading: Reading, *, allow: bool) -> Verdict:
    if not reading.reached:
        return "unreached"
    if not reading.policy:
        return "unread"
    if reading.policy == NOEVICTION:
        return "ok"
    return "allowed" if allow else "refused"


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_policy(store: Store, address: str, client: redis.Redis) -> Reading:
    """``CONFIG GET maxmemory-policy`` of one Redis; never raises a Redis error."""
    try:
        reply: Any = client.config_get("maxmemory-policy")
    except (redis.ConnectionError, redis.TimeoutError) as e:
        return Reading(store, address, error=str(e), reached=False)
    except redis.RedisError as e:  # unknown command (renamed away), NOPERM: a managed Redis
        return Reading(store, address, error=str(e))
    found = {_text(k): _text(v) for k, v in (reply or {}).items()}
    policy = found.get("maxmemory-policy", "").strip().lower()
    return Reading(store, address, policy=policy, error="" if policy else "an empty reply")


def _address(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return parts.path
    return f"{parts.hostname or 'localhost'}:{parts.port or 6379}"


def _quick() -> dict[str, Any]:
    """Every check client's options: short timeouts and no retries, so a Redis that is away
    costs the check seconds, not a hang."""
    return {
        "socket_connect_timeout": CHECK_TIMEOUT_S,
        "socket_timeout": CHECK_TIMEOUT_S,
        "retry": Retry(NoBackoff(), 0),
    }


def _read_url(store: Store, url: str) -> Reading:
    client = redis.Redis.from_url(url, **_quick())
    try:
        return read_policy(store, _address(url), client)
    finally:
        client.close()


def _read_cluster(url: str) -> list[Reading]:
    """The policy of every master of the ledger's Redis Cluster (the URL names any node)."""
    try:
        cluster = RedisCluster.from_url(url, **_quick())
    except (redis.RedisError, RedisClusterException) as e:
        return [Reading("ledger", _address(url), error=str(e), reached=False)]
    try:
        masters = cluster.get_primaries()  # type: ignore[no-untyped-call]  # (unannotated)
        return [read_policy("ledger", node.name, node.redis_connection) for node in masters]
    finally:
        cluster.close()


def _read_sentinel_master(settings: Settings) -> Reading:
    """The policy of the master the Sentinels name now (the broker's too, when it follows them).
    A replica promoted later is not read: give every node the same ``maxmemory-policy``."""
    try:
        with sentinel.named_master(settings, **_quick()) as (address, client):
            return read_policy("ledger", address, client)
    except (redis.ConnectionError, redis.TimeoutError) as e:
        return Reading("ledger", sentinel.described(settings), error=str(e), reached=False)


def read_stores(settings: Settings) -> list[Reading]:
    """The ledger's Redis (each master of a cluster, the master its Sentinels name), then the
    broker's unless it is the same."""
    if settings.redis_cluster:
        readings = _read_cluster(settings.redis_url)
    elif settings.sentinels:
        readings = [_read_sentinel_master(settings)]
    else:
        readings = [_read_url("ledger", settings.redis_url)]
    broker = settings.broker
    if settings.broker_url and broker != settings.redis_url:  # else the broker is the ledger's
        if urlsplit(broker).scheme in REDIS_SCHEMES:
            readings.append(_read_url("broker", broker))
        else:
            log.info("broker is not a redis:// URL: its eviction policy is not checked")
    return readings


def refusal(refused: Sequence[Reading]) -> str:
    """One line: which Redis has which policy, why that is refused, and the fix."""
    which = ", ".join(
        f"the {r.store}'s Redis at {r.address} has maxmemory-policy {r.policy}" for r in refused
    )
    return (
        f"{which}: when it is full it deletes keys, dres's among them (a turn's ledger, queued "
        f"chunks); set it to {NOEVICTION} (CONFIG SET maxmemory-policy {NOEVICTION}, and "
        f"maxmemory-policy {NOEVICTION} in redis.conf), or set DRES_ALLOW_EVICTION=1 to start "
        "anyway"
    )


def check_stores(settings: Settings) -> list[Reading]:
    """Read every Redis's policy and act on it: ``ConfigError`` for one that may evict (unless
    allowed: then a warning and the gauge), a warning for one that would not say or could not
    be reached. Call it where the process starts, before it serves (a worker: before its pool
    forks and after ``WorkerMetrics.prepare``)."""
    readings = read_stores(settings)
    verdicts = [verdict(r, allow=settings.allow_eviction) for r in readings]
    refused = [r for r, v in zip(readings, verdicts, strict=True) if v == "refused"]
    if refused:
        raise ConfigError(refusal(refused))
    for r, v in zip(readings, verdicts, strict=True):
        where = {"store": r.store, "address": r.address}
        if v == "allowed":
            log.warning(
                "Redis may evict dres's keys; starting anyway (DRES_ALLOW_EVICTION=1)",
                policy=r.policy,
                **where,
            )
            metrics.eviction_allowed(r.store, r.policy)
        elif v == "unread":
            log.warning(
                "maxmemory-policy not readable: make sure it is noeviction", error=r.error, **where
            )
        elif v == "unreached":
            log.warning(
                "Redis unreachable at start: maxmemory-policy check skipped",
                error=r.error,
                **where,
            )
    return readings
