"""Chunk messages that mark their own presence in the broker, so that the reaper's question
"is this due run's message still queued, or held by a worker?" costs one ``EXISTS`` per due run
instead of reading every queue and every unacknowledged message (O(backlog) bytes per sweep).

The mark (``ledger.keys.chunk_message``) lives in the broker's Redis and follows the message's
own life there, written and cleared by kombu's Redis transport in the transactions it already
runs:
- publishing a chunk message: ``LPUSH`` of the message and ``SET`` of its mark in one
  ``MULTI`` (one round trip, as before); a hand-over on the ledger's own server instead has
  this channel keep the message (``held``) and writes both in its own script
  (``ledger/lua/transition.lua``), after the step, in the same atomic step;
- a worker taking it (``BRPOP``, then kombu's unacked index): the mark stays, as the old look
  into the ``unacked`` hash saw a prefetched message; a redelivery (``reject(requeue=True)``,
  a dead worker's restore after the visibility timeout) puts the message back and the mark stays;
- the message's acknowledgement (the chunk ended, also one that failed before its claim, or a
  hard time limit, or a revoked run) and a reject without requeue: the unacked index's
  ``HDEL``/``ZREM`` and the mark's ``DEL`` in one round trip (no ``MULTI``: a full Redis
  refuses a transaction's deletions, ``MarkingQoS._forget``);
- the broker losing data (a restart without persistence, a failover to a replica behind):
  message and mark were written in one transaction, so they are lost together.

So a mark says "the message is in the broker" and the reaper leaves the turn waiting, as it did
for a message it found in a queue. No mark does not say "lost": a message published without one
(``rediss://`` keeps kombu's own transport, a publish batch, a worker of an older dres during a
rolling deploy) is looked for the old way, by ``CeleryDispatcher.queued_runs``, before anything
is sent again; that read costs O(backlog) but only for a due run whose mark is missing, which
is a lost message (rare) or a transport without marks.

The one way a mark outlives its message: a worker killed between kombu's ``BRPOP`` and its
write of the unacked index (a window of one round trip, where kombu itself loses the message),
or an operator's purge of a queue. The mark's TTL bounds that: after it, the old look finds the
message gone and the reaper sends it again. The TTL is never shorter than the visibility
timeout (as long as a dead worker's held message may wait before kombu restores it) nor than
``MIN_MARK_TTL_S``; a message that waits in a queue longer than that is still found by the old
look, at its cost.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import redis
import structlog
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils.json import dumps

from ledger import keys
from ledger.errors import InvalidId
from ledger.turns import Outgoing
from worker.edges.celery.names import CHUNK_TASKS

log = structlog.get_logger("dres.marks")

#: seconds a mark lives at least (its TTL is the visibility timeout when that is longer)
MIN_MARK_TTL_S = 3600


def mark_of(headers: Any) -> str | None:
    """The mark of a chunk message (Celery's headers: its task name and ``turn:run`` id);
    None for any other message."""
    if not isinstance(headers, dict) or headers.get("task") not in CHUNK_TASKS:
        return None
    turn_id, _, run_id = str(headers.get("id") or "").rpartition(":")
    if not turn_id or not run_id:
        return None
    try:
        return keys.chunk_message(turn_id, run_id)
    except InvalidId:
        return None


class MarkingQoS(kombu_redis.QoS):
    """kombu's unacked index, whose acknowledgement also deletes the message's mark."""

    def ack(self, delivery_tag: Any) -> None:
        try:
            self._forget(delivery_tag)
        finally:
            # Done here even when Redis cannot be reached (the message then stays in the unacked
            # index, and is restored after the visibility timeout, as a dead worker's): kept as
            # delivered, it held the consumer's prefetch slot for good. Under the gevent pool's
            # loop (Celery 5.7.0's ``synloop``) no BRPOP then ever ran again to find the
            # broker's connection lost: a worker whose chunk ended during an outage never took
            # another message (``tests/integration/test_store_faults.py``, under gevent).
            virtual.QoS.ack(self, delivery_tag)

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        if requeue:  # back in the queue: the mark stays
            try:
                super().reject(delivery_tag, requeue=True)
            except redis.exceptions.OutOfMemoryError:
                # A full Redis refuses the restore's transaction (its LPUSH), which raised into
                # Celery's consumer and shut the worker down (a killed pool child's message, with
                # task_reject_on_worker_lost). The message stays unacknowledged, its mark with
                # it: kombu restores it after the visibility timeout, as a dead worker's.
                log.warning("redis is full: a message to deliver again stays unacknowledged")
                virtual.QoS.ack(self, delivery_tag)
            return
        self._forget(delivery_tag)
        virtual.QoS.ack(self, delivery_tag)

    def _forget(self, delivery_tag: Any) -> None:
        """Drop the message from the unacked index and its mark: one round trip, not a
        ``MULTI``. Redis refuses every command queued in a ``MULTI`` while it is at
        ``maxmemory`` (under ``noeviction``), also these deletions; kombu's own ack, refused so,
        raised into Celery's consumer, which shut the worker down when a full Redis stopped a
        turn. Outside a transaction deletions pass, and free memory. Cut between them: the
        payload goes first, so a restore finds an index entry with no message (and drops it);
        a mark left behind is one the reaper outlives (its TTL, this module's docstring)."""
        message = self._delivered.get(delivery_tag)
        mark = mark_of(getattr(message, "headers", None))
        with self.channel.conn_or_acquire() as client:
            pipe = client.pipeline(transaction=False)
            pipe.hdel(self.unacked_key, delivery_tag)
            pipe.zrem(self.unacked_index_key, delivery_tag)
            if mark is not None:
                pipe.delete(mark)
            pipe.execute()


#: while ``held()`` runs: what this context's channels were asked to publish, kept unsent (None
#: for a message this transport would not send marked, as one command of its own)
_held: ContextVar[list[Outgoing | None] | None] = ContextVar("dres_held_messages", default=None)


@contextmanager
def held() -> Iterator[list[Outgoing | None]]:
    """Publishing in this context keeps each message, as the transport would have written it,
    instead of sending it: a hand-over then sends its successor's within its own atomic step
    (``CeleryDispatcher.prepare``). Only ``MarkingChannel`` keeps messages: ask it first."""
    kept: list[Outgoing | None] = []
    token = _held.set(kept)
    try:
        yield kept
    finally:
        _held.reset(token)


class MarkingChannel(kombu_redis.Channel):
    """A Redis channel whose chunk messages carry their mark (this module's docstring)."""

    QoS = MarkingQoS

    @property
    def mark_ttl_s(self) -> int:
        return int(max(MIN_MARK_TTL_S, self.visibility_timeout or 0))

    def marks_messages(self) -> bool:
        """Marks are kept only where acknowledgements are (kombu's ack emulation, its default):
        without it a message leaves the broker when taken, and nothing would clear its mark."""
        return bool(self.ack_emulation)

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        mark = mark_of(message.get("headers")) if self.marks_messages() else None
        batched = kwargs.get("_publish_batch") is not None
        kept = _held.get()
        if mark is None or batched or (self._expires and queue in self._expires):
            if kept is not None:
                kept.append(None)  # not one this transport sends with its mark: not kept
                return
            super()._put(queue, message, **kwargs)  # unmarked: the reaper's old look finds it
            return
        key = self._q_for_pri(queue, self._get_message_priority(message, reverse=False))
        if kept is not None:
            kept.append(Outgoing(key, dumps(message), mark, self.mark_ttl_s))
            return
        with self.conn_or_acquire() as client:
            pipe = client.pipeline()  # MULTI: the message and its mark exist together
            pipe.lpush(key, dumps(message))
            pipe.set(mark, 1, ex=self.mark_ttl_s)
            pipe.execute()
