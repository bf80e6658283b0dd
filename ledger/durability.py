"""Write durability levels (``DRES_DURABILITY``, docs/faults.md): confirming that a turn's record
is on a replica, on disk, or both, before a write's effect runs or the turn goes on.

Redis answers a write once it is in the primary's memory; replication is asynchronous and the AOF
is fsynced about once a second (``appendfsync everysec``), so an answered write can still be lost
to a failover or a host crash. ``WAIT numreplicas timeout`` blocks until that many replicas
acknowledged the connection's writes so far; ``WAITAOF numlocal numreplicas timeout`` (Redis 7.2+)
until the primary's AOF (``numlocal``) and that many replicas' AOFs fsynced them. Both answer a
count, also when the timeout passes: ``Durability.enough`` compares.

Which connection. Both count the writes of *the connection they are sent on* (the replication
offset of its last write). redis-py's pool gives each command whichever idle connection it has,
and a record may have been appended through another one, sent again by a retry on a fresh one, or
have landed unseen before its connection was cut (the fencing then finds it in place and writes
nothing): a ``WAIT`` on a connection with no write of its own answers at once, with every replica.
Pinning the append and the ``WAIT`` to one connection would not cover those cases. So the
confirmation makes a write of its own, after the record, and waits for that: one pipeline (no
MULTI: ``WAIT`` does not block inside a transaction) on one connection sends

    XRANGE <stream> <id> <id>                   the record is there (no failover lost it)
    SET dres:turn:{id}:durable <id> PX 60000   a write of this connection, after the record
    WAIT 1 T  |  WAITAOF 1 0 T  |  WAITAOF 1 1 T

and reads the three replies. The ``SET`` comes after the record in the primary's replication
stream, so what the ``WAIT`` confirms includes the record whichever connection wrote it; a
pipeline that redis-py sends again on a new connection sends the ``SET`` again too. Cost: one
round trip and a small write besides the wait itself, paid only where the caller asks (a write
tool's ``tool_start`` and ``tool_done``).

On a Redis Cluster the pipeline goes to the master of the turn's slot through that node's own
client (every key of it carries the turn's hash tag): ``WAIT`` then counts that shard's replicas,
and the worker's start-time check (``worker.edges.redis.durability``) asked every master.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, Protocol, get_args

import redis
from redis.cluster import RedisCluster
from redis.exceptions import AskError, ClusterDownError, MovedError, TryAgainError

from ledger import keys
from ledger.store import Ledger

Level = Literal["ack", "replica", "fsync", "replica+fsync"]
LEVELS: tuple[Level, ...] = get_args(Level)
#: milliseconds the confirmation's own key lives: any wait is over long before, and nothing
#: stays behind
PROBE_TTL_MS = 60_000
#: replies of a cluster node that name another node for the slot: the slot map is refreshed and
#: the confirmation sent again (``Ledger.retry``)
_MOVED = (MovedError, AskError, ClusterDownError, TryAgainError)


@dataclass(frozen=True)
class Durability:
    """What a confirmation asks of the store: ``level`` within ``timeout_s`` seconds."""

    level: Level = "ack"
    timeout_s: float = 1.0

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"durability level must be one of {', '.join(LEVELS)}")
        if not self.timeout_s > 0:
            # a WAIT with timeout 0 blocks for ever
            raise ValueError("the durability timeout must be a positive number of seconds")

    @property
    def waits(self) -> bool:
        """Anything to confirm beyond Redis's own answer."""
        return self.level != "ack"

    @property
    def local(self) -> int:
        """The primary's AOF fsyncs asked for (0 or 1)."""
        return 1 if "fsync" in self.level else 0

    @property
    def replicas(self) -> int:
        """Replicas asked for (0 or 1)."""
        return 1 if "replica" in self.level else 0

    @property
    def timeout_ms(self) -> int:
        return max(1, math.ceil(self.timeout_s * 1000))

    def command(self) -> tuple[str | int, ...]:
        """The ``WAIT``/``WAITAOF`` that confirms a connection's writes at this level."""
        if not self.local:
            return ("WAIT", self.replicas, self.timeout_ms)
        return ("WAITAOF", self.local, self.replicas, self.timeout_ms)

    def counts(self, reply: Any) -> tuple[int, int]:
        """``(local, replicas)`` from the command's reply (a count, or ``[local, replicas]``)."""
        if not self.local:
            return 0, int(reply)
        return int(reply[0]), int(reply[1])

    def enough(self, local: int, replicas: int) -> bool:
        return local >= self.local and replicas >= self.replicas


