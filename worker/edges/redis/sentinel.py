"""The ledger's Redis through Sentinel (``DRES_REDIS_SENTINELS``): clients that leave a demoted
master at once.

redis-py's ``Sentinel(...).master_for(name)`` asks the Sentinels where the master is only when it
opens a connection, and its connections stay on the master they opened until it refuses a write
(``READONLY``, which its ``SentinelManagedConnection`` turns into a ``ConnectionError``) or drops
them. After ``SENTINEL FAILOVER`` the old master goes on accepting writes for seconds (about 11 s
here with Redis 7.0: Sentinel reconfigures it only after it has reported its old role for a few
publish periods), and every write sent there is lost when it resyncs from the new master: a
``tool_done`` gone, or the events after it, with a worker that saw each one acknowledged; and
the writes sent between the replica's promotion and the switch (about a second) are lost the
same way. Three things here close that (redis-py 8.2.0, Redis 7.0):

- a ``MasterWatch`` per process and master subscribes on every Sentinel (a daemon thread each)
  to ``+switch-master``: from then on a pool drops a connection to any other address before it
  hands it out (``ensure_connection``), so the next command goes to the new master;
- and to the failover leader's ``+failover-state-send-slaveof-noone``, sent just before it
  promotes the replica: from then until the switch (or the leader's abort, or
  ``FAILOVER_HOLD_S``) a command waits before it is sent, so none lands on the old master
  after its replica stopped copying it (one sent before has the moment until the leader's
  next tick, up to 100 ms, to be copied);
- discovery asks every Sentinel and takes the master of the highest ``config-epoch``, never one
  announced as demoted since, not the first that answers: a Sentinel that has not heard of the
  failover yet (they learn it from each other's hello messages, every 2 s) still names the old,
  live master, and would send a new connection back to it.

What stays: a write the master acknowledged and died before replicating (a crash, SIGKILL) is
lost with it; ``DRES_DURABILITY`` is what confirms a record before its effect runs.

TLS: a ``rediss://`` DRES_REDIS_URL (``Settings.sentinel_tls``) gives every connection, to the
master and to the Sentinels, the same TLS options: the master's pools open redis-py's
``SentinelManagedSSLConnection`` (``ssl=True`` in ``master_options``), and the Sentinels'
clients, discovery's and the watch's, get ``ssl=True`` and the same ``ssl_*`` options
(``sentinel_options``). Sentinels and data nodes serve TLS together (``tls-port`` on each,
``tls-replication yes``), as a deployment with TLS on its data nodes does; the master's
certificate must name the address the Sentinels give (an IP, mostly) unless
``ssl_check_hostname=false``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio as aioredis
import redis.asyncio.sentinel as aiosentinel
from redis.sentinel import MasterNotFoundError, Sentinel, SentinelConnectionPool

from worker.base.settings import Settings
from worker.edges.redis.sentinel_watch import HOLD_POLL_S, Address, MasterWatch, newest_master

#: seconds a command to a Sentinel may take (discovery asks each in turn)
SENTINEL_TIMEOUT_S = 1.0

_SENTINEL_ERRORS = (redis.ConnectionError, redis.TimeoutError, redis.ResponseError)


def _discovered(watch: MasterWatch, name: str, states: list[Any], errors: list[str]) -> Address:
    found = newest_master(states, demoted=watch.demoted)
    if found is None:
        raise MasterNotFoundError(f"no master found for {name!r} {errors or ''}")
    watch.address = found
    return found


class FollowingSentinel(Sentinel):
    """redis-py's ``Sentinel`` whose discovery asks every Sentinel and keeps the newest answer."""

    def __init__(self, watch: MasterWatch, **kwargs: Any) -> None:
        super().__init__(watch.sentinels, sentinel_kwargs=watch.kwargs, **kwargs)
        self.watch = watch

    def discover_master(self, service_name: str) -> Address:
        states, errors = [], []
        for sentinel in self.sentinels:
            try:
                masters: Any = sentinel.sentinel_masters()
                states.append(masters.get(service_name))
            except _SENTINEL_ERRORS as e:
                errors.append(f"{sentinel}: {e!r}")
        return _discovered(self.watch, service_name, states, errors)


class FollowingPool(SentinelConnectionPool):
    """A master's pool that hands out no connection to a master the watch has seen replaced."""

    def ensure_connection(self, connection: Any) -> None:
        watch: MasterWatch = self.sentinel_manager.watch
        watch.start()
        watch.wait()
        if watch.stale(connection.host, connection.port):
            connection.disconnect()  # it reconnects below, asking the Sentinels where to
        super().ensure_connection(connection)

    def disconnect(self, inuse_connections: bool = True) -> None:
        super().disconnect(inuse_connections)
        if inuse_connections:  # the client is being closed
            self.sentinel_manager.watch.stop()


