"""Celery's Redis transport for ``redis://`` brokers, with a workaround for a kombu bug that
takes a worker down after a Redis restart (docs/faults.md: a worker rides a restart out in the
same process).

Seen with kombu 5.7.0, Celery 5.7.0 and redis-py 8.2.0; the same path failed in kombu 4.2.2
(celery/kombu#970), and "worker stops after a Redis restart" reports go on (celery/celery#10205
on 5.5.0, #10302 on 5.6.3). When the broker connection is lost while the consumer waits in
BRPOP (a pool slot is free) and a message is unacknowledged (a chunk runs), Celery's
``Consumer.on_connection_error_after_connected`` first ``collect()``s the connection: closing
its channel fails at the pending BRPOP's read, and the transport is then cut from its connection
(``transport.client = None``). ``connection.close()`` closes the channel again, which restores
the unacknowledged message and for that builds a client from the transport's connection:
``conninfo.hostname`` on ``None``. kombu's ``ignore_errors`` only swallows connection errors, so
the ``AttributeError`` ends the consumer ("Unrecoverable error") and the worker shuts down once
its running chunks end.

Here a channel whose transport was cut from its connection raises ``redis.ConnectionError``
instead, the error kombu expects of a broker it cannot reach. The message stays in kombu's
unacked index in Redis, which restores it after the visibility timeout; a second delivery of a
run does nothing (docs/semantics.md). Tests: ``tests/integration/test_store_faults.py`` (a worker
with a free pool slot stays up through a restart while a chunk runs) fails without this, and
``tests/integration/test_broker_transport_kombu.py`` shows the path on kombu's own transport.

``rediss://`` and other schemes keep kombu's own transport: kombu keys its TLS defaults off the
``rediss`` alias, which a transport named by its class path would lose.

kombu's ``SentinelChannel`` (a ``sentinel://`` broker, ``DRES_REDIS_SENTINELS``) is a Redis
``Channel`` with the same ``_connparams``, and the same escape (seen with kombu 5.7.0):
``SentinelTransport`` carries the same guard.

A second way to lose the guard, through Sentinel (seen with kombu 5.7.0 and Celery 5.7.0): a
``sentinel://`` broker URL names every Sentinel (``sentinel://h1;sentinel://h2;...``), which
kombu keeps as the connection's alternates; after a failed connect (``on_error`` in
``Connection._ensure_connection``) or a failed publish (``Connection.ensure``),
``maybe_switch_next`` calls ``Connection.switch(next URL)``, which re-reads the transport from
that URL's scheme (``parse_url``: ``sentinel``) over the one given at construction (Celery's
``broker_transport``).
So after the first reconnect of a failover whose new master was not named yet, the consumer ran
on kombu's own ``SentinelTransport``, and the next connection loss while a chunk ran and a pool
slot was free took the worker down with the ``AttributeError`` above (``_get_pool`` ->
``_connparams`` on kombu's channel); a publish retried the same way (a chunk's hand-over, from
a connection of kombu's pool, ``ConnectionPool.new``: a ``PooledConnection``) failed with it.
``AMQP`` gives Celery a ``Connection`` whose ``switch``, and its pool's connections', keep
dres's transport; ``create_app`` installs it. Tests: ``tests/unit/test_broker_transport.py``
(a switch through every alternate keeps the transport) and
``tests/integration/test_sentinel.py`` (a worker with a free slot stays up through two SIGKILLs
of the master in a row while chunks run).

Both channels also mark each chunk message's presence in the broker
(``worker.edges.celery.marks``), so the reaper asks about a due run without reading the queues.

And both restore the unacknowledged messages of dead workers on their own clock
(``_RestoresOnItsOwn``). kombu restores them from a timer of the worker's event loop, which only a
prefork worker runs (seen with kombu 5.7.0, Celery 5.7.0). A gevent worker consumes in Celery's
``synloop``: ``drain_events(timeout=2.0)``, whose poll only reaches ``maybe_restore_messages``
when it sees no event at all, but the pending BRPOP answers within its own 1 s timeout (an event,
read as ``Empty``) first; so unless every greenlet slot is busy (no BRPOP pending), it never
restores. A gevent worker SIGKILLed with chunk messages received but not started left their turns
``queued`` for good in a gevent-only deployment (``make chaos POOL=gevent``, ``kill_worker``);
celery/celery#4976 reports the gevent pool's missing restore since Celery 4.2. Test:
``tests/integration/test_gevent_restore.py`` (a killed gevent worker's unstarted chunk is restored
by a gevent worker) fails without it.

And both wake a consumer that polls without an event loop (a gevent worker's) when an
acknowledgement frees a prefetch slot, so that it asks for its next message at once instead of
at its next poll, up to 2 s later: ``worker.edges.celery.wakeup`` says why (a chunk boundary's
~1.7 s stall under gevent, celery/celery#7718) and names its tripwire.
"""

