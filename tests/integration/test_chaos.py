"""A few of ``make chaos``'s trials (few, for CI's time): faults at random points on a real
worker, no violation."""

from __future__ import annotations

import pytest

from chaos import schedules
from chaos.runner import run, table
from chaos.trial import APPROVAL, TIMER, TIMER_TURNS
from worker.dev.redis_server import RedisServer

#: the default kinds' trials: enough that most fault kinds fire, few enough for CI's 20 minutes
TRIALS = 12
SEED = 20261202


@pytest.mark.timeout(600)
def test_chaos_trials_keep_every_invariant(redis_server: RedisServer) -> None:
    """No write twice, no blind retry, a terminal state, no zombie event, no lost record."""
    outcomes, _ = run(TRIALS, SEED)
    print(table(outcomes))
    assert len(outcomes) == TRIALS
    assert sum(o.fired for o in outcomes) >= TRIALS * 3 // 4, "most injected faults must fire"
    violations = [(o.fault, v) for o in outcomes for v in o.violations]
    assert violations == []


#: each trial asks three times and restarts the worker around a decision: few, for CI's time
APPROVAL_TRIALS = 4


@pytest.mark.timeout(600)
def test_approval_chaos_trials_run_no_write_without_its_approve(redis_server: RedisServer) -> None:
    """Every write waits for a person the runner plays; a fault around a decision: no write ran
    without an approve for its signature, none twice on one approval, and the rest holds."""
    outcomes, _ = run(APPROVAL_TRIALS, SEED, only=[APPROVAL])
    print(table(outcomes))
    assert len(outcomes) == APPROVAL_TRIALS
    assert all(o.fault.startswith(f"{APPROVAL}/") for o in outcomes)
    assert all(o.decisions["approve"] >= 3 for o in outcomes), "each turn asks three times"
    violations = [(o.fault, v) for o in outcomes for v in o.violations]
    assert violations == []


#: each trial's three turns wait 1 to 3 s on two workers; at this seed a worker killed between the
#: timer's effect and its return, and both workers killed between the wake and the claim: few,
#: for CI's time
TIMER_TRIALS = 2


@pytest.mark.timeout(600)
def test_timer_chaos_trials_wake_every_timer_once(redis_server: RedisServer) -> None:
    """Turns whose tool returns wait_until, on two workers, one fault around each wait: every
    timer wakes once and never early, no wait or effect twice, every turn completes."""
    outcomes, _ = run(TIMER_TRIALS, SEED, only=[TIMER])
    print(table(outcomes))
    assert len(outcomes) == TIMER_TRIALS
    assert all(o.fault.startswith(f"{TIMER}/") and o.fired for o in outcomes)
    assert all(len(o.turns) == TIMER_TURNS for o in outcomes)
    assert sum(len(o.late) for o in outcomes) >= TIMER_TURNS, "the turns waited and woke"
    violations = [(o.fault, v) for o in outcomes for v in o.violations]
    assert violations == []


#: schedule trials (chaos.schedules): two workers racing for ticks, a fault around a tick; each
#: takes 6 to 25 s of ticks, so few, for CI's time
SCHEDULE_TRIALS = 2
#: draws a worker killed holding a tick's claim (or before the advance), two ats among the
#: schedules, then both workers killed across missed ticks (either pool)
SCHEDULE_SEED = 14


@pytest.mark.timeout(600)
@pytest.mark.parametrize("pool", ["prefork", "gevent"])
def test_schedule_chaos_trials_fire_no_tick_twice(redis_server: RedisServer, pool: str) -> None:
    """Schedules ticking on two workers, a fault around a tick: each tick one turn, none early,
    ticks keep coming, and every turn keeps the usual invariants."""
    results, _ = schedules.run(SCHEDULE_TRIALS, SCHEDULE_SEED, pool)
    outcomes = [r.outcome for r in results]
    print(table(outcomes))
    assert len(outcomes) == SCHEDULE_TRIALS
    assert all(o.fired for o in outcomes), "each trial's fault must strike"
    assert all(r.fired >= 3 for r in results), "each trial fires ticks"
    violations = [(o.fault, v) for o in outcomes for v in o.violations]
    assert violations == []
