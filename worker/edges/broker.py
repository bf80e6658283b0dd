"""dres's Celery broker transport: kombu's Redis transport, with one fix for a Redis restart.

kombu's Redis channel builds a new client from its connection's parameters whenever it needs
one. After a lost broker connection Celery collects and closes that connection, which sets the
transport's ``client`` to None; a channel closed after that (a consumer's, with messages
delivered and not acknowledged) tries to put those messages back through a new client, and
``Channel._connparams`` fails with ``AttributeError: 'NoneType' object has no attribute
'hostname'``. ``kombu.common.ignore_errors`` swallows connection and channel errors only, so
the ``AttributeError`` escapes the consumer's reconnect and the worker stops ("Unrecoverable
error"): kombu#970 (kombu 4.2.2) and the line of "worker stops after a Redis restart" reports
after it (celery#8030, #8091, #9054, #10205, #10302); seen here with Celery 5.7.0 / kombu 5.7.0.

Here the channel of a connection that is gone raises a ``redis.ConnectionError`` instead: the
consumer treats it as the connection loss it is and reconnects. The messages it could not put
back stay in the broker's unacked hash, from which kombu restores them once their visibility
timeout passes (and dres's reaper re-sends a chunk message that is nowhere): none is lost.

kombu's ``SentinelChannel`` (a ``sentinel://`` broker, ``DRES_REDIS_SENTINELS``) is a Redis
``Channel`` with the same ``_connparams``, and the same escape (seen with kombu 5.7.0):
``SentinelTransport`` carries the same guard.
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.transport import redis as kombu_redis

#: the transport's name for Celery's ``broker_transport`` setting
TRANSPORT = "worker.edges.broker:Transport"
#: the same for a ``sentinel://`` broker: kombu's ``SentinelChannel`` is a Redis ``Channel`` and
#: builds its clients through the same ``_connparams``, so it has the same hazard
SENTINEL_TRANSPORT = "worker.edges.broker:SentinelTransport"


class _ClosedConnectionGuard(kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> Any:
        connection = self.connection
        if connection is None or connection.client is None:
            raise redis.ConnectionError(
                "the broker connection is closed: unacknowledged messages stay in Redis and "
                "are restored after their visibility timeout"
            )
        return super()._connparams(asynchronous)  # type: ignore[no-untyped-call]


class Channel(_ClosedConnectionGuard):
    pass


class SentinelChannel(_ClosedConnectionGuard, kombu_redis.SentinelChannel):
    pass


class Transport(kombu_redis.Transport):
    Channel = Channel


class SentinelTransport(kombu_redis.SentinelTransport):
    Channel = SentinelChannel
