"""The tenant trials' invariants are pure checks over hand-built streams (chaos.tenant_checks);
what a tenant trial draws and how its table reads."""

from __future__ import annotations

import math
import random
from typing import Any

from chaos import tenant_checks as checks
from chaos.cluster import DEFAULT, Profile, with_tenants
from chaos.report import Outcome, TurnResult, table
from chaos.tenants import turn_tenants
from chaos.trial import FAULTS, Trial
from ledger.events import Event, RunEnded, RunStarted, Text, TurnEnded, TurnStarted


class Turn:
    """A turn's stream, built event by event: ``turn_started`` of its tenant first."""

    def __init__(self, turn_id: str, tenant: str = "a") -> None:
        self.turn_id = turn_id
        self.events: list[Event] = []
        self.add(TurnStarted, "api", 0.0, conversation_id="c", message="hi", tenant=tenant)

    def add(self, cls: type[Any], run_id: str, ts: float, **fields: Any) -> Turn:
        n = len(self.events)
        base = {"event_id": f"{self.turn_id}:{n}", "turn_id": self.turn_id, "chunk": 0}
        self.events.append(cls(**base, run_id=run_id, ts=ts, **fields))
        return self

    def run(self, run_id: str, start: float, end: float | None, reason: str = "completed") -> Turn:
        self.add(RunStarted, run_id, start).add(Text, run_id, start + 0.01, text="x")
        return self if end is None else self.add(RunEnded, run_id, end, reason=reason)

    def ended(self, run_id: str, ts: float, status: str = "completed") -> Turn:
        return self.add(TurnEnded, run_id, ts, status=status, can_continue=status == "stopped")


def streams(*turns: Turn) -> dict[str, list[Event]]:
    return {t.turn_id: t.events for t in turns}


def test_a_run_holds_from_its_start_to_its_end() -> None:
    turn = Turn("t1").run("r1", 1.0, 2.0, "soft_limit").run("r2", 2.5, 3.0).ended("r2", 3.0)
    assert [(h.run_id, h.start, h.end) for h in checks.holds(turn.events)] == [
        ("r1", 1.0, 2.0),
        ("r2", 2.5, 3.0),
    ]


def test_a_killed_run_holds_until_the_crashed_end_a_takeover_writes_for_it() -> None:
    """The reaper's ``run_ended`` (crashed) carries the dead run's id: the run held till then,
    though the process died earlier (its turn kept its slot all along)."""
    turn = Turn("t1").run("r1", 1.0, None).add(RunEnded, "r1", 4.0, reason="crashed")
    turn.run("r2", 4.2, 5.0).ended("r2", 5.0)
    assert [(h.start, h.end) for h in checks.holds(turn.events)] == [(1.0, 4.0), (4.2, 5.0)]


def test_a_run_with_no_end_holds_until_another_runs_event_or_the_turns_end() -> None:
    other = Turn("t1").run("r1", 1.0, None).run("r2", 3.0, 4.0).ended("r2", 4.0)
    assert checks.holds(other.events)[0].end == 3.0
    last = Turn("t2").run("r1", 1.0, None).ended("r1", 2.0)
    assert checks.holds(last.events)[0].end == 2.0
    running = Turn("t3").run("r1", 1.0, None)
    assert checks.holds(running.events)[0].end == math.inf


def test_a_wait_holds_nothing_between_its_runs() -> None:
    """A turn waiting for approval gave its slot back: its runs before and after hold, the
    wait does not, so a turn of the tenant running in the gap is within a bound of 1."""
    waits = Turn("t1").run("r1", 1.0, 2.0, "waiting").run("r2", 6.0, 7.0).ended("r2", 7.0)
    beside = Turn("t2").run("r3", 2.5, 5.5).ended("r3", 5.5)
    assert checks.within_bound(streams(waits, beside), 1) == []


def test_more_of_a_tenants_turns_running_at_once_than_its_bound_is_a_violation() -> None:
    one = Turn("t1").run("r1", 1.0, 3.0).ended("r1", 3.0)
    two = Turn("t2").run("r2", 2.0, 4.0).ended("r2", 4.0)
    three = Turn("t3").run("r3", 2.5, 2.8).ended("r3", 2.8)
    assert checks.within_bound(streams(one, two, three), 2) == [
        "tenant a had 3 turns running at once at 1.500 s (2 at most)"
    ]
    assert checks.within_bound(streams(one, two, three), 3) == []
    assert checks.most_running(streams(one, two, three)) == {"a": 3}


