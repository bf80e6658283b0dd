"""The ``timer`` chaos trials (chaos.timers): drawn alone, on both pools; and their invariants
(chaos.timer_checks), pure checks over hand-built streams: every timer wakes once, never early,
no run begun after the time waits again, lateness measured."""

from __future__ import annotations

import random
from typing import Any

import pytest

from chaos import timer_checks
from chaos.cluster import GEVENT
from chaos.kinds import drawn
from chaos.report import Outcome
from chaos.timers import (
    KILL_WORKERS,
    LATE_S,
    TIMER_FAULTS,
    TIMER_POINTS,
    WAITING,
    WOKEN,
    explains_lateness,
    judge,
    script,
)
from chaos.tools import WAIT_POINT
from chaos.trial import NOT_UNDER_GEVENT, TIMER, TIMER_S, TIMER_TURNS, Trial
from ledger.events import ModelStart, RunEnded, RunStarted, Text, ToolDone, ToolStart

WAKE = 100.0


def trials(n: int, seed: int = 4) -> list[Trial]:
    rng = random.Random(seed)
    return [Trial.draw(rng, naive=False, faults=TIMER_FAULTS, timer=True) for _ in range(n)]


def test_timer_trials_are_asked_for_alone_and_wait_one_to_three_seconds() -> None:
    assert drawn([TIMER]) == TIMER_FAULTS
    with pytest.raises(ValueError, match="alone"):
        drawn([TIMER, "kill_child"])
    drawn_ = trials(200)
    assert {(t.action, t.point) for t in drawn_} == set(TIMER_FAULTS)
    assert {t.point for t in drawn_} >= {*TIMER_POINTS, WAIT_POINT, "tool.after_done"}
    for t in drawn_:
        assert t.timed and t.turns == TIMER_TURNS and t.fault.startswith(f"{TIMER}/")
        assert all(TIMER_S[0] <= s <= TIMER_S[1] for s in t.timer.seconds)
        assert list(t.timer.seconds) == sorted(t.timer.seconds, reverse=True)  # the first longest
        # the executor's points strike the first turn's second call, its chaos_wait
        assert t.skip == (1 if t.point.startswith("tool.") else 0), t.fault
    assert not any(Trial.draw(random.Random(1), naive=False).timed for _ in range(20))


def test_a_gevent_run_draws_timer_trials_but_no_pool_child_kill() -> None:
    faults = drawn([TIMER], GEVENT)
    assert faults == [f for f in TIMER_FAULTS if f[0] not in NOT_UNDER_GEVENT]
    assert {KILL_WORKERS, "kill_worker", "redis_restart", "duplicate"} <= {a for a, _ in faults}


def test_each_turn_notes_waits_then_sends_past_the_soft_limit() -> None:
    calls = [c["name"] for step in script(1.5) for c in step.get("tool_calls", [])]
    assert calls == ["chaos_note", "chaos_wait", "chaos_send"]
    assert script(1.5)[1]["tool_calls"][0]["input"]["seconds"] == 1.5


def test_lateness_is_explained_by_an_outage_or_the_woken_runs_process_killed() -> None:
    def trial(action: str, point: str) -> Trial:
        return next(t for t in trials(300) if (t.action, t.point) == (action, point))

    assert explains_lateness(trial("redis_restart", WAITING))
    assert explains_lateness(trial(KILL_WORKERS, WAITING))
    assert explains_lateness(trial("kill_worker", WOKEN))
    assert not explains_lateness(trial("kill_worker", WAITING))  # the other worker's reaper
    assert not explains_lateness(trial("none", "-"))
    assert not explains_lateness(trial("duplicate", WOKEN))
    late = Outcome("f", [], 0.0, True, late=[0.2, LATE_S + 1])
    judge(trial("none", "-"), False, late)
    assert late.violations == [
        f"a timer woke {LATE_S + 1:.2f} s late (more than {LATE_S} s, no outage in the trial)"
    ]
    excused = Outcome("f", [], 0.0, True, late=[LATE_S + 1])
    judge(trial("redis_restart", WAITING), True, excused)
    assert excused.violations == [] and excused.late_explained


# -- the invariants over hand-built streams ------------------------------------------------------


def ev(kind: type[Any], run_id: str, ts: float, **fields: Any) -> Any:
    return kind(event_id=f"e{ts}", turn_id="t1", run_id=run_id, chunk=0, ts=ts, **fields)


def before_the_wait() -> list[Any]:
    """A run that notes, calls chaos_wait (its tool_done carries ``wake_at``), ends waiting."""
    return [
        ev(RunStarted, "r1", 90.0),
        ev(ModelStart, "r1", 90.1, step=0),
        ev(ToolStart, "r1", 90.2, call_id="c1", tool="chaos_wait", signature="s1"),
        ev(ToolDone, "r1", 90.3, call_id="c1", tool="chaos_wait", wake_at=WAKE),
    ]


def went_on(run_id: str, at: float) -> list[Any]:
    return [ev(ModelStart, run_id, at, step=1), ev(Text, run_id, at + 0.1, text="Done.")]


