"""Failpoints: named places where the chaos runner injects a crash, a soft limit, a lost message or
a store fault.

Off unless the worker runs with ``DRES_FAILPOINTS=1``; then each ``hit(name)`` asks Redis whether
the one fault armed for this trial (``dres:chaos:fault``: point, action, skip) fires here now.
The fault fires once, on the (skip + 1)-th hit of its point. Actions:
- ``kill_child``: SIGKILL this process (a pool child killed mid-task);
- ``kill_worker``: SIGKILL the whole worker's process group;
- ``soft_limit``: SIGUSR1 to this process, as Celery's soft time limit is delivered;
- ``sigstop``: SIGSTOP this process (a worker paused mid-step: the runner sends SIGCONT later);
- ``redis_restart``, ``redis_pause``: the runner takes redis-server away once it sees ``fired``;
  this process waits here until Redis stops answering (at most ``OUTAGE_WAIT_S``), so that what
  follows the point — a ``tool_done`` after a write's effect, a hand-over's message — meets the
  outage;
- ``failover``: the runner fails the Sentinel-monitored master over once it sees ``fired`` (by
  ``SENTINEL FAILOVER`` or a SIGKILL) and then marks the fault ``struck``, on the old master
  while it still runs and on the new one; this process waits here until it reads that mark or
  Redis stops answering (at most ``FAILOVER_WAIT_S``), so that what follows the point is sent
  during the failover, not before it;
- anything else (``drop``, ``duplicate``) is returned for the caller to act on.
A failpoint that cannot reach Redis (a store fault under way) does not fire: its read is the
runner's business, never a new failure of the worker's.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ledger import keys
from ledger.codec import text
from ledger.store import STORE_ERRORS

#: the actions whose fault the runner makes on Redis itself
STORE_ACTIONS = frozenset({"redis_restart", "redis_pause"})
#: seconds a store fault's point waits for Redis to stop answering before it goes on anyway
OUTAGE_WAIT_S = 5.0
#: seconds a probe of Redis may take before Redis counts as not answering (a paused server)
PROBE_S = 0.2
#: the action whose fault the runner makes by failing the master over
FAILOVER = "failover"
#: seconds a failover's point waits for the runner's mark (a Sentinel may wait twice its
#: failover timeout before it fails a master over again) before it goes on anyway
FAILOVER_WAIT_S = 20.0
#: seconds between two looks at the mark
LOOK_S = 0.01


class Failpoints:
    def __init__(self, redis: Any = None) -> None:
        #: None: failpoints are off and ``hit`` costs nothing
        self.redis = redis

    def hit(self, point: str) -> str | None:
        if self.redis is None:
            return None
        try:
            action = self._fires(point)
        except STORE_ERRORS:
            return None
        if action == "kill_child":
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "kill_worker":
            os.killpg(os.getpgid(0), signal.SIGKILL)
        elif action == "soft_limit":
            os.kill(os.getpid(), signal.SIGUSR1)
        elif action == "sigstop":
            os.kill(os.getpid(), signal.SIGSTOP)
        elif action in STORE_ACTIONS:
            self._await_outage()
        elif action == FAILOVER:
            self._await_strike()
        return action

    def armed(self, point: str) -> bool:
        """Is a fault armed at ``point``, whether or not this hit fires it? (None of its hits
        is counted.) False with failpoints off, at no cost."""
        if self.redis is None:
            return False
        try:
            armed = self.redis.hget(keys.chaos_fault(), "point")
        except STORE_ERRORS:
            return False
        return armed is not None and text(armed) == point

    def _fires(self, point: str) -> str | None:
        """The armed action if it fires at this hit of ``point`` (recorded as ``fired``)."""
        key = keys.chaos_fault()
        armed = self.redis.hget(key, "point")
        if armed is None or text(armed) != point:
            return None
        hits = self.redis.hincrby(key, "hits", 1)
        skip = int(text(self.redis.hget(key, "skip") or b"0"))
        if hits != skip + 1:
            return None
        action = text(self.redis.hget(key, "action") or b"")
        self.redis.hset(key, "fired", point)
        return action

    def _await_outage(self) -> None:
        """Probe Redis on a connection of its own, with a short timeout and no retry, until it
        stops answering: refused (killed) or silent (paused)."""
        pool = self.redis.connection_pool
        kwargs = {
            **pool.connection_kwargs,
            "socket_timeout": PROBE_S,
            "socket_connect_timeout": PROBE_S,
            "retry": Retry(NoBackoff(), 0),
        }
        probe = redis.Redis(
            connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
        )
        deadline = time.monotonic() + OUTAGE_WAIT_S
        try:
            while time.monotonic() < deadline:
                try:
                    probe.ping()
                except STORE_ERRORS:
                    return
                time.sleep(LOOK_S)
        finally:
            probe.connection_pool.disconnect()

    def _await_strike(self) -> None:
        """Until the runner's ``struck`` mark reads through this process's own client (which
        follows the failover), or that client cannot reach a master (the old one killed)."""
        deadline = time.monotonic() + FAILOVER_WAIT_S
        while time.monotonic() < deadline:
            try:
                if self.redis.hexists(keys.chaos_fault(), "struck"):
                    return
            except STORE_ERRORS:
                return
            time.sleep(LOOK_S)


OFF = Failpoints()
