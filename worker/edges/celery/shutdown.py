"""Graceful shutdown of a ``dres worker`` (docs/faults.md): running chunks hand over at once.

Celery's warm shutdown (SIGTERM, a deploy; or the first Ctrl-C) stops consuming and waits for every
running task to return: a chunk mid-step would keep its turn until its step or its soft limit ends.
Here the main process, as the shutdown begins, nudges each pool child (``SIGUSR2``); a child
running a chunk raises ``Shutdown`` at its next safe point (never between a tool's side effect and
its ``tool_done``) and hands the turn to its next chunk as a soft limit would: recorded, then sent,
so another worker picks it up while this one exits. An idle child only notes the nudge.

Each child also takes Celery's soft limit only while a task runs in it (``task_prerun`` to
``task_postrun``): a late one, for a job that ended while the main process could not read its
result (a broker reconnect holds its event loop), is dropped instead of raised into the child's
pool loop, where it garbles the result pipe and takes the whole worker down
(``worker.engine.tools.guard``).

Under the gevent pool (``hand_greenlets_over_on_shutdown``) the chunks are greenlets of the main
process itself: the shutdown throws ``Shutdown`` into each running one
(``worker.edges.celery.greenlets``), and Celery's warm shutdown then waits for their hand-overs.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from billiard.process import active_children
from celery import signals

from worker.edges.celery.greenlets import GreenletInterrupts
from worker.engine.tools.guard import NUDGE, DeferSignals


def _arm_child(**_: Any) -> None:
    """In each new pool child: the nudge must never reach the default action (which kills), and
    a soft limit counts only while a task runs."""
    DeferSignals().arm()
    DeferSignals.tasks_only()


def _task_started(**_: Any) -> None:
    DeferSignals.task_started()


def _task_ended(**_: Any) -> None:
    DeferSignals.task_ended()


def _pool_pids(worker: Any) -> list[int]:
    """The pool children's pids: the pool's own list, else every live child of this process."""
    processes = getattr(getattr(getattr(worker, "pool", None), "_pool", None), "_pool", None)
    if processes is None:
        processes = active_children()
    return [p.pid for p in processes if p.pid]


def hand_over_on_shutdown() -> None:
    """Connect the receivers; call once in the worker's main process before it starts."""
    workers: list[Any] = []

    def remember(sender: Any = None, **_: Any) -> None:
        workers.append(sender)

    def nudge_children(**_: Any) -> None:
        # Runs in the main process's signal handler: no logging here (its locks may be held).
        for worker in workers:
            for pid in _pool_pids(worker):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, NUDGE)

    signals.worker_process_init.connect(_arm_child, weak=False)
    signals.task_prerun.connect(_task_started, weak=False)
    signals.task_postrun.connect(_task_ended, weak=False)
    signals.worker_init.connect(remember, weak=False)
    signals.worker_shutting_down.connect(nudge_children, weak=False)


def _hand_greenlets_over(**_: Any) -> None:
    GreenletInterrupts.shut_down()


def hand_greenlets_over_on_shutdown() -> None:
    """Under the gevent pool: connect the receiver; call once before the worker starts."""
    signals.worker_shutting_down.connect(_hand_greenlets_over, weak=False)
