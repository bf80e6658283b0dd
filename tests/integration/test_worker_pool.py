"""dres's prefork pool (``worker.edges.celery.pool``) against Celery's own, on real pool processes.
A consumer restart (a lost broker connection) registers the pool with the event loop again; a
child that died must neither end the worker nor leave a result reader on an fd that is another's
by then."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import celery
import kombu
import pytest
from celery import Celery
from celery.concurrency import prefork as celery_prefork
from kombu.asynchronous import Hub

from worker.edges.celery import pool as prefork

#: seconds a pool may take to accept a job, or to reap a killed child
SETTLE_S = 10.0


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


def spin(hub: Hub, until: Any, what: str) -> None:
    """Run the hub's loop, as the consumer does, until ``until()``."""
    deadline = time.monotonic() + SETTLE_S
    while not until():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        hub.run_once()


# -- a child untracked but not reaped yet ---------------------------------------------------


def restart_with_an_untracked_child(task_pool: Any, hub: Hub) -> None:
    """What the loop does when it sees the child exit a moment before it can be reaped (the
    child stays in the pool's list, untracked), then what a consumer restart does."""
    asyn = task_pool._pool
    [child] = asyn._pool
    asyn._untrack_child_process(child, hub)
    task_pool.register_with_event_loop(hub)


def test_celerys_own_pool_ends_the_consumer_on_an_untracked_child(app: Celery) -> None:
    """The upstream hazard on the versions in use (a tripwire, not a pin)."""
    with started(celery_prefork.TaskPool, app) as (task_pool, hub):
        try:
            restart_with_an_untracked_child(task_pool, hub)
        except ValueError as e:
            assert "file descriptor is None" in str(e)
        else:
            pytest.skip(f"celery {celery.__version__} / kombu {kombu.__version__} pass it over")


def test_dres_pool_passes_over_an_untracked_child_and_keeps_it(app: Celery) -> None:
    with started(prefork.TaskPool, app) as (task_pool, hub):
        restart_with_an_untracked_child(task_pool, hub)  # nothing escapes
        assert task_pool._pool._pool, "the child stays for the next maintenance to reap"


# -- a dead child's result pipe left in the index ---------------------------------------------


@contextmanager
def hole() -> Iterator[list[int]]:
    """Two fds taken before the pool starts, so below its own; freed (by
    ``a_child_died_mid_job``) before its child dies, the child's replacement pipes take them
    first, and the dead child's result pipe's number is left to whatever comes next (else the
    replacement's own result pipe would take it over, which hides the hazard)."""
    fds = list(os.pipe())
    try:
        yield fds
    finally:
        for fd in fds:  # those not freed already
            os.close(fd)


@contextmanager
def a_child_died_mid_job(task_pool: Any, hub: Hub, below: list[int]) -> Iterator[int]:
    """A child SIGKILLed while it runs a job, reaped by the loop; its result pipe's fd number
    then taken by another pipe (as a new child's, or a socket, takes it); then a consumer
    restart. Yields that fd."""
    asyn = task_pool._pool
    accepted: list[int] = []
    task_pool.apply_async(time.sleep, (30,), accept_callback=lambda pid, _: accepted.append(pid))
    spin(hub, lambda: accepted, "the job accepted")
    [child] = asyn._pool
    result_fd = child.outqR_fd
    while below:
        os.close(below.pop())
    os.kill(child.pid, signal.SIGKILL)
    spin(hub, lambda: child not in asyn._pool, "the child reaped")
    assert asyn._fileno_to_outq.get(result_fd) is child, "the pool kept the dead child's pipe"
    stand_in = False
    try:
        os.fstat(result_fd)  # already another's (the new child's): nothing to stand in for
    except OSError:
        reader, writer = os.pipe()  # the lowest fds free: one of them may be result_fd itself
        if reader != result_fd:
            os.dup2(reader, result_fd)  # (over the writer, if that took it)
            os.close(reader)
        if writer != result_fd:
            os.close(writer)
        stand_in = True
    try:
        task_pool.register_with_event_loop(hub)
        yield result_fd
    finally:
        if stand_in:
            hub.remove(result_fd)
            os.close(result_fd)


def reads_results(asyn: Any, hub: Hub, fd: int) -> bool:
    """The loop would read a child's result from ``fd`` (the result handler, rebuilt at each
    registration, is known by its code)."""
    callback = hub.readers.get(fd, (None, ()))[0]
    return getattr(callback, "__code__", None) is asyn.handle_result_event.__code__


def test_celerys_own_pool_reads_results_from_an_fd_that_is_another_s(app: Celery) -> None:
    """The upstream hazard on the versions in use (a tripwire, not a pin): the loop would read
    a result from that fd, and block there when it carries none."""
    with (
        hole() as below,
        started(celery_prefork.TaskPool, app) as (task_pool, hub),
        a_child_died_mid_job(task_pool, hub, below) as fd,
    ):
        if not reads_results(task_pool._pool, hub, fd):
            pytest.skip(f"celery {celery.__version__} drops a dead child's result pipe")


def test_dres_pool_reads_results_only_from_its_children(app: Celery) -> None:
    with (
        hole() as below,
        started(prefork.TaskPool, app) as (task_pool, hub),
        a_child_died_mid_job(task_pool, hub, below) as fd,
    ):
        asyn = task_pool._pool
        assert not reads_results(asyn, hub, fd)
        assert set(asyn._fileno_to_outq) == {child.outqR_fd for child in asyn._pool}