from __future__ import annotations

import time
from queue import Empty
from typing import Any

import redis
from celery.app import amqp
from kombu import connection
from kombu.transport import redis as kombu_redis

from worker.edges.celery.marks import MarkingChannel, MarkingQoS
from worker.edges.celery.wakeup import WakingQoS, waking_cycle

#: the transport's class path, for Celery's ``broker_transport``
TRANSPORT = f"{__name__}:Transport"
#: URL schemes this transport serves
SCHEMES = frozenset({"redis"})
#: the same for a ``sentinel://`` broker: kombu's ``SentinelChannel`` is a Redis ``Channel`` and
#: builds its clients through the same ``_connparams``, so it has the same hazard
SENTINEL_TRANSPORT = "worker.edges.celery.transport:SentinelTransport"


class _ClosedConnectionGuard(kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection is None or self.connection.client is None:
            raise redis.ConnectionError("the broker connection is closed (kombu cut its transport)")
        return super()._connparams(asynchronous=asynchronous)


class _RestoresOnItsOwn(kombu_redis.Channel):
    #: monotonic time of this channel's last restore of expired unacknowledged messages
    _restored_at = 0.0

    def _brpop_read(self, **options: Any) -> Any:
        try:
            delivered = super()._brpop_read(**options)
        except Empty:  # the BRPOP timed out: the queues are idle
            self._restore_if_due()
            raise
        self._restore_if_due()
        return delivered

    def _restore_if_due(self) -> None:
        """kombu's restore (mutex-guarded across workers, connection errors swallowed) once per
        ``unacked_restore_interval``, whichever loop consumes."""
        now = time.monotonic()
        if now - self._restored_at >= self.unacked_restore_interval:
            self._restored_at = now
            self.connection.cycle.maybe_restore_messages()


class QoS(WakingQoS, MarkingQoS):
    pass


class Channel(MarkingChannel, _RestoresOnItsOwn, _ClosedConnectionGuard):
    QoS = QoS


class SentinelChannel(
    MarkingChannel, _RestoresOnItsOwn, _ClosedConnectionGuard, kombu_redis.SentinelChannel
):
    QoS = QoS


class Transport(kombu_redis.Transport):
    Channel = Channel

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        waking_cycle(self)


class SentinelTransport(kombu_redis.SentinelTransport):
    Channel = SentinelChannel

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        waking_cycle(self)


class _KeepsTransport(connection.Connection):
    def switch(self, conn_str: str) -> None:
        transport = self._initial_params.get("transport")
        super().switch(conn_str)
        if transport in (TRANSPORT, SENTINEL_TRANSPORT):
            self.transport_cls = transport


class Connection(_KeepsTransport):
    """A broker connection that keeps dres's transport when it moves to its next URL, and
    whose pool's connections (a producer's: a chunk's hand-over publishes from one) do too."""

    def Pool(self, limit: int | None = None, **kwargs: Any) -> ConnectionPool:
        return ConnectionPool(self, limit, **kwargs)


class PooledConnection(_KeepsTransport, connection.PooledConnection):
    pass


class ConnectionPool(connection.ConnectionPool):
    def new(self) -> PooledConnection:
        return PooledConnection(self, **dict(self.connection._info(resolve=False)))


class AMQP(amqp.AMQP):  # type: ignore[misc]  # celery ships no types: its AMQP is Any
    """Celery's ``app.amqp`` whose broker connections are ``Connection``s."""

    Connection = Connection
    BrokerConnection = Connection