@dataclass(frozen=True)
class Confirmation:
    """What one confirmation of a record found."""

    stream_id: str
    #: the record is in the turn's stream on the server asked
    present: bool
    #: the AOF fsyncs (the primary's: 0 or 1) and the replicas that confirmed it
    local: int = 0
    replicas: int = 0
    #: the server refused the wait (AOF turned off since the start, a demoted primary)
    error: str = ""
    #: all that the level asks was confirmed
    ok: bool = False

    def __str__(self) -> str:
        if not self.present:
            return f"record {self.stream_id} is not in the stream"
        if self.error:
            return f"record {self.stream_id}: the wait was refused: {self.error}"
        return f"record {self.stream_id}: {self.local} fsync(s), {self.replicas} replica(s)"


class Confirms(Protocol):
    """What a run's recorder asks: one confirmation of the turn's record at ``stream_id``."""

    def confirm(self, turn_id: str, stream_id: str) -> Confirmation: ...


class Confirmer:
    """Confirms a turn's records as ``durability`` asks, each on one connection of its own."""

    def __init__(self, ledger: Ledger, durability: Durability) -> None:
        if not durability.waits:
            raise ValueError("level ack confirms nothing: use no Confirmer")
        self.ledger = ledger
        self.durability = durability

    def confirm(self, turn_id: str, stream_id: str) -> Confirmation:
        """One confirmation of the record at ``stream_id`` (and of everything before it).

        A short count is an answer, not an error: the caller decides. An unreachable Redis is
        ridden out as by every ledger operation (``LedgerUnavailable`` past the window); a full
        one refuses the confirmation's own write (``StoreFull``).
        """
        return self.ledger.retry(partial(self._once, turn_id, stream_id), "confirm")

    def _once(self, turn_id: str, stream_id: str) -> Confirmation:
        stream = keys.turn_events(turn_id)
        pipe = self._server(stream).pipeline(transaction=False)
        pipe.xrange(stream, min=stream_id, max=stream_id)
        pipe.set(keys.turn_durable(turn_id), stream_id, px=PROBE_TTL_MS)
        pipe.execute_command(*self.durability.command())  # type: ignore[no-untyped-call]
        found, written, reply = pipe.execute(raise_on_error=False)
        for answer in (found, written, reply):
            if isinstance(answer, _MOVED):
                self._refresh()
                raise redis.ConnectionError(f"the turn's slot moved: {answer}") from answer
        for answer in (found, written):
            if isinstance(answer, Exception):  # OutOfMemoryError: Ledger.retry's StoreFull
                raise answer
        if isinstance(reply, redis.ResponseError):
            return Confirmation(stream_id, bool(found), error=str(reply))
        local, replicas = self.durability.counts(reply)
        ok = bool(found) and self.durability.enough(local, replicas)
        return Confirmation(stream_id, bool(found), local, replicas, ok=ok)

    def _server(self, stream: str) -> redis.Redis:
        """The client of the server that holds ``stream``: the ledger's own, or on a cluster
        the client of the master of the stream's slot."""
        client = self.ledger.client
        if not isinstance(client, RedisCluster):
            return client
        node = client.get_node_from_key(stream)  # type: ignore[no-untyped-call]
        server: redis.Redis | None = node.redis_connection if node is not None else None
        if server is None:
            raise redis.ConnectionError(f"no connection to the master of {stream}'s slot")
        return server

    def _refresh(self) -> None:
        client = self.ledger.client
        if isinstance(client, RedisCluster):
            client.nodes_manager.initialize()
