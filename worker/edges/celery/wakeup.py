"""A consumer that polls without an event loop (the gevent pool's) asks Redis for its next message
as soon as an acknowledgement frees a prefetch slot, not at its next poll: kombu's Redis transport
with one fix, composed into ``worker.edges.celery.transport``'s channels and transports.

Seen with kombu 5.7.0 and Celery 5.7.0 (bench row 4g: a quarter of the chunk boundaries of a
``dres worker -P gevent -c 2`` waited ~1.7 s; every one with ``-c 1``). Celery's gevent pool
consumes in ``synloop``: ``drain_events(timeout=2.0)``, whose ``MultiChannelPoller.get`` sends a
BRPOP at the poll's start only if the channel's QoS has room (``can_consume``: prefetch is the
pool's size, ``worker_prefetch_multiplier`` 1, and a chunk is acknowledged late), then waits up
to 2 s on the sockets. A chunk cut by its soft limit sends its successor's message within its
hand-over step, then ends and is acknowledged. When the poll began while every slot was held
(the ending chunk's among them: ``-c 1`` always; ``-c 2`` whenever the successor's message was
received before its predecessor's acknowledgement), no BRPOP is pending, and the slot the
acknowledgement frees is seen only when that poll times out: the successor's message waits
2 s minus the chunk's own time (0.3 s soft limit: ~1.7 s) between ``run_ended`` and the next
``run_started``. A prefork worker has no such wait: its hub re-checks the credit on every tick.
The same wait between tasks was reported as celery/celery#7718 ("long latency with redis single
worker with no prefetch and acks late") and #4378; celery/celery#10263 fixed its AMQP side (an
acknowledgement deferred to the next loop) in Celery 5.7, but with Redis the consumer must ask
again, and nothing tells it to.

Here the transport's poller (``WakingPoller``) also watches a pipe of its own while it polls
without an event loop, and the channel's QoS (``WakingQoS``) writes a byte to it when an
acknowledgement or rejection leaves it room: the poll returns at once, and the loop's
next ``drain_events`` sends the BRPOP the slot allows. Which worker then takes the next chunk is
the broker's choice, as before (another host may: a second delivery of a run does nothing). On
an event loop (prefork's hub, ``on_poll_init``) the pipe is never made: nothing changes there.
Tripwire: ``tests/integration/test_gevent_boundary.py`` (each chunk boundary of a turn on a
``dres worker -P gevent -c 1`` is under a second, where the stall is ~1.7 s every time).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from kombu.transport import redis as kombu_redis


class WakingPoller(kombu_redis.MultiChannelPoller):
    """kombu's poller, woken by ``wake`` while it polls without an event loop."""

    #: the pipe ``wake`` writes to and the poll watches (made by the first ``get``)
    _wake_r: int | None = None
    _wake_w: int | None = None
    #: polled by an event loop's hub (prefork), which re-checks the credit on every tick
    _on_event_loop = False

    def on_poll_init(self, poller: Any) -> Any:
        self._on_event_loop = True
        return _kombu(super()).on_poll_init(poller)

    def get(self, callback: Any, timeout: float | None = None) -> Any:
        if not self._on_event_loop and self._wake_r is None:
            self._wake_r, self._wake_w = os.pipe()
            os.set_blocking(self._wake_r, False)
            os.set_blocking(self._wake_w, False)
            self.poller.register(self._wake_r, self.eventflags)
        return _kombu(super()).get(callback, timeout)

    def wake(self) -> None:
        """A slot freed: end the poll under way (or the next one) at once."""
        fd = self._wake_w
        if fd is None:  # never polled here (an event loop's, or not consuming)
            return
        # full: a wake-up is pending already (closed: nothing polls here any more)
        with contextlib.suppress(OSError):
            os.write(fd, b"\0")

    def handle_event(self, fileno: int, event: int) -> Any:
        if self._wake_r is not None and fileno == self._wake_r:
            self._drain()
            # as if a message came: ``get`` returns, and the loop's next ``drain_events`` sends
            # the BRPOP the freed slot allows (``on_poll_start``)
            return None, self
        return _kombu(super()).handle_event(fileno, event)

    @property
    def fds(self) -> dict[int, Any]:
        """kombu's, and the pipe: with every BRPOP paused for want of a slot, ``get`` polls the
        pipe instead of sleeping a second."""
        fds: dict[int, Any] = super().fds
        if self._wake_r is not None and not self._on_event_loop:
            fds[self._wake_r] = None
        return fds

    def close(self) -> None:
        _kombu(super()).close()
        r, w = self._wake_r, self._wake_w
        self._wake_r = self._wake_w = None
        if r is not None:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self.poller.unregister(r)
        for fd in (r, w):
            if fd is not None:
                os.close(fd)

    def _drain(self) -> None:
        fd = self._wake_r
        try:
            while fd is not None and os.read(fd, 512):
                pass
        except OSError:  # empty (BlockingIOError), or closed
            pass


class WakingQoS(kombu_redis.QoS):
    """kombu's Redis QoS, which wakes its transport's poller whenever an acknowledgement (or a
    rejection) leaves it room: not only when it was full as it began, for the acknowledgement
    itself waits on Redis (the unacked index's entries, the message's mark), and under gevent
    the consumer may take the last free slot, and start a poll with no BRPOP, meanwhile. A wake-up
    the poller did not need costs it one more turn of its loop, no round trip."""

    def ack(self, delivery_tag: Any) -> None:
        try:
            _kombu(super()).ack(delivery_tag)
        finally:
            self._wake_if_room()

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        try:
            _kombu(super()).reject(delivery_tag, requeue=requeue)
        finally:
            self._wake_if_room()

    def _wake_if_room(self) -> None:
        if _kombu(self).can_consume():
            cycle = getattr(self.channel.connection, "cycle", None)
            if isinstance(cycle, WakingPoller):
                cycle.wake()


def waking_cycle(transport: kombu_redis.Transport) -> None:
    """Give a transport built by kombu's ``__init__`` (which makes its poller) a waking one."""
    poller: Any = WakingPoller
    _kombu(transport).cycle = poller()


def _kombu(obj: object) -> Any:
    """kombu's object as ``Any``: its methods carry no annotations (mypy's no-untyped-call)."""
    return obj
