"""Many runs' heartbeats in one round trip: renew their leases and read their Stop flags.

A process running many chunks at once (a gevent worker, docs/deploy.md) renews every lease it
holds and reads every held turn's Stop flag in one pipeline per tick instead of a round trip per
run: each renewal is the same fenced step as ``TurnStore.renew`` (``lua/transition.lua``, over
the turn's own keys), so a lease taken over meanwhile is refused exactly as one renewed alone.

On a Redis Cluster the turns' keys live on different nodes and a pipeline of scripts there is
split by node by redis-py anyway; there each run is renewed and read on its own, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.cluster import RedisCluster

from ledger import keys
from ledger.errors import TransitionRefused, UnknownTurn
from ledger.lease import Lease
from ledger.store import script
from ledger.turn import Step
from ledger.turns import KEEP, TurnStore, refusal

#: what a renewal came to: renewed (True), no longer the holder (False), or the error that kept
#: it from being known (the next beat tries again)
Renewed = bool | Exception


@dataclass(frozen=True)
class Beat:
    #: one per renewal asked, in order
    held: list[Renewed]
    #: one per turn watched, in order: its Stop flag is set
    stopped: list[bool]


class Heartbeats:
    """Renewals and Stop reads of many runs at once (``beat``) on one ``TurnStore``."""

    def __init__(self, store: TurnStore) -> None:
        self.store = store
        self._transition = store.client.register_script(script("transition.lua"))

    def beat(self, renewals: Sequence[tuple[Lease, int]], watched: Sequence[str]) -> Beat:
        """Renew each ``(lease, until_ms)`` and read the Stop flag of each turn in ``watched``.
        Redis unreachable past the ledger's outage window: ``LedgerUnavailable``."""
        if not renewals and not watched:
            return Beat([], [])
        if isinstance(self.store.client, RedisCluster):
            return self._one_by_one(renewals, watched)
        replies = self.store.ledger.retry(lambda: self._send(renewals, watched))
        held = [
            self._renewed(lease.turn_id, reply)
            for (lease, _), reply in zip(renewals, replies, strict=False)
        ]
        return Beat(held, [bool(reply) for reply in replies[len(renewals) :]])

    def _send(self, renewals: Sequence[tuple[Lease, int]], watched: Sequence[str]) -> list[Any]:
        replies = self._pipeline(renewals, watched)
        if any(isinstance(reply, redis.exceptions.NoScriptError) for reply in replies):
            # a restarted (or flushed) Redis lost its scripts: load it and send them again (a
            # renewal refused for NOSCRIPT did not run)
            self.store.client.script_load(self._transition.script)
            replies = self._pipeline(renewals, watched)
        return replies

    def _pipeline(self, renewals: Sequence[tuple[Lease, int]], watched: Sequence[str]) -> list[Any]:
        pipe = self.store.client.pipeline(transaction=False)
        for lease, until_ms in renewals:
            turn_keys, args = self.store.step_args(
                lease.turn_id,
                Step.RENEW,
                self.store.holder(lease),
                (),
                {"lease_until": until_ms},
                KEEP,
            )
            pipe.evalsha(self._transition.sha, len(turn_keys), *turn_keys, *args)
        for turn_id in watched:
            pipe.exists(keys.turn_cancel(turn_id))
        return list(pipe.execute(raise_on_error=False))

    @staticmethod
    def _renewed(turn_id: str, reply: Any) -> Renewed:
        if not isinstance(reply, redis.ResponseError):
            return True
        refused = refusal(turn_id, Step.RENEW, reply)
        return False if isinstance(refused, TransitionRefused | UnknownTurn) else refused

    def _one_by_one(self, renewals: Sequence[tuple[Lease, int]], watched: Sequence[str]) -> Beat:
        held: list[Renewed] = []
        for lease, until_ms in renewals:
            try:
                held.append(self.store.renew(lease, until_ms))
            except Exception as e:  # this run's renewal only: the others' go on
                held.append(e)
        stopped = []
        for turn_id in watched:
            try:
                stopped.append(self.store.stop_requested(turn_id))
            except Exception:  # read again at the next beat
                stopped.append(False)
        return Beat(held, stopped)
