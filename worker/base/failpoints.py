"""Failpoints: named places where the chaos runner injects a crash, a soft limit or a lost message.

Off unless the worker runs with ``DRES_FAILPOINTS=1``; then each ``hit(name)`` asks Redis whether
the one fault armed for this trial (``dres:chaos:fault``: point, action, skip) fires here now.
The fault fires once, on the (skip + 1)-th hit of its point. Actions:
- ``kill_child``: SIGKILL this process (a pool child killed mid-task);
- ``kill_worker``: SIGKILL the whole worker's process group;
- ``soft_limit``: SIGUSR1 to this process, as Celery's soft time limit is delivered;
- anything else (``drop``, ``duplicate``) is returned for the caller to act on.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from ledger import keys
from ledger.codec import text


class Failpoints:
    def __init__(self, redis: Any = None) -> None:
        #: None: failpoints are off and ``hit`` costs nothing
        self.redis = redis

    def hit(self, point: str) -> str | None:
        if self.redis is None:
            return None
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
        if action == "kill_child":
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "kill_worker":
            os.killpg(os.getpgid(0), signal.SIGKILL)
        elif action == "soft_limit":
            os.kill(os.getpid(), signal.SIGUSR1)
        return action


OFF = Failpoints()
