"""What a chaos run draws from: failover and approval trials only when asked for, alone, on their
own set-ups."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from chaos.approvals import APPROVAL_FAULTS, DECISION_POINTS
from chaos.cluster import FLIGHT, GEVENT, under
from chaos.failover import HOWS
from chaos.runner import drawn
from chaos.trial import (
    APPROVAL,
    FAILOVER,
    FAILOVER_FAULTS,
    FAULTS,
    NOT_UNDER_GEVENT,
    NTH,
    Trial,
)


def test_a_default_run_draws_every_fault_but_failover_and_approval() -> None:
    assert drawn(()) == FAULTS
    assert all(action not in {FAILOVER, APPROVAL} for action, _ in FAULTS)
    assert not any(Trial.draw(random.Random(1), naive=False).approval for _ in range(20))


def test_failover_trials_strike_at_the_store_faults_points() -> None:
    assert drawn([FAILOVER]) == FAILOVER_FAULTS
    store_points = {point for action, point in FAULTS if action == "redis_restart"}
    assert {point for _, point in FAILOVER_FAULTS} == store_points


def test_failover_trials_are_not_mixed_with_others() -> None:
    with pytest.raises(ValueError, match="alone"):
        drawn([FAILOVER, "redis_restart"])


def test_a_failover_trial_is_a_store_fault_made_one_of_two_ways() -> None:
    rng = random.Random(3)
    trials = [Trial.draw(rng, naive=False, faults=FAILOVER_FAULTS) for _ in range(40)]
    assert {trial.how for trial in trials} == set(HOWS)
    assert all(trial.store and trial.fault.startswith(f"{FAILOVER}/") for trial in trials)
    assert all(trial.kill_after is not None for trial in trials if trial.point == "-")


def test_seed_1_draws_its_pinned_trials_the_failover_draw_last() -> None:
    """The failover's own draw comes last and only for a failover: the other trials of a seed
    are the ones it drew before. (A seed's trials change with ``FAULTS`` itself: issue 27 added
    the ``chunk.sent`` point, so chaos/RESULTS.md's earlier seed-1 run began otherwise.)"""
    rng = random.Random(1)
    assert [Trial.draw(rng, naive=False).fault for _ in range(5)] == [
        "kill_child chunk.sent (foreground)",
        "kill_child tool.after_done (background)",
        "redis_restart (background)",
        "kill_worker tool.after_effect (background)",
        "kill_child tool.before_start (background)",
    ]


def test_approval_trials_are_asked_for_alone_and_run_where_writes_wait() -> None:
    assert drawn([APPROVAL]) == APPROVAL_FAULTS
    with pytest.raises(ValueError, match="alone"):
        drawn([APPROVAL, "kill_child"])
    rng = random.Random(5)
    trials = [
        Trial.draw(rng, naive=False, faults=APPROVAL_FAULTS, approval=True) for _ in range(150)
    ]
    assert {(t.action, t.point) for t in trials} == set(APPROVAL_FAULTS)
    assert all(t.fault.startswith(f"{APPROVAL}/") for t in trials)
    assert all(dict(t.profile.env)["DRES_APPROVAL"] for t in trials)
    store = [t for t in trials if t.store]
    assert store and all(dict(t.profile.env)["DRES_HARD_LIMIT_S"] == "20" for t in store)
    assert all(t.outage_s > 0 for t in store)


def test_an_approval_trials_person_mostly_approves_and_strikes_at_an_early_decision() -> None:
    rng = random.Random(7)
    trials = [
        Trial.draw(rng, naive=False, faults=APPROVAL_FAULTS, approval=True) for _ in range(60)
    ]
    decisions = [d for t in trials for d in t.person.decisions]
    assert 0 < decisions.count("deny") < decisions.count("approve")
    assert {t.person.nth for t in trials} == set(range(NTH))
    assert {t.point for t in trials} >= set(DECISION_POINTS)
    assert trials[0].person.decision(100) == ("approve", 0.0)  # past the drawn ones


def test_a_gevent_run_draws_the_default_faults_but_those_meaning_another_under_gevent() -> None:
    """No pool child to kill and no SIGUSR1 soft limit under gevent (``NOT_UNDER_GEVENT`` says
    why); every other default fault, the store faults included, is drawn."""
    faults = drawn((), GEVENT)
    assert {action for action, _ in faults} == {a for a, _ in FAULTS} - set(NOT_UNDER_GEVENT)
    assert {"kill_worker", "redis_restart", "redis_pause", "backlog"} <= {a for a, _ in faults}
    with pytest.raises(ValueError, match="gevent"):
        drawn([FAILOVER], GEVENT)


def test_a_gevent_trial_runs_many_turns_on_a_gevent_worker_with_room_for_them() -> None:
    rng = random.Random(1)
    trials = [replace(Trial.draw(rng, naive=False), flight=FLIGHT) for _ in range(40)]
    assert all(t.turns == FLIGHT + 1 for t in trials)
    for t in trials:
        profile = under(GEVENT, t.profile)
        assert profile.pool == GEVENT and profile.env == t.profile.env
        # a backlog's turns wait in the queue; every other trial's run at once
        assert (profile.concurrency < t.turns) == t.backlog, t.fault
    assert under("prefork", trials[0].profile) == trials[0].profile
