"""One event appended to each of many turns in one round trip (``append_each``).

A process running many chunks at once (a gevent worker, docs/deploy.md) writes the buffered
text of every run whose window ended together instead of a round trip per run: each append is
the same fenced XADD as ``Ledger.append`` (the run's next stream id, NOMKSTREAM), sent in one
pipeline. Only the appends the pipeline made are taken as made; any other (refused, the stream
gone, Redis away, the reply lost) is left for ``Ledger.append`` to make alone: it sends the same
stream id, so an append that landed unseen is found there, never repeated.

On a Redis Cluster the turns' streams live on different nodes: the same pipeline is a
``ClusterPipeline``, which sends each node the appends of the slots it owns, one pipeline per node
(each turn's keys are one slot), written to every node before any reply is read. An append it
did not make (a slot that moved mid-way, a node away) is likewise left for ``Ledger.append``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from ledger.codec import FIELD, encode, text
from ledger.events import Event
from ledger.lease import Lease
from ledger.store import Ledger, spends_tokens

#: an append's outcome: its stream id, or why the pipeline did not make it (None: not tried)
Made = str | Exception | None


def append_each(ledger: Ledger, items: Sequence[tuple[Event, Lease]]) -> list[Made]:
    """Append each ``(event, lease)`` (one per turn) in one round trip: for each, its stream id
    (the lease moved on, as ``Ledger.append`` moves it) or what kept it from being made, which
    the caller hands to ``Ledger.append``."""
    if not items:
        return []
    # a model_done with usage moves the turn's totals with it: only Ledger.append does that
    if any(spends_tokens(event) for event, _ in items):
        return [None] * len(items)
    pipe = ledger.client.pipeline(transaction=False)
    for event, lease in items:
        payload = encode(event, lease.opened)
        pipe.execute_command("XADD", lease.stream, "NOMKSTREAM", lease.next_id(), FIELD, payload)
    try:
        replies: list[Any] = pipe.execute(raise_on_error=False)
    except (redis.RedisError, RedisClusterException) as e:
        # Redis away, a cluster's node or slot map in flux: some may have landed, and each is
        # sent again alone, at its id, riding out the outage as any append does
        return [e] * len(items)
    made: list[Made] = []
    for (event, lease), reply in zip(items, replies, strict=True):
        sid = lease.next_id()
        if isinstance(reply, Exception) or reply is None or text(reply) != sid:
            made.append(reply if isinstance(reply, Exception) else None)
            continue
        lease.seq += 1
        lease.last = (event.event_id, sid)
        made.append(sid)
    return made
