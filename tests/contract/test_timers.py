"""Timers inside a turn (docs/semantics.md, timers): a tool returns ``wait_until``, its call
completes with the result it names, and the turn waits until the time held by no run; the reaper
wakes it once (``run_started`` cause ``timer``), and a run begun before the time waits again.

In-process chunks (``tests/harness.py``, its clock at a standstill unless moved) on every ledger
backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
from harness import Harness
from sample_tools import effects

from ledger import keys
from ledger.events import RunEnded, RunStarted, ToolBlocked, ToolDone
from ledger.turn import TurnStatus
from worker.engine.models.base import ToolResultMessage
from worker.engine.tools.timers import wait_until
from worker.lifecycle.reaper import Reaper

DONE = {"text": "Done."}


@pytest.fixture
def h(client: redis.Redis, tmp_path: Path) -> Harness:
    return Harness(client, tmp_path)


def remind(at: float, label: str = "a") -> dict[str, Any]:
    return {"text": "", "tool_calls": [{"name": "remind_at", "input": {"at": at, "label": label}}]}


def causes(h: Harness) -> list[str]:
    return [e.cause for e in h.events("run_started") if isinstance(e, RunStarted)]


def test_the_call_completes_and_the_turn_waits_for_its_timer_held_by_no_run(h: Harness) -> None:
    wake_at = h.clock.t + 600
    h.start([remind(wake_at), DONE])

    assert h.run_next() is None
    meta = h.lifecycle.store.meta(h.turn_id)
    assert (meta.status, meta.waiting_for, meta.next_run) == (TurnStatus.WAITING, "timer", "")
    assert meta.wake_at == wake_at
    (done,) = [e for e in h.events("tool_done") if isinstance(e, ToolDone)]
    assert (done.result, done.is_error, done.wake_at) == ({"reminded": "a"}, False, wake_at)
    (ended,) = [e for e in h.events("run_ended") if isinstance(e, RunEnded)]
    assert ended.reason == "waiting" and "timer" in (ended.detail or ""), ended
    # the reaper looks at it when the timer falls due, not before
    assert h.client.zscore(keys.active_turns(), h.turn_id) == int(wake_at * 1000)
    assert not h.messages.sent[1:], "a waiting turn holds no message"


def test_the_reaper_wakes_it_at_its_time_once_and_the_model_reads_the_result(h: Harness) -> None:
    wake_at = h.clock.t + 600
    h.start([remind(wake_at), DONE])
    h.run_next()
    reaper = Reaper(h.lifecycle)

    assert reaper.check(h.turn_id, int(h.clock.t * 1000)) == "timer"  # not yet
    h.clock.t = wake_at + 0.5
    assert reaper.check(h.turn_id, int(h.clock.t * 1000)) == "woken"
    assert reaper.check(h.turn_id, int(h.clock.t * 1000)) != "woken"  # once

    meta = h.lifecycle.store.meta(h.turn_id)
    assert (meta.status, meta.wake_at, meta.waiting_for) == (TurnStatus.RESUMING, 0.0, None)
    h.pending = h.messages.sent[-1][1]
    assert h.run_to_end().status == "completed"
    assert causes(h) == ["first", "timer"]
    results = [m for m in h.requests[-1].messages if isinstance(m, ToolResultMessage)]
    assert [r.content for r in results] == ['{"reminded": "a"}']
    assert len(effects(h.client, "remind_at")) == 1


def test_a_run_begun_before_the_time_waits_again(h: Harness) -> None:
    """The step's other call waits on the client too: its answer resumes the turn at once, and
    that run finds the timer in the ledger still to come and waits for it."""
    wake_at = h.clock.t + 600
    ask = {"name": "ask_user", "input": {"question": "Red?"}}
    step = {"text": "", "tool_calls": [*remind(wake_at)["tool_calls"], ask]}
    h.start([step, DONE])
    h.run_next()
    assert h.lifecycle.store.meta(h.turn_id).waiting_for == "client_tool"
    call_id = next(e.call_id for e in h.events("tool_start") if e.tool == "ask_user")  # type: ignore[attr-defined]

    answered = h.lifecycle.answer(h.turn_id, call_id, "yes")
    h.pending = answered.run_id
    assert h.run_next() is None

    meta = h.lifecycle.store.meta(h.turn_id)
    assert (meta.status, meta.waiting_for, meta.wake_at) == (TurnStatus.WAITING, "timer", wake_at)
    assert not h.events("model_start")[1:], "no model call before the timer"
    h.clock.t = wake_at
    assert Reaper(h.lifecycle).check(h.turn_id, int(h.clock.t * 1000)) == "woken"
    h.pending = h.messages.sent[-1][1]
    assert h.run_to_end().status == "completed"
    assert causes(h) == ["first", "tool_output", "timer"]


def test_an_exact_repeat_after_the_wake_is_answered_from_the_record_and_waits_no_more(
    h: Harness,
) -> None:
    wake_at = h.clock.t + 60
    h.start([remind(wake_at), DONE], on_resume="restart")
    h.run_next()
    h.clock.t = wake_at
    Reaper(h.lifecycle).check(h.turn_id, int(h.clock.t * 1000))
    h.pending = h.messages.sent[-1][1]

    assert h.run_to_end().status == "completed"  # the model called remind_at again: blocked

    (block,) = [e for e in h.events("tool_blocked") if isinstance(e, ToolBlocked)]
    assert (block.tool, block.reason) == ("remind_at", "completed")
    assert len(effects(h.client, "remind_at")) == 1
    assert causes(h) == ["first", "timer"]


def test_stop_ends_a_turn_waiting_on_its_timer(h: Harness) -> None:
    h.start([remind(h.clock.t + 600), DONE])
    h.run_next()

    h.lifecycle.stop(h.turn_id)

    meta = h.lifecycle.store.meta(h.turn_id)
    assert (meta.status, meta.code, meta.wake_at) == (TurnStatus.STOPPED, "cancelled", 0.0)


def test_a_time_already_past_does_not_wait(h: Harness) -> None:
    h.start([remind(h.clock.t - 5), DONE])
    assert h.run_to_end().status == "completed"
    assert causes(h) == ["first"]


@pytest.mark.parametrize(
    ("when", "error"),
    [
        (__import__("datetime").datetime(2030, 1, 1), "naive datetime"),
        ("soon", "not str"),
        (-1, "seconds >= 0"),
        (float("nan"), "finite"),
        (True, "not bool"),
    ],
)
def test_wait_until_refuses_what_is_not_a_time_naming_it(when: Any, error: str) -> None:
    with pytest.raises((TypeError, ValueError), match=error):
        wait_until(when)


def waiting_turns(h: Harness, count: int, wake_at: float) -> list[str]:
    turns = []
    for n in range(count):
        h.start([remind(wake_at, f"t{n}"), DONE])
        assert h.run_next() is None
        turns.append(h.turn_id)
    return turns


def test_two_reapers_sweeping_timers_due_together_wake_each_once(h: Harness) -> None:
    """The first sweep takes every due turn (held from the other reaper while it looks) and
    wakes them in one batch; the second finds none due; each turn's run is sent once."""
    wake_at = h.clock.t + 60
    turns = waiting_turns(h, 5, wake_at)
    sent = len(h.messages.sent)
    h.clock.t = wake_at + 0.2
    first, second = Reaper(h.lifecycle), Reaper(h.lifecycle)

    woken = first.sweep()
    again = second.sweep()

    assert woken == dict.fromkeys(turns, "woken") and again == {}
    assert sorted(t for t, _, _ in h.messages.sent[sent:]) == sorted(turns)
    for turn_id in turns:
        meta = h.lifecycle.store.meta(turn_id)
        assert (meta.status, meta.next_cause, meta.wake_at) == (TurnStatus.RESUMING, "timer", 0.0)