def woken(run_id: str, at: float) -> list[Any]:
    return [ev(RunStarted, run_id, at, cause="timer")]


def ended_waiting(run_id: str, at: float) -> list[Any]:
    return [ev(RunEnded, run_id, at, reason="waiting")]


def test_a_wait_woken_once_after_its_time_keeps_every_timer_invariant() -> None:
    events = [
        *before_the_wait(),
        *ended_waiting("r1", 90.4),
        *woken("r2", WAKE + 0.3),
        *went_on("r2", WAKE + 0.4),
    ]
    assert timer_checks.check(events) == []
    assert timer_checks.lateness(events) == [pytest.approx(0.3)]


def test_a_run_begun_early_may_wait_again_and_one_begun_after_the_time_goes_on() -> None:
    crash_pickup_early = [
        *before_the_wait(),  # killed after its tool_done: no run_ended of its own
        ev(RunEnded, "r2", 92.0, reason="crashed"),
        ev(RunStarted, "r2", 92.0, cause="reaper"),
        *ended_waiting("r2", 92.1),
        *woken("r3", WAKE + 0.2),
        *went_on("r3", WAKE + 0.3),
    ]
    assert timer_checks.check(crash_pickup_early) == []
    assert timer_checks.waited_again(crash_pickup_early) == 1
    crash_pickup_late = [
        *before_the_wait(),
        ev(RunStarted, "r2", WAKE + 1, cause="reaper"),
        *went_on("r2", WAKE + 1.1),
    ]
    assert timer_checks.check(crash_pickup_late) == []
    assert timer_checks.lateness(crash_pickup_late) == []
    redelivered_early = [
        *before_the_wait(),
        *ended_waiting("r1", 90.4),
        ev(RunStarted, "r2", 91.0, cause="redelivery"),
        *ended_waiting("r2", 91.1),
        *woken("r3", WAKE + 0.2),
        *went_on("r3", WAKE + 0.3),
    ]
    assert timer_checks.check(redelivered_early) == []
    assert timer_checks.waited_again(redelivered_early) == 1


def test_a_model_call_before_the_time_is_an_early_wake() -> None:
    events = [*before_the_wait(), ev(RunStarted, "r2", 95.0, cause="reaper"), *went_on("r2", 95.1)]
    assert timer_checks.check(events) == [
        f"the wait until {WAKE:.3f}: its model call came 4.900 s early"
    ]


def test_two_timer_wakes_of_one_wait_and_a_wake_before_the_time_are_violations() -> None:
    twice = [
        *before_the_wait(),
        *ended_waiting("r1", 90.4),
        *woken("r2", WAKE + 0.1),
        *woken("r3", WAKE + 0.2),
        *went_on("r3", WAKE + 0.3),
    ]
    assert timer_checks.check(twice) == [f"the wait until {WAKE:.3f}: woken 2 times (r2, r3)"]
    early = [*before_the_wait(), *ended_waiting("r1", 90.4), *woken("r2", WAKE - 1)]
    assert timer_checks.check(early) == [f"the wait until {WAKE:.3f}: woken 1.000 s early (run r2)"]


def test_a_wait_passed_with_no_wake_and_a_wake_with_no_wait_are_violations() -> None:
    skipped = [
        *before_the_wait(),
        *ended_waiting("r1", 90.4),
        ev(RunStarted, "r2", WAKE + 1, cause="redelivery"),
        *went_on("r2", WAKE + 1.1),
    ]
    assert timer_checks.check(skipped) == [
        f"the wait until {WAKE:.3f}: the turn went on past it with no timer wake"
    ]
    unasked = [*before_the_wait(), *woken("r2", WAKE + 0.1), *went_on("r2", WAKE + 0.2)]
    assert timer_checks.check(unasked) == [
        f"the wait until {WAKE:.3f}: woken with no run that ended waiting"
    ]


def test_a_run_begun_after_the_time_that_waits_again_waited_twice() -> None:
    events = [
        *before_the_wait(),
        *ended_waiting("r1", 90.4),
        *woken("r2", WAKE + 0.1),
        *ended_waiting("r2", WAKE + 0.2),
    ]
    assert timer_checks.check(events) == [
        f"the wait until {WAKE:.3f}: run r2, begun 0.100 s after it, waited again"
    ]


def test_chaos_wait_returning_its_wait_twice_for_one_input_is_a_violation() -> None:
    events = [
        *before_the_wait(),
        ev(ToolDone, "r2", 91.0, call_id="c2", tool="chaos_wait", wake_at=WAKE + 2),
    ]
    assert "chaos_wait returned a wait 2 times for 1 input(s)" in timer_checks.check(events)


def test_a_timer_trials_turn_completes() -> None:
    assert timer_checks.completed("completed", "", 1) == []
    assert timer_checks.completed("stopped", "crashed", 2) == [
        "the turn ended stopped (crashed) after 2 Continue(s)"
    ]
