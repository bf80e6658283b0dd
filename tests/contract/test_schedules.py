"""Schedules in-process (docs/semantics.md, schedules): the lifecycle's ``Schedules`` steps and
the reaper's look at due ticks, on the suite's real redis-server, time the harness's clock.

Each tick starts exactly one turn, whose id is derived from the schedule and the tick, however
many reapers look at it and wherever one of them dies; ``catch_up`` decides what a gap fires;
a deleted schedule fires nothing; an ``at`` is spent after its one turn.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
from harness import Harness

from ledger import keys
from ledger.events import TurnStarted
from ledger.schedules import Schedule
from worker.lifecycle.reaper import Reaper
from worker.lifecycle.schedules import CLAIM_MS, tick_turn_id
from worker.lifecycle.ticks import LATE_S


@pytest.fixture
def h(rdb: redis.Redis, tmp_path: Path) -> Harness:
    return Harness(rdb, tmp_path)


def started_turns(h: Harness) -> list[str]:
    """The turns whose first run was sent, in order."""
    return [turn_id for turn_id, _, _ in h.messages.sent]


def turn_started(h: Harness, turn_id: str) -> TurnStarted:
    found = h.ledger.started([turn_id])[0]
    assert found is not None, f"turn {turn_id} was not made"
    return found


def every_minute(h: Harness, **kw: object) -> Schedule:
    return h.lifecycle.add_schedule("summarise the tickets", every=60, **kw)  # type: ignore[arg-type]


def test_two_reapers_sweeping_the_same_due_tick_start_exactly_one_turn_of_the_derived_id(
    h: Harness,
) -> None:
    schedule = every_minute(h)
    assert schedule.next_ms == schedule.created_ms + 60_000
    h.clock.t += 60.5
    reapers = [Reaper(h.lifecycle_for(h.ledger, None)) for _ in range(2)]
    gate = threading.Barrier(2)

    def sweep(reaper: Reaper) -> None:
        gate.wait()
        reaper.sweep()

    threads = [threading.Thread(target=sweep, args=(r,)) for r in reapers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    tick = schedule.created_ms + 60_000
    derived = tick_turn_id(schedule.schedule_id, tick)
    assert started_turns(h) == [derived]
    started = turn_started(h, derived)
    assert (started.schedule_id, started.tick_at, started.mode) == (
        schedule.schedule_id,
        tick / 1000,
        "background",
    )
    after = h.lifecycle.schedule(schedule.schedule_id)
    assert after is not None
    assert (after.last_turn_id, after.next_ms) == (derived, tick + 60_000)
    # a third look at the same time finds nothing due
    assert Reaper(h.lifecycle).sweep() is not None
    assert started_turns(h) == [derived]


def test_a_crash_between_turn_and_advance_is_finished_by_the_next_sweep_without_a_second_turn(
    h: Harness,
) -> None:
    schedule = every_minute(h)
    h.clock.t += 61
    records = h.lifecycle.schedule_records
    due = schedule.next_ms
    assert due is not None
    # the dead worker's pieces: the claim and the turn, but no advance
    claimed = records.claim(schedule.schedule_id, due, h.lifecycle.ms(), CLAIM_MS, due)
    assert claimed == str(due)
    turn_id = h.lifecycle.start_tick(schedule, due)
    assert started_turns(h) == [turn_id]
    # while its claim holds, another look leaves the tick alone
    assert h.lifecycle.fire_due_schedules() == {schedule.schedule_id: "held"}
    h.clock.t += CLAIM_MS / 1000 + 5  # the claim expires with its holder; another tick came
    assert h.lifecycle.fire_due_schedules() == {schedule.schedule_id: "fired"}
    assert started_turns(h) == [turn_id]
    after = h.lifecycle.schedule(schedule.schedule_id)
    assert after is not None and after.last_turn_id == turn_id
    assert after.next_ms is not None and after.next_ms > h.lifecycle.ms()


def test_a_turn_made_meanwhile_under_the_same_id_is_neither_sent_again_nor_given_a_second_slot(
    h: Harness,
) -> None:
    """Two reapers' ``enqueue`` of one tick's derived id (a claim that expired while its holder
    was still starting the turn): the second records and sends nothing, and takes no slot."""
    first = h.lifecycle.enqueue("tick", turn_id="turn_same", mode="background", tenant="t1")
    again = h.lifecycle.enqueue("tick", turn_id="turn_same", mode="background", tenant="t1")
    assert not first.existed
    assert again.existed and again.conversation_id == first.conversation_id
    assert started_turns(h) == ["turn_same"]
    assert h.lifecycle.store.tenants.counts("t1").running == 1


@pytest.mark.parametrize(("catch_up", "fires"), [("one", True), ("none", False)])
def test_after_a_gap_catch_up_one_fires_the_newest_tick_once_and_none_fires_nothing(
    h: Harness, catch_up: str, fires: bool
) -> None:
    schedule = every_minute(h, catch_up=catch_up)
    h.clock.t += 10 * 60 + 1 + LATE_S  # ten ticks came while nothing ran
    done = h.lifecycle.fire_due_schedules()
    assert done == {schedule.schedule_id: "fired" if fires else "skipped"}
    newest = schedule.created_ms + 10 * 60_000
    assert started_turns(h) == ([tick_turn_id(schedule.schedule_id, newest)] if fires else [])
    after = h.lifecycle.schedule(schedule.schedule_id)
    assert after is not None and after.next_ms == newest + 60_000
    assert h.lifecycle.fire_due_schedules() == {}  # nothing more is due until then


def test_catch_up_none_still_fires_a_tick_on_time(h: Harness) -> None:
    schedule = every_minute(h, catch_up="none")
    h.clock.t += 61
    assert h.lifecycle.fire_due_schedules() == {schedule.schedule_id: "fired"}


def test_a_deleted_schedule_fires_nothing_and_is_gone(h: Harness) -> None:
    schedule = every_minute(h)
    assert h.lifecycle.remove_schedule(schedule.schedule_id)
    h.clock.t += 3600
    assert h.lifecycle.fire_due_schedules() == {}
    assert started_turns(h) == []
    assert h.lifecycle.schedule(schedule.schedule_id) is None
    assert h.lifecycle.schedules() == ([], None)
    assert not h.lifecycle.remove_schedule(schedule.schedule_id)


def test_an_at_fires_once_then_reads_next_at_null_with_its_turn_and_stays_listed(
    h: Harness,
) -> None:
    when = datetime.fromtimestamp(h.clock.t + 5, UTC).isoformat()
    schedule = h.lifecycle.add_schedule("remind the customer", at=when)
    h.clock.t += 6
    assert h.lifecycle.fire_due_schedules() == {schedule.schedule_id: "fired"}
    h.clock.t += 600
    assert h.lifecycle.fire_due_schedules() == {}
    after = h.lifecycle.schedule(schedule.schedule_id)
    assert after is not None
    assert after.next_ms is None
    assert after.last_turn_id == tick_turn_id(schedule.schedule_id, schedule.at_ms or 0)
    assert started_turns(h) == [after.last_turn_id]
    listed, _ = h.lifecycle.schedules()
    assert [s.schedule_id for s in listed] == [schedule.schedule_id]


def test_a_tick_whose_turn_is_refused_is_skipped_and_the_schedule_goes_on(h: Harness) -> None:
    h.settings = h.settings.model_copy(update={"tenant_max_queued": 0})
    h.lifecycle = h.lifecycle_for(h.ledger, None)
    schedule = every_minute(h, tenant="full")
    h.clock.t += 61
    assert h.lifecycle.fire_due_schedules() == {schedule.schedule_id: "skipped"}
    after = h.lifecycle.schedule(schedule.schedule_id)
    assert after is not None and after.next_ms == schedule.created_ms + 120_000
    assert started_turns(h) == []


def test_schedules_are_listed_newest_first_in_pages(h: Harness) -> None:
    made = []
    for _ in range(5):
        made.append(every_minute(h).schedule_id)
        h.clock.t += 1
    first, cursor = h.lifecycle.schedules(limit=2)
    second, cursor2 = h.lifecycle.schedules(cursor, limit=2)
    third, end = h.lifecycle.schedules(cursor2, limit=2)
    listed = [s.schedule_id for s in first + second + third]
    assert listed == made[::-1]
    assert end is None


def test_a_schedule_that_cannot_fire_holds_up_none_of_the_others(
    h: Harness, rdb: redis.Redis
) -> None:
    broken = every_minute(h)
    h.clock.t += 1
    fine = every_minute(h)
    rdb.hset(keys.schedule(broken.schedule_id), "every", '"not cron"')  # unreadable now
    h.clock.t += 65
    done = h.lifecycle.fire_due_schedules()
    assert done == {broken.schedule_id: "failed", fine.schedule_id: "fired"}
