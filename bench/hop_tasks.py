"""Plain Celery tasks, the baselines of rows 4 and 5, run by the dres worker itself.

``DRES_CELERY_INCLUDE=bench.hop_tasks`` makes a dres worker import this module, so these tasks
run on the same app (same broker, ``acks_late``, prefetch 1, logging), the same prefork pool and
the same processes as the chunk tasks they are compared with.

- ``bench.hop``: a self-chaining task. Hop i takes ``time.time()`` at its first line, and, unless
  it is the last, again just before ``apply_async`` of hop i+1; both go to a Redis hash *after*
  the enqueue. The hop latency is start(i+1) - end(i): a plain Celery task-to-task handoff.
- ``bench.soft_hop``: the same chain, but each hop sleeps until its soft time limit cuts it and
  sends the next hop from the ``SoftTimeLimitExceeded`` handler (end taken there): what Celery
  itself costs to chain from a soft limit, with nothing of dres in it.
- ``bench.noop``: does nothing but count itself (one INCR); the task that brings the count to
  ``total`` stores its finishing time, so a producer can time N tasks end to end.
"""

from __future__ import annotations

import time
from typing import Any

import redis
from celery import Task, shared_task
from celery.exceptions import SoftTimeLimitExceeded

_clients: dict[str, redis.Redis] = {}


def _redis(task: Task) -> redis.Redis:
    url: str = task.app.conf.dres_settings.redis_url
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url)
    return _clients[url]


@shared_task(bind=True, name="bench.hop", ignore_result=True)
def hop(self: Task, key: str, i: int, last: int, queue: str) -> None:
    start = time.time()
    fields: dict[str, Any] = {f"start:{i}": repr(start)}
    if i < last:
        end = time.time()
        self.apply_async((key, i + 1, last, queue), queue=queue)
        fields[f"end:{i}"] = repr(end)
    else:
        fields["done"] = repr(time.time())
    _redis(self).hset(key, mapping=fields)


@shared_task(bind=True, name="bench.noop", ignore_result=True)
def noop(self: Task, key: str, total: int) -> None:
    r = _redis(self)
    if r.incr(key) == total:
        r.set(f"{key}:done", repr(time.time()))


@shared_task(bind=True, name="bench.soft_hop", ignore_result=True)
def soft_hop(self: Task, key: str, i: int, last: int, queue: str, soft: float, hard: float) -> None:
    start = time.time()
    fields: dict[str, Any] = {f"start:{i}": repr(start)}
    if i < last:
        try:
            time.sleep(hard)  # cut by the soft limit, as a chunk is
        except SoftTimeLimitExceeded:
            end = time.time()
            self.apply_async(
                (key, i + 1, last, queue, soft, hard),
                queue=queue,
                soft_time_limit=soft,
                time_limit=hard,
            )
            fields[f"end:{i}"] = repr(end)
    else:
        fields["done"] = repr(time.time())
    _redis(self).hset(key, mapping=fields)