class FollowingAsyncSentinel(aiosentinel.Sentinel):
    """``FollowingSentinel`` for ``redis.asyncio`` (the API's readers)."""

    def __init__(self, watch: MasterWatch, **kwargs: Any) -> None:
        super().__init__(watch.sentinels, sentinel_kwargs=watch.kwargs, **kwargs)
        self.watch = watch

    async def discover_master(self, service_name: str) -> Address:
        states, errors = [], []
        for sentinel in self.sentinels:
            try:
                masters: Any = await sentinel.sentinel_masters()
                states.append(masters.get(service_name))
            except _SENTINEL_ERRORS as e:
                errors.append(f"{sentinel}: {e!r}")
        return _discovered(self.watch, service_name, states, errors)


class FollowingAsyncPool(aiosentinel.SentinelConnectionPool):
    """``FollowingPool`` for ``redis.asyncio``: a hold waits without blocking the event loop."""

    async def ensure_connection(self, connection: Any) -> None:
        watch: MasterWatch = self.sentinel_manager.watch
        watch.start()
        while (left := watch.held()) > 0:
            await asyncio.sleep(min(left, HOLD_POLL_S))
        if watch.stale(connection.host, connection.port):
            await connection.disconnect()
        await super().ensure_connection(connection)


_watches: dict[tuple[Any, ...], MasterWatch] = {}
_watches_lock = threading.Lock()


def sentinel_options(settings: Settings, timeout_s: float = SENTINEL_TIMEOUT_S) -> dict[str, Any]:
    """The options of clients of the Sentinels themselves (not of the master), as ``redis.Redis``
    takes them: a timeout, so that one hung Sentinel costs a discovery a moment, not a hang;
    their password; and TLS, the master's (``Settings.sentinel_tls``)."""
    options: dict[str, Any] = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
    if settings.redis_sentinel_password:
        options["password"] = settings.redis_sentinel_password
    return options | settings.sentinel_tls


def watch_for(settings: Settings) -> MasterWatch:
    """This process's watch of the settings' master (one per Sentinels, name and options)."""
    kwargs = sentinel_options(settings)
    key = (tuple(settings.sentinels), settings.redis_master, repr(sorted(kwargs.items())))
    with _watches_lock:
        if key not in _watches:
            _watches[key] = MasterWatch(settings.sentinels, settings.redis_master, kwargs)
        return _watches[key]


def master_options(settings: Settings) -> dict[str, Any]:
    """The master's credentials, database and TLS options, from DRES_REDIS_URL (its host is not
    used); ``ssl`` makes redis-py's Sentinel pool open ``SentinelManagedSSLConnection``s."""
    url = urlsplit(settings.redis_url)
    options: dict[str, Any] = {"db": int(url.path.strip("/") or 0)}
    if url.username:
        options["username"] = unquote(url.username)
    if url.password:
        options["password"] = unquote(url.password)
    return options | settings.sentinel_tls


def master_client(settings: Settings, **options: Any) -> redis.Redis:
    """A client of the settings' master through its Sentinels; ``options`` are the connection's
    (socket timeouts, retry) as ``redis.Redis`` takes them."""
    sentinel = FollowingSentinel(watch_for(settings))
    client: redis.Redis = sentinel.master_for(
        settings.redis_master,
        connection_pool_class=FollowingPool,
        **master_options(settings),
        **options,
    )
    return client


def master_reader(settings: Settings, **options: Any) -> aioredis.Redis:
    """``master_client`` for ``redis.asyncio``."""
    sentinel = FollowingAsyncSentinel(watch_for(settings))
    client: aioredis.Redis = sentinel.master_for(
        settings.redis_master,
        connection_pool_class=FollowingAsyncPool,
        **master_options(settings),
        **options,
    )
    return client


def described(settings: Settings) -> str:
    """``master NAME via Sentinels host:port, ...``: where the settings' master is, for messages."""
    sentinels = ", ".join(f"{host}:{port}" for host, port in settings.sentinels)
    return f"master {settings.redis_master} via Sentinels {sentinels}"


@contextmanager
def named_master(settings: Settings, **options: Any) -> Iterator[tuple[str, redis.Redis]]:
    """A client of the master the Sentinels name now, and its ``host:port (described)``, for the
    checks at start; ``redis.ConnectionError`` when no Sentinel names one (``MasterNotFoundError``
    is one)."""
    client = master_client(settings, **options)
    try:
        pool: Any = client.connection_pool
        host, port = pool.get_master_address()
        yield f"{host}:{port} ({described(settings)})", client
    finally:
        client.close()
