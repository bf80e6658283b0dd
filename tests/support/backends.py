"""The Redis backends the ledger tests run on (see the ``backend`` fixture): fakeredis, a
redis-server, and a three-master Redis Cluster (``redis.cluster.RedisCluster``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ledger.store import Client


@dataclass
class Backend:
    """A Redis backend for the ledger tests; ``connect()`` opens another connection to it."""

    name: str
    connect: Callable[[], Client]
