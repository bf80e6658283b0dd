"""Celery's prefork pool, with a workaround for a Celery/kombu mismatch that takes a worker down
when its broker connection is lost twice in quick succession (CONTRACT §7.13: a worker rides a
store fault out in the same process).

Seen with Celery 5.7.0, kombu 5.7.0 and billiard 4.3.2. When the event loop sees a pool child exit
(its sentinel readable), ``AsynPool._event_process_exit`` untracks it (``proc._sentinel_poll =
None``) and maintains the pool; a child that is not reapable yet (the sentinel is readable a
moment before ``waitpid`` returns: 2 in 200 SIGTERMed children here) stays in the pool's list
until the next maintenance, up to 5 s later. A consumer that restarts meanwhile (a broker
connection lost: Celery terminates the chunks that run, so children exit at each one) registers
the pool again, and ``_track_child_process`` hands that child's ``None`` to ``hub.add_reader``.
kombu 5.7.0's ``fileno(None)`` raises ``ValueError`` (celery/kombu#2623, which expected Celery to
catch it), while Celery 5.7.0's ``iterate_file_descriptors_safely`` catches only ``OSError`` and
``AttributeError`` (what ``fileno(None)`` raised before): "Unrecoverable error:
ValueError('file descriptor is None')", and the worker shuts down.

Here a child already untracked is not tracked again: it has exited, and the next maintenance
(a timer, every 5 s) reaps and replaces it, as kombu's earlier ``AttributeError`` left it to.
Test: ``tests/integration/test_worker_pool.py`` (on real pool processes) fails without this.
"""

from __future__ import annotations

from typing import Any

from celery.concurrency import asynpool, prefork

#: the pool's class path, for Celery's ``worker_pool``
POOL = f"{__name__}:TaskPool"


class AsynPool(asynpool.AsynPool):  # type: ignore[misc]  # celery ships no types
    def _track_child_process(self, proc: Any, hub: Any) -> None:
        if getattr(proc, "_sentinel_poll", 0) is None:  # untracked: its exit was seen
            return
        super()._track_child_process(proc, hub)


class TaskPool(prefork.TaskPool):  # type: ignore[misc]  # celery ships no types
    Pool = AsynPool
