"""The chunk tasks: thin Celery adapters over the lifecycle service's chunk path.

A message carries ids only; ``Lifecycle.run_chunk`` claims the pending run, runs it and records
how it ended, or hands the turn to its next chunk at the soft limit. One task name per mode, so
that the time limits are those the worker's own settings give that mode
(``worker.edges.celery.app``, ``worker.edges.celery.names``).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import structlog
from celery import Task, current_app, shared_task
from celery.exceptions import SoftTimeLimitExceeded

from worker.base.settings import get_settings
from worker.edges.celery.names import CHUNK_TASK, CHUNK_TASK_BACKGROUND
from worker.edges.runtime import Runtime

log = structlog.get_logger("dres.tasks")


@cache
def runtime() -> Runtime:
    return Runtime.from_settings(get_settings(), current_app._get_current_object())


def _run(task: Task, turn_id: Any, run_id: Any) -> str:
    if not isinstance(turn_id, str) or not isinstance(run_id, str) or not turn_id or not run_id:
        log.error("rejected a chunk message with bad ids", turn_id=turn_id, run_id=run_id)
        return "bad-message"
    rt = runtime()
    interrupts = (SoftTimeLimitExceeded,)
    return rt.lifecycle.run_chunk(
        turn_id,
        run_id,
        rt.loop(turn_id, interrupts=interrupts),
        interrupts=interrupts,
        redelivered=bool((task.request.delivery_info or {}).get("redelivered")),
    )


@shared_task(bind=True, name=CHUNK_TASK)
def run_chunk(self: Task, turn_id: Any, run_id: Any) -> str:
    return _run(self, turn_id, run_id)


@shared_task(bind=True, name=CHUNK_TASK_BACKGROUND)
def run_chunk_background(self: Task, turn_id: Any, run_id: Any) -> str:
    return _run(self, turn_id, run_id)