def test_a_killed_runs_turn_taken_over_counts_until_the_takeover() -> None:
    """A dead run whose crashed end came late still held: a second turn started before that
    breaks a bound of 1 (the slot was the dead run's turn's until the takeover)."""
    dead = Turn("t1").run("r1", 1.0, None).add(RunEnded, "r1", 4.0, reason="crashed")
    dead.run("r2", 4.1, 5.0).ended("r2", 5.0)
    early = Turn("t2").run("r3", 3.0, 3.5).ended("r3", 3.5)
    assert checks.within_bound(streams(dead, early), 1) == [
        "tenant a had 2 turns running at once at 2.000 s (1 at most)"
    ]


def test_an_end_at_the_instant_of_a_start_came_first() -> None:
    one = Turn("t1").run("r1", 1.0, 2.0).ended("r1", 2.0)
    two = Turn("t2").run("r2", 2.0, 3.0).ended("r2", 3.0)
    assert checks.within_bound(streams(one, two), 1) == []


def test_each_tenant_is_bounded_on_its_own() -> None:
    a = [Turn(f"a{i}", "a").run(f"ra{i}", 1.0, 2.0).ended(f"ra{i}", 2.0) for i in range(2)]
    b = [Turn(f"b{i}", "b").run(f"rb{i}", 1.0, 2.0).ended(f"rb{i}", 2.0) for i in range(2)]
    assert checks.within_bound(streams(*a, *b), 2) == []
    assert checks.most_running(streams(*a, *b)) == {"a": 2, "b": 2}
    lines = checks.timeline(streams(*a, *b))
    assert len(lines) == 4 and lines[0].startswith("a ") and lines[-1].startswith("b ")


def test_slots_back_names_each_tenant_whose_counts_are_not_zero() -> None:
    assert checks.slots_back({"a": (0, 0), "b": (0, 0)}) == []
    assert checks.slots_back({"a": (1, 0), "b": (0, 2)}) == [
        "tenant a still counts 1 running, 0 queued after its turns ended",
        "tenant b still counts 0 running, 2 queued after its turns ended",
    ]


def test_a_tenant_trial_enqueues_more_of_its_first_tenants_turns_than_the_bound() -> None:
    rng = random.Random(5)
    for _ in range(50):
        trial = Trial.draw(rng, False, FAULTS, limit=2)
        assert 2 <= len(trial.tenants) <= 3
        assert trial.tenants[0] > 2 and all(1 <= n <= 3 for n in trial.tenants[1:])
        assert trial.turns == sum(trial.tenants)
        owners = turn_tenants(trial, 7)
        assert owners[0] == "t7a" and len(owners) == trial.turns
        assert owners.count("t7a") == trial.tenants[0]


def test_a_tenant_trials_tenants_are_drawn_after_its_fault() -> None:
    """The tenants are drawn last: a trial's fault is the one a plain run draws from the same
    state of the seed."""
    plain = Trial.draw(random.Random(9), False, FAULTS)
    tenant = Trial.draw(random.Random(9), False, FAULTS, limit=2)
    assert (tenant.action, tenant.point, tenant.mode) == (plain.action, plain.point, plain.mode)


def test_a_tenant_trials_pool_has_room_beyond_its_bound_but_the_backlogs_one_process() -> None:
    assert with_tenants(DEFAULT, 3).concurrency == 4
    assert with_tenants(DEFAULT, 0) == DEFAULT
    assert with_tenants(Profile(concurrency=1), 3).concurrency == 1


def test_the_table_counts_the_trials_where_a_tenant_reached_its_bound() -> None:
    turn = TurnResult("completed", "", False, 0, False, 0)
    outcomes = [
        Outcome("kill_worker (background)", [turn], 1.0, True, limit=2, reached=reached)
        for reached in (True, True, False)
    ]
    rows = table(outcomes).splitlines()
    assert rows[0].split()[-4:] == ["tenant", "at", "its", "bound"]
    assert rows[2].split()[2] == "3" and rows[2].split()[-1] == "2"  # trials, reached