def test_one_sweep_wakes_more_timers_than_a_batch(h: Harness) -> None:
    """Timers due together beyond one batch: the sweep goes on taking batches (its budget), so
    all are woken in that sweep, not a batch a sweep."""
    wake_at = h.clock.t + 60
    turns = waiting_turns(h, 7, wake_at)
    h.clock.t = wake_at + 0.2

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("worker.lifecycle.reaper.BATCH", 3)
        woken = Reaper(h.lifecycle).sweep()

    if not h.lifecycle.store.batches:  # a Redis Cluster's reaper reads one batch a sweep
        assert list(woken.values()) == ["woken"] * 3
        return
    assert woken == dict.fromkeys(turns, "woken")


def test_a_stop_that_came_first_wins_over_the_wake(h: Harness) -> None:
    wake_at = h.clock.t + 60
    (turn_id,) = waiting_turns(h, 1, wake_at)
    meta = h.lifecycle.store.meta(turn_id)  # read by the reaper before the Stop
    h.lifecycle.stop(turn_id)
    h.clock.t = wake_at

    assert h.lifecycle.wake_all([meta]) == {turn_id: "changed"}
    assert h.lifecycle.store.meta(turn_id).status == TurnStatus.STOPPED


def test_the_reapers_are_told_when_the_next_timer_falls_due(h: Harness) -> None:
    """Every worker's reaper sweeps at the next timer's time (``ReaperThread``), not up to an
    interval later: the wait leaves its hint, and a hint whose time came is dropped."""
    store = h.lifecycle.store
    now_ms = int(h.clock.t * 1000)
    assert store.next_timer(now_ms) is None
    waiting_turns(h, 1, h.clock.t + 30)
    waiting_turns(h, 1, h.clock.t + 10)

    assert store.next_timer(now_ms) == now_ms + 10_000
    assert store.next_timer(now_ms + 10_000) == now_ms + 30_000  # the first one's time came
    assert store.next_timer(now_ms + 30_000) is None
    assert h.client.zcard(keys.timer_hints()) == 0
