"""Tenant admission's records (docs/semantics.md, tenants): which turns of which tenant hold a
slot, which wait to start, and in what order the tenants with waiting turns are served.

A turn takes one of its tenant's slots when it is admitted and holds it, whichever run and worker
carry it, until it ends, stops or waits (``leave``): a dead worker's slot passes to the run that
picks its turn up and is given back once. Every key is in one Redis slot (``keys.TENANTS``) and
every change is one script (``lua/tenants.lua``), so any number of API processes, workers and
reapers admit turns at once without a tenant ever holding more slots than its limit. The turn's
own records are in its slot, not this one, so the two are never written in one step: a slot
whose turn ended without giving it back (a crash between the two) is found by ``running`` and
given back by ``drop``, if it is still the one read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ledger import keys
from ledger.codec import text
from ledger.store import Ledger, MetaValue, script

#: most turns one call lets through
MOST = 64


@dataclass(frozen=True, slots=True)
class Limits:
    """A tenant's bounds, as the calling process's settings say (0: none)."""

    concurrency: int = 0
    #: milliseconds between two starts of the tenant's new turns
    interval_ms: int = 0


@dataclass(frozen=True, slots=True)
class Admitted:
    """A turn let through: it holds a slot of its tenant now, and is to be released."""

    turn_id: str
    tenant: str
    #: ``new`` (a turn's start) or ``resume`` (after a wait)
    kind: str
    #: how long it waited to start, in ms (0: it did not wait here)
    waited_ms: int


@dataclass(frozen=True, slots=True)
class Admissions:
    """What one call let through, and the earliest time (ms since the epoch) a tenant that its
    rate holds back may start (0: none is held back by its rate)."""

    admitted: tuple[Admitted, ...]
    wake_ms: int
    #: ``wait``: this call put the turn in its tenant's queue (it was not there)
    queued: bool = False


@dataclass(frozen=True, slots=True)
class Counts:
    running: int
    queued: int


@dataclass(frozen=True, slots=True)
class Ahead:
    """The room ahead of the workers as the script reads it: ``most`` new turns less the messages
    waiting in ``queues``, the broker's chunk queues on the ledger's own server (one round trip
    for the admission and its look at the broker)."""

    most: int
    queues: tuple[str, ...]


class Tenants:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.client = ledger.client
        self._script = self.client.register_script(script("tenants.lua"))

    def _call(
        self, op: str, now_ms: int, limits: Limits, room: int | Ahead, *extra: MetaValue
    ) -> Any:
        script_keys, args = self._args(op, now_ms, limits, room, *extra)
        return self.ledger.retry(lambda: self._script(keys=script_keys, args=args))

    def _args(
        self, op: str, now_ms: int, limits: Limits, room: int | Ahead, *extra: MetaValue
    ) -> tuple[list[str], list[MetaValue]]:
        script_keys = [keys.tenants_ring(), keys.tenant_owners(), keys.tenants_order()]
        if isinstance(room, Ahead):
            script_keys += room.queues
            room = -room.most
        args: list[MetaValue] = [
            op,
            now_ms,
            limits.concurrency,
            limits.interval_ms,
            room,
            MOST,
            keys.tenant_prefix(),
            *extra,
        ]
        return script_keys, args

    def start(
        self, tenant: str, turn_id: str, now_ms: int, limits: Limits, room: int | Ahead
    ) -> bool:
        """Take a slot for a new turn now, if no turn of any tenant waits (fair order), the
        ``room`` ahead of the workers, the tenant's slots and its rate allow; else nothing."""
        keys.tenant_key(tenant, "running")  # a tenant with braces is refused here
        return bool(int(self._call("start", now_ms, limits, room, tenant, turn_id)))

    def wait(
        self,
        tenant: str,
        turn_id: str,
        kind: str,
        now_ms: int,
        limits: Limits,
        room: int | Ahead,
    ) -> Admissions:
        """The turn waits for its tenant (``kind`` ``new`` or ``resume``; one that holds a slot
        already is let through again), then whatever may start now is let through."""
        keys.tenant_key(tenant, "running")
        return _admissions(self._call("wait", now_ms, limits, room, tenant, turn_id, kind))

    def wait_all(
        self,
        turns: Sequence[tuple[str, str]],
        kind: str,
        now_ms: int,
        limits: Limits,
        room: int | Ahead,
    ) -> list[Admissions]:
        """``wait`` for several turns, (tenant, turn_id) each, in one round trip (a pipeline;
        not on a Redis Cluster), in order: each as if alone, after the ones before it."""
        calls = []
        for tenant, turn_id in turns:
            keys.tenant_key(tenant, "running")
            calls.append(self._args("wait", now_ms, limits, room, tenant, turn_id, kind))

        def run() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for script_keys, args in calls:
                self._script(keys=script_keys, args=args, client=pipe)
            return list(pipe.execute())

        return [_admissions(reply) for reply in self.ledger.retry(run)]

    def leave(self, turn_id: str, now_ms: int, limits: Limits, room: int | Ahead) -> Admissions:
        """The turn gives back its slot, or its place in a queue (once: a second call finds
        nothing); then whatever may start now is let through."""
        return _admissions(self._call("leave", now_ms, limits, room, turn_id))

    def pump(self, now_ms: int, limits: Limits, room: int | Ahead) -> Admissions:
        """Let through whatever may start now, in fair order."""
        return _admissions(self._call("pump", now_ms, limits, room))

    def drop(self, tenant: str, turn_id: str, since_ms: int, now_ms: int) -> bool:
        """Give back a slot whose turn is gone, if it is still the one taken at ``since_ms``."""
        reply = self._call("drop", now_ms, Limits(), 0, tenant, turn_id, since_ms)
        return bool(int(reply))

    def anyone_waiting(self) -> bool:
        """Does any tenant have a turn waiting to start?"""
        ring = keys.tenants_ring()
        return bool(self.ledger.retry(lambda: self.client.exists(ring), "read"))

    def waiting_tenants(self) -> list[str]:
        """The tenants with turns waiting to start, in the order they are served."""
        ring = self.ledger.retry(lambda: self.client.zrange(keys.tenants_ring(), 0, -1), "read")
        return [text(t) for t in ring]

    def holding_tenants(self) -> list[str]:
        """The tenants whose turns hold slots now."""
        found = self.ledger.retry(lambda: self.client.smembers(keys.tenants_holding()), "read")
        return sorted(text(t) for t in found)

    def running(
        self, tenant: str, *, taken_before_ms: int | None = None, most: int = -1
    ) -> list[tuple[str, int]]:
        """The turns holding the tenant's slots, each with when it took its slot (ms), oldest
        first: only those taken before ``taken_before_ms``, and at most ``most``, when given."""
        key = keys.tenant_key(tenant, "running")
        until = "+inf" if taken_before_ms is None else f"({taken_before_ms}"

        def read() -> Any:
            if most < 0:
                return self.client.zrangebyscore(key, "-inf", until, withscores=True)
            return self.client.zrangebyscore(key, "-inf", until, start=0, num=most, withscores=True)

        found: list[Any] = self.ledger.retry(read, "read")
        return [(text(pair[0]), int(pair[1])) for pair in found]

    def counts(self, tenant: str) -> Counts:
        """How many of the tenant's turns hold a slot, and how many wait to start (new ones and
        ones resuming after a wait)."""

        def read() -> Any:
            pipe = self.client.pipeline(transaction=False)
            for part in ("running", "queued", "resume"):
                pipe.zcard(keys.tenant_key(tenant, part))
            return pipe.execute()

        running, queued, resuming = self.ledger.retry(read, "read")
        return Counts(int(running), int(queued) + int(resuming))

    def queued(self, tenant: str) -> int:
        """How many new turns of the tenant wait to start."""
        key = keys.tenant_key(tenant, "queued")
        return int(self.ledger.retry(lambda: self.client.zcard(key), "read"))


def _admissions(reply: Sequence[Any]) -> Admissions:
    *flat, wake, added = reply
    admitted = tuple(
        Admitted(text(flat[i]), text(flat[i + 1]), text(flat[i + 2]), int(flat[i + 3]))
        for i in range(0, len(flat), 4)
    )
    return Admissions(admitted, int(wake), bool(int(added)))
