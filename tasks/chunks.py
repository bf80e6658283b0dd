"""The chunk tasks: thin Celery adapters over the lifecycle service's chunk path.

A message carries ids only; ``Lifecycle.run_chunk`` claims the pending run, runs it and records
how it ended, or hands the turn to its next chunk at the soft limit. One task name per mode, so
that the time limits are those the worker's own settings give that mode
(``worker.edges.celery.app``, ``worker.edges.celery.names``).
"""

from __future__ import annotations

import threading
from functools import cache
from typing import Any

import structlog
from celery import Task, current_app, shared_task
from celery.exceptions import SoftTimeLimitExceeded

from worker.base.settings import get_settings
from worker.edges.celery.names import CHUNK_TASK, CHUNK_TASK_BACKGROUND
from worker.edges.runtime import Runtime

log = structlog.get_logger("dres.tasks")


#: the process's first chunks build its runtime one at a time (under gevent, many start at once)
_building = threading.Lock()


def runtime() -> Runtime:
    with _building:
        return _runtime()


@cache
def _runtime() -> Runtime:
    # on the pool ``dres worker`` named before its pool started (prefork's when none did)
    rt = Runtime.for_chunks(get_settings(), current_app._get_current_object())
    rt.registry  # noqa: B018  # built once: its tool sources may wait (an MCP server's list)
    return rt


def _soft_limit_s(task: Task) -> float | None:
    """The chunk's soft limit as Celery reads it: the message's, else the task's own (the
    worker's settings, ``worker.edges.celery.app``'s task annotations)."""
    limits = task.request.timelimit or (None, None)
    soft: float | None = limits[1] or task.soft_time_limit
    return soft


def _run(task: Task, turn_id: Any, run_id: Any) -> str:
    if not isinstance(turn_id, str) or not isinstance(run_id, str) or not turn_id or not run_id:
        log.error("rejected a chunk message with bad ids", turn_id=turn_id, run_id=run_id)
        return "bad-message"
    rt = runtime()
    interrupts = (SoftTimeLimitExceeded,)
    loop = rt.loop(turn_id, interrupts=interrupts)
    # the soft limit lands from here on: the pool's (prefork), or the run's own timer (gevent)
    with loop.guard.limited(_soft_limit_s(task)):
        return rt.lifecycle.run_chunk(
            turn_id,
            run_id,
            loop,
            interrupts=interrupts,
            redelivered=bool((task.request.delivery_info or {}).get("redelivered")),
        )


@shared_task(bind=True, name=CHUNK_TASK)
def run_chunk(self: Task, turn_id: Any, run_id: Any) -> str:
    return _run(self, turn_id, run_id)


@shared_task(bind=True, name=CHUNK_TASK_BACKGROUND)
def run_chunk_background(self: Task, turn_id: Any, run_id: Any) -> str:
    return _run(self, turn_id, run_id)
