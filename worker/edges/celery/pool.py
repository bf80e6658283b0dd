"""Celery's prefork pool, with workarounds for two hazards that end or hang a worker when its
consumer restarts after a pool child died (docs/faults.md: a worker rides a store fault out in
the same process). Seen with Celery 5.7.0, kombu 5.7.0 and billiard 4.3.2.

A consumer restarts at every lost broker connection (a Redis restart, a Sentinel failover), and
Celery then terminates the chunks that run (``acks_late``), so children die around restarts. The
restarted consumer registers the pool with its event loop again (``register_with_event_loop``),
from the pool's own records, two of which a dead child can leave wrong:

- **a child untracked but not reaped.** When the loop sees a child exit (its sentinel readable),
  ``_event_process_exit`` untracks it (``proc._sentinel_poll = None``) and maintains the pool; a
  child not reapable yet (the sentinel is readable a moment before ``waitpid`` returns: 2 in 200
  SIGTERMed children here) stays in the pool's list until the next maintenance, up to 5 s later.
  Registering it again hands ``None`` to ``hub.add_reader``: kombu 5.7.0's ``fileno(None)``
  raises ``ValueError`` (celery/kombu#2623, which expected Celery to catch it), Celery 5.7.0's
  ``iterate_file_descriptors_safely`` catches only ``OSError`` and ``AttributeError``:
  "Unrecoverable error: ValueError('file descriptor is None')", the worker shuts down. Such a
  child is not tracked again here: the next maintenance reaps and replaces it.
- **a dead child's result pipe left in the index.** A child that dies with a job written to it
  has its queues destroyed (``on_partial_read`` -> ``destroy_queues``: the sockets closed, their
  readers removed from the loop), and ``on_process_down`` then fails to drop its result pipe
  from ``_fileno_to_outq`` (``_remove_from_index`` gives up on the closed socket's ``OSError``).
  The fd number is soon another's (a new child's pipe or sentinel, a socket), and registering
  the index again puts the result reader on it: the loop then blocks in a read of a pipe that
  carries no result (the worker hangs for good; celery/celery#4185 reports hangs there), or
  takes over a new child's sentinel. Here the index is purged of children no longer in the pool
  before it is registered.

Tests: ``tests/integration/test_worker_pool.py`` drives real pool processes into each state;
Celery's own pool fails there (tripwires: a Celery that no longer does skips, saying this module
can go), dres's does not.
"""

from __future__ import annotations

from typing import Any

from celery.concurrency import asynpool, prefork

#: the pool's class path, for Celery's ``worker_pool``
POOL = f"{__name__}:TaskPool"


class AsynPool(asynpool.AsynPool):  # type: ignore[misc]  # celery ships no types
    def register_with_event_loop(self, hub: Any) -> None:
        children = set(self._pool)
        for fd, proc in list(self._fileno_to_outq.items()):
            if proc not in children:  # died and reaped: the fd may be another's now
                del self._fileno_to_outq[fd]
        super().register_with_event_loop(hub)

    def _track_child_process(self, proc: Any, hub: Any) -> None:
        if getattr(proc, "_sentinel_poll", 0) is None:  # untracked: its exit was seen
            return
        super()._track_child_process(proc, hub)


class TaskPool(prefork.TaskPool):  # type: ignore[misc]  # celery ships no types
    Pool = AsynPool
