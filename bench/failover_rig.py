"""The Sentinel rig of rows D5-D6, as a trial sees it: the new master polled for the turn's first
entries, the sentinels' agreement, the fault made, and the rig made whole again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Any

import redis

from ledger import keys
from ledger.events import Event, ModelStart, TurnEnded
from ledger.store import Ledger
from rigs import poll
from rigs.redis_sentinel import LocalSentinel
from worker.dev.redis_server import RedisServerError

#: seconds between polls of the new master
POLL_S = 0.01
#: seconds between other looks (the turn's progress, the rig, the turn's end)
LOOK_S = 0.05
#: seconds the rig may take to be whole again
RESTORE_S = 60.0


@dataclass
class Seen:
    """What the poller of the new master saw, each a ``time.time()`` (None: not by the
    deadline): it answered as a master, the turn's first entry there, its first model_start."""

    promoted_at: float | None = None
    event_at: float | None = None
    event: Event | None = None
    model_call_at: float | None = None
    #: that model_start's own ts
    model_call_ts: float | None = None


def events_on(rig: LocalSentinel, port: int, turn_id: str) -> list[Event]:
    with rig.node(port) as client:
        return Ledger(client).events(turn_id)


def _newest(client: redis.Redis, stream: str) -> tuple[bool, str | None]:
    """Is the node a master, and its newest entry of ``stream``, in one MULTI."""
    with client.pipeline(transaction=True) as pipe:
        pipe.role()
        pipe.xrevrange(stream, count=1)
        role, newest = pipe.execute()
    last = newest[0][0] if newest else None
    found = last.decode() if isinstance(last, bytes) else last
    return role[0] in (b"master", "master"), found


def watch_new_master(rig: LocalSentinel, port: int, turn_id: str, until: float) -> Seen:
    """Poll the node on ``port`` until the turn's first model_start there, or ``until``. The
    first poll that finds it a master notes the turn's newest entry (what replication had
    brought); an entry after it was written to it as the master."""
    seen = Seen()
    stream, cursor = keys.turn_events(turn_id), "0-0"
    with rig.node(port) as client:  # the node itself, with the rig's credentials
        while seen.model_call_at is None and time.time() < until:
            try:
                master, last = _newest(client, stream)
                now = time.time()
                if master and seen.promoted_at is None:
                    seen.promoted_at, cursor = now, last or cursor
                elif master and last != cursor:
                    fresh = Ledger(client).read_after(turn_id, cursor)
                    if fresh and seen.event_at is None:
                        seen.event_at, seen.event = now, fresh[0].event
                    calls = [env.event for env in fresh if isinstance(env.event, ModelStart)]
                    if calls:
                        seen.model_call_at, seen.model_call_ts = now, calls[0].ts
                    cursor = fresh[-1].stream_id if fresh else cursor
            except redis.RedisError:
                pass
            time.sleep(POLL_S)
    return seen


def agreement(rig: LocalSentinel, old: int, timeout: float, out: dict[str, Any]) -> None:
    try:
        out["port"] = rig.wait_master(other_than=old, timeout=timeout)
        out["at"] = time.time()
    except RedisServerError:
        pass


def make_fault(rig: LocalSentinel, fault: str) -> tuple[int, float]:
    """The old master's port and the fault's time (taken just before the rig acts)."""
    at = time.time()
    old = rig.failover() if fault == "sentinel failover" else rig.kill_master()
    return old, at


def _replica_of(rig: LocalSentinel, port: int, master: int) -> bool:
    try:
        with rig.node(port) as client:
            info: Any = client.info("replication")
    except redis.RedisError:
        return False
    up = info.get("master_link_status") == "up"
    return info.get("role") == "slave" and int(info.get("master_port", 0)) == master and up


def restore(rig: LocalSentinel, master: int) -> float:
    """Restart a killed node, wait until every other node replicates ``master`` and every
    sentinel agrees on it; the seconds it took."""
    started = time.monotonic()
    for node in rig.nodes:
        if node.process is None:
            node.start()  # its port and AOF: Sentinel makes it a replica of ``master``
    for port in (node.port for node in rig.nodes if node.port != master):
        if poll(partial(_replica_of, rig, port, master), RESTORE_S, LOOK_S) is None:
            raise RuntimeError(f"node {port} is no replica of {master} after {RESTORE_S} s")
    rig.wait_master(master, timeout=RESTORE_S)
    return time.monotonic() - started


def ended_on(rig: LocalSentinel, port: int, turn_id: str) -> list[Event] | None:
    try:
        events = events_on(rig, port, turn_id)
    except redis.RedisError:
        return None
    return events if any(isinstance(e, TurnEnded) for e in events) else None
