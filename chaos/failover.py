"""The failover trials' machines (``make chaos KINDS=failover``): the same restartable prefork
worker as ``chaos.cluster``'s, on a Sentinel set-up of real processes instead of one redis-server
(``rigs.redis_sentinel``: a primary, a replica, three Sentinels). The ledger, the Celery
broker and the runner's own clients all reach the master through the Sentinels
(``DRES_REDIS_SENTINELS``, ``DRES_REDIS_MASTER``).

A failover is made one of two ways: ``command``, ``SENTINEL FAILOVER`` (the old master stays up
and writable until the Sentinels reconfigure it, seconds later), or ``kill``, a SIGKILL of the
master (the Sentinels notice it within their 1 s ``down-after-milliseconds``, then elect one of
them to promote the replica). After the trial the old master comes back as a replica of the new
one (``LocalSentinel.restore``), so that the next trial can fail it over again: the two data
nodes take turns being the master.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, field
from typing import cast

import redis

from chaos.cluster import Cluster
from ledger import keys
from ledger.store import STORE_ERRORS
from rigs.redis_sentinel import LocalSentinel
from worker.base.logging import configure_logging

#: how a failover is made: ``SENTINEL FAILOVER``, or a SIGKILL of the master
HOWS = ("command", "kill")


@dataclass
class SentinelCluster(Cluster):
    """A restartable prefork worker on a primary, a replica and three Sentinels."""

    rig: LocalSentinel = field(init=False)
    #: the port of the master the last failover left (None: the set-up is whole)
    left: int | None = None
    #: failovers made, by how
    failovers: Counter[str] = field(default_factory=Counter)

    def start_store(self) -> dict[str, str]:
        # the runner's own clients log each switch they follow: the trials' lines say enough
        configure_logging("ERROR")
        self.rig = LocalSentinel().start()
        return self.rig.env()

    def broker_client(self) -> redis.Redis:
        """The broker is the ledger's master (``DRES_BROKER_URL`` unset): the runner's own client
        of it, which follows a failover (a ``sentinel://`` URL is not one redis-py opens)."""
        return cast(redis.Redis, self.runtime.redis)  # a Sentinel master's client is one

    def stop_store(self) -> None:
        self.rig.cleanup()

    def fail_over(self, how: str) -> None:
        """Fail the master over (``how`` in ``HOWS``), then mark the armed fault ``struck`` for a
        worker waiting at its failpoint: on the old master while it runs (a worker still on it
        goes on at once, into the failover), then, once every Sentinel names the new master,
        there."""
        old = self.rig.failover() if how == "command" else self.rig.kill_master()
        self.left = old
        self.failovers[how] += 1
        if how == "command":
            with contextlib.suppress(*STORE_ERRORS), self.rig.node(old) as client:
                client.hset(keys.chaos_fault(), "struck", 1)
        new = self.rig.wait_master(other_than=old)
        with self.rig.node(new) as client:
            client.hset(keys.chaos_fault(), "struck", 1)

    def recover(self) -> None:
        """The old master back as a replica of the new one, in sync, seen by every Sentinel."""
        if self.left is not None:
            self.rig.restore(self.left)
            self.left = None
