"""A run's interrupts under gevent (worker/edges/celery/greenlets.py), with real greenlets and
gevent's hub in this process (no monkey patching: the runs wait in ``gevent.sleep``): where each
interrupt lands, what waits for a critical section's end, what a lifted section lets through,
what an answer drops, and that one run's interrupt never reaches another run."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import gevent
import pytest

from worker.base.errors import Shutdown, SoftLimit, TurnCancelled
from worker.edges.celery.greenlets import GreenletInterrupts

#: seconds a run waits when nothing should interrupt it
LONG_S = 5.0


@pytest.fixture(autouse=True)
def no_shutdown() -> Iterator[None]:
    yield
    GreenletInterrupts.draining = False
    GreenletInterrupts.running_now.clear()
    GreenletInterrupts.tasks_now.clear()


def run(
    body: Callable[[GreenletInterrupts, list[str]], None], soft_limit_s: float | None = None
) -> tuple[GreenletInterrupts, list[str], gevent.Greenlet]:
    """``body(guard, notes)`` in its own greenlet, inside its task's and its run's windows; the
    interrupt that ended it is noted last."""
    guard, notes = GreenletInterrupts(), []

    def chunk() -> None:
        try:
            with guard.limited(soft_limit_s), guard.running():
                body(guard, notes)
        except (SoftLimit, TurnCancelled, Shutdown) as e:
            notes.append(type(e).__name__)

    return guard, notes, gevent.spawn(chunk)


def test_dres_soft_limit_lands_in_a_wait() -> None:
    _, notes, g = run(lambda guard, notes: gevent.sleep(LONG_S), soft_limit_s=0.05)
    g.join(2)
    assert notes == ["SoftLimit"]


def test_stop_inside_a_critical_section_is_raised_at_its_end_not_between_effect_and_record() -> (
    None
):
    def write(guard: GreenletInterrupts, notes: list[str]) -> None:
        with guard:
            notes.append("effect")
            gevent.sleep(0.2)  # the interrupt comes meanwhile
            notes.append("recorded")
        notes.append("after the section")

    guard, notes, g = run(write)
    gevent.sleep(0.05)
    guard.stop()
    g.join(2)
    assert notes == ["effect", "recorded", "TurnCancelled"]


def test_a_lifted_wait_inside_a_section_lets_the_interrupt_in() -> None:
    def wait(guard: GreenletInterrupts, notes: list[str]) -> None:
        with guard, guard.lifted():
            gevent.sleep(LONG_S)

    guard, notes, g = run(wait)
    gevent.sleep(0.05)
    guard.stop()
    g.join(2)
    assert notes == ["TurnCancelled"]


def test_an_answer_is_never_cut_by_a_further_interrupt() -> None:
    def answer(guard: GreenletInterrupts, notes: list[str]) -> None:
        with guard.answering():
            gevent.sleep(0.2)  # the soft limit and Stop land here
            notes.append("answered")

    guard, notes, g = run(answer, soft_limit_s=0.05)
    gevent.sleep(0.1)
    guard.stop()
    g.join(2)
    assert notes == ["answered"]


def test_a_shutdown_reaches_every_running_run_and_a_run_that_starts_later_hands_over_at_once() -> (
    None
):
    runs = [run(lambda guard, notes: gevent.sleep(LONG_S)) for _ in range(3)]
    gevent.sleep(0.05)
    GreenletInterrupts.shut_down()
    late = run(lambda guard, notes: notes.append("ran"))
    gevent.joinall([g for _, _, g in [*runs, late]], timeout=2)
    assert [notes for _, notes, _ in runs] == [["Shutdown"]] * 3
    assert late[1] == ["Shutdown"]


def test_one_runs_stop_never_reaches_another_run() -> None:
    stopped, stopped_notes, g1 = run(lambda guard, notes: gevent.sleep(LONG_S))
    _, other_notes, g2 = run(lambda guard, notes: (gevent.sleep(0.2), notes.append("done")))
    gevent.sleep(0.05)
    stopped.stop()
    gevent.joinall([g1, g2], timeout=2)
    assert (stopped_notes, other_notes) == (["TurnCancelled"], ["done"])


def test_nothing_lands_once_the_task_is_over() -> None:
    guard, notes, g = run(lambda guard, notes: notes.append("done"), soft_limit_s=0.05)
    g.join(2)
    gevent.sleep(0.1)  # past the soft limit: its timer went with the task
    guard.stop()
    gevent.sleep(0.05)
    assert notes == ["done"] and g.successful()


def test_a_chunk_celery_ends_before_its_run_began_hands_over_as_it_begins() -> None:
    """Celery ends a chunk whose claim waits on a Redis that went away (its broker connection
    lost): the greenlet is not killed there, after the claim and before the run, where it would
    leave its turn held until the lease ran out; its run hands over as it begins."""
    guard, notes = GreenletInterrupts(), []

    def chunk() -> None:
        with guard.limited(None):
            gevent.sleep(0.1)  # the claim's round trips
            notes.append("claimed")
            try:
                with guard.running():
                    notes.append("ran")
            except Shutdown:
                notes.append("Shutdown")

    g = gevent.spawn(chunk)
    gevent.sleep(0.02)
    found = GreenletInterrupts.of(g)
    assert found is guard
    found.terminate()
    g.join(2)
    assert notes == ["claimed", "Shutdown"] and g.successful()
    assert GreenletInterrupts.of(g) is None  # its task is over
