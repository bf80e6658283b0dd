"""Which workers are alive: each ``dres worker`` says so every few seconds, ``GET /healthz`` and
``dres watch`` count the ones seen lately (docs/http-api.md, docs/commands.md).

One sorted set (``keys.workers``), a member per worker scored by the ms it was last seen. A beat
is one round trip of two single-key commands: its own score, and the trim of the members not seen
for ``SEEN_MS`` (a worker that died without leaving), so the set holds about one member per live
worker whatever has come and gone. A worker stopping cleanly leaves at once (``leave``). One key
touched only by single-key commands: a Redis Cluster keeps it on one master, as ``active_turns``.

The scores are each worker's own clock and the count is the reader's: clocks a few seconds apart
only move the edge of the ``SEEN_MS`` window, which is six beats wide.
"""

from __future__ import annotations

from ledger import keys
from ledger.store import Client

#: seconds between a worker's beats
BEAT_S = 5.0
#: a worker is counted while its last beat is at most this old (ms)
SEEN_MS = 30_000


def window(now_ms: int) -> tuple[int, str]:
    """The scores of the workers seen lately at ``now_ms`` (a ``ZCOUNT``'s min and max)."""
    return now_ms - SEEN_MS, "+inf"


class Presence:
    """One worker's beats (``beat``, ``leave``) and the count of all (``count``) on ``client``.
    A single attempt each, no retry: the next beat tries again, a count fails as its caller's
    other reads do."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def beat(self, worker_id: str, now_ms: int) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.zadd(keys.workers(), {worker_id: now_ms})
        pipe.zremrangebyscore(keys.workers(), "-inf", f"({now_ms - SEEN_MS}")
        pipe.execute()

    def leave(self, worker_id: str) -> None:
        self.client.zrem(keys.workers(), worker_id)

    def count(self, now_ms: int) -> int:
        """Workers seen in the last ``SEEN_MS``."""
        low, high = window(now_ms)
        return int(self.client.zcount(keys.workers(), low, high))
