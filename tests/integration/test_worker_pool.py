"""dres's prefork pool (``worker.edges.prefork``) against Celery's own, on real pool processes: a
consumer restart (a lost broker connection) registers the pool with the event loop again, and
a child whose exit the loop has seen but the pool has not reaped yet must not end the worker."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import celery
import kombu
import pytest
from celery import Celery
from celery.concurrency import prefork as celery_prefork
from kombu.asynchronous import Hub

from worker.edges import prefork


@pytest.fixture
def app() -> Celery:
    return Celery("pool-test", set_as_current=False)


@contextmanager
def started(pool_cls: Any, app: Celery) -> Iterator[tuple[Any, Hub]]:
    """A pool of one real child, as a worker's consumer starts it, registered with a hub."""
    task_pool = pool_cls(limit=1, app=app, threads=False, initargs=(app, "pool-test"))
    task_pool.start()
    hub = Hub()
    try:
        task_pool.register_with_event_loop(hub)
        yield task_pool, hub
    finally:
        task_pool.terminate()
        hub.close()


def restart_with_an_untracked_child(task_pool: Any, hub: Hub) -> None:
    """What the loop does when it sees the child exit a moment before it can be reaped (the
    child stays in the pool's list, untracked), then what a consumer restart does."""
    asyn = task_pool._pool
    [child] = asyn._pool
    asyn._untrack_child_process(child, hub)
    task_pool.register_with_event_loop(hub)


def test_celerys_own_pool_ends_the_consumer_on_an_untracked_child(app: Celery) -> None:
    """The upstream hazard on the versions in use (a tripwire, not a pin): versions that agree
    again skip here, saying that worker.edges.prefork can go."""
    with started(celery_prefork.TaskPool, app) as (task_pool, hub):
        try:
            restart_with_an_untracked_child(task_pool, hub)
        except ValueError as e:
            assert "file descriptor is None" in str(e)
        else:
            pytest.skip(f"celery {celery.__version__} / kombu {kombu.__version__} pass it over")


def test_dres_pool_passes_over_an_untracked_child_and_keeps_the_others(app: Celery) -> None:
    with started(prefork.TaskPool, app) as (task_pool, hub):
        restart_with_an_untracked_child(task_pool, hub)  # nothing escapes
        assert task_pool._pool._pool, "the child stays for the next maintenance to reap"
