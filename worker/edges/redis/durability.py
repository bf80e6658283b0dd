"""At start, refuse a ``DRES_DURABILITY`` the ledger's Redis cannot give (docs/configuration.md,
docs/faults.md).

A level above ``ack`` makes every write tool wait for a confirmation before its effect runs
(``ledger.durability``). A server that can never give it would not fail loudly: every write would
be closed unrun, turn after turn. So ``dres worker`` asks the ledger's Redis (every master of a
cluster: ``WAIT`` counts the replicas of the turn's own shard; under Sentinel, the master they
name) before it serves, and stops with one line naming the setting, the server and the fix when

- ``fsync`` or ``replica+fsync`` meets a server without ``WAITAOF`` (Redis before 7.2: probed with
  ``WAITAOF 0 0 1``, which asks for nothing and answers at once where the command exists), or one
  whose AOF is off (``INFO persistence``: ``aof_enabled``, readable where a managed Redis hides
  ``CONFIG``);
- ``replica`` or ``replica+fsync`` meets a server with no replica online (``INFO replication``),
  or a replica itself (``WAIT`` and ``WAITAOF`` are refused there).

A Redis that cannot be reached is not checked, with a warning, as ``store_policy`` does: a worker
may start while Redis is briefly away, and a write whose record cannot be confirmed then is not
run. ``read_server`` does the I/O, ``refusals`` decides from a ``Capability``, ``check_durability``
acts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis
import structlog
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from ledger.durability import Durability
from worker.base.errors import ConfigError
from worker.base.settings import Settings
from worker.edges.redis import sentinel
from worker.edges.redis.policy import CHECK_TIMEOUT_S

log = structlog.get_logger("dres.store")


@dataclass(frozen=True)
class Capability:
    """What one Redis (the ledger's, or a master of its cluster) can confirm."""

    #: ``host:port``
    address: str
    version: str = ""
    #: ``WAITAOF`` answered (Redis 7.2+)
    waitaof: bool = False
    aof: bool = False
    #: ``master`` or ``slave``
    role: str = "master"
    #: replicas online (their first sync done)
    replicas: int = 0
    #: False: the Redis could not be reached, and nothing above was read
    reached: bool = True
    error: str = ""


def refusals(server: Capability, durability: Durability) -> list[str]:
    """Why ``server`` cannot give ``durability``, one clause each (none: it can)."""
    level, where = durability.level, f"the ledger's Redis at {server.address}"
    if not durability.waits or not server.reached:
        return []
    if server.role != "master":
        return [f"DRES_DURABILITY={level} needs the primary, and {where} is a replica"]
    found = []
    if durability.local and not server.waitaof:
        found.append(
            f"DRES_DURABILITY={level} needs WAITAOF (Redis 7.2 or later), and {where} is "
            f"{server.version or 'older'} without it: upgrade it"
        )
    elif durability.local and not server.aof:
        found.append(
            f"DRES_DURABILITY={level} needs the AOF on, and {where} has appendonly no: set "
            "appendonly yes (CONFIG SET appendonly yes, and in redis.conf)"
        )
    if durability.replicas and server.replicas < durability.replicas:
        found.append(
            f"DRES_DURABILITY={level} needs a replica online, and {where} has none: start one "
            "(replicaof) and let it sync"
        )
    return found


def _online(replication: dict[str, Any]) -> int:
    """Replicas online in ``INFO replication``'s ``slaveN`` entries."""
    return sum(
        1
        for key, value in replication.items()
        if key.startswith("slave") and key[5:].isdigit() and dict(value).get("state") == "online"
    )


def read_server(address: str, client: redis.Redis) -> Capability:
    """What one Redis can confirm; never raises a Redis error."""
    try:
        info: dict[str, Any] = client.info()
        try:
            client.execute_command("WAITAOF", 0, 0, 1)  # type: ignore[no-untyped-call]
            waitaof = True
        except redis.ResponseError:  # unknown command: before 7.2
            waitaof = False
    except (redis.ConnectionError, redis.TimeoutError) as e:
        return Capability(address, reached=False, error=str(e))
    except redis.RedisError as e:  # INFO refused (NOPERM): nothing can be told
        return Capability(address, reached=False, error=str(e))
    return Capability(
        address,
        version=str(info.get("redis_version", "")),
        waitaof=waitaof,
        aof=str(info.get("aof_enabled", "0")) == "1",
        role=str(info.get("role", "master")),
        replicas=_online(info),
    )


def _options() -> dict[str, Any]:
    return {
        "socket_connect_timeout": CHECK_TIMEOUT_S,
        "socket_timeout": CHECK_TIMEOUT_S,
        "retry": Retry(NoBackoff(), 0),
        "decode_responses": True,
    }


def _read_sentinel_master(settings: Settings) -> Capability:
    """The master the Sentinels name now (``DRES_REDIS_URL``'s host means nothing there). A
    replica promoted later is not read: give every node the same AOF setting and version."""
    try:
        with sentinel.named_master(settings, **_options()) as (address, client):
            return read_server(address, client)
    except (redis.ConnectionError, redis.TimeoutError) as e:  # no Sentinel names a master
        return Capability(sentinel.described(settings), reached=False, error=str(e))


def read_servers(settings: Settings) -> list[Capability]:
    """The ledger's Redis: every master of its cluster, or the master its Sentinels name."""
    url = settings.redis_url
    parts = urlsplit(url)
    address = f"{parts.hostname or 'localhost'}:{parts.port or 6379}"
    if settings.sentinels:
        return [_read_sentinel_master(settings)]
    if not settings.redis_cluster:
        with redis.Redis.from_url(url, **_options()) as client:
            return [read_server(address, client)]
    try:
        cluster = RedisCluster.from_url(url, **_options())
    except (redis.RedisError, RedisClusterException) as e:
        return [Capability(address, reached=False, error=str(e))]
    try:
        masters = cluster.get_primaries()  # type: ignore[no-untyped-call]  # (unannotated)
        return [read_server(node.name, node.redis_connection) for node in masters]
    finally:
        cluster.close()


def check_durability(settings: Settings) -> Sequence[Capability]:
    """At ``ack``: nothing. Else read the ledger's Redis and raise ``ConfigError`` (one line)
    when it cannot give the level; a warning when it could not be reached. Call it where the
    worker starts, before it serves."""
    durability = settings.write_durability
    if not durability.waits:
        return []
    servers = read_servers(settings)
    found = [clause for server in servers for clause in refusals(server, durability)]
    if found:
        choose = "or set DRES_DURABILITY to a level it can give (ack always can)"
        raise ConfigError("; ".join(found) + f"; {choose}")
    for server in servers:
        if not server.reached:
            log.warning(
                "Redis unreachable at start: DRES_DURABILITY check skipped",
                level=durability.level,
                address=server.address,
                error=server.error,
            )
    return servers
