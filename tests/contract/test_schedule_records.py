"""The schedules' records (``ledger.schedules``, ``lua/schedule.lua``) on fakeredis, a real
redis-server and a Redis Cluster: a due tick is claimed by one caller at a time and only while
it is the schedule's next tick; an expired claim's tick is the one the next claim fires; the
advance moves the schedule only from that tick; delete leaves nothing to claim or advance."""

from __future__ import annotations

import pytest

from ledger.schedules import Schedule, ScheduleIndex
from ledger.store import Client, Ledger

NOW = 1_700_000_000_000


@pytest.fixture
def index(client: Client) -> ScheduleIndex:
    return ScheduleIndex(Ledger(client))


def made(index: ScheduleIndex, schedule_id: str = "s1", next_ms: int | None = NOW) -> Schedule:
    schedule = Schedule(
        schedule_id=schedule_id,
        message="tick",
        conversation_id=None,
        model=None,
        tenant="default",
        at_ms=None,
        every="*/5 * * * *",
        catch_up="one",
        next_ms=next_ms,
        last_turn_id=None,
        created_ms=NOW - 60_000,
    )
    assert index.make(schedule)
    return schedule


def test_a_schedule_reads_back_as_made_and_its_id_is_made_once(index: ScheduleIndex) -> None:
    schedule = made(index)
    assert index.get("s1") == schedule
    assert not index.make(schedule)
    assert index.due(NOW, 10) == ["s1"] and index.due(NOW - 1, 10) == []


def test_one_claim_at_a_time_and_only_on_the_schedule_s_next_tick(index: ScheduleIndex) -> None:
    made(index)
    assert index.claim("s1", NOW - 5, NOW, 10_000, NOW) is None  # not its next tick
    assert index.claim("s1", NOW, NOW, 10_000, NOW) == str(NOW)
    assert index.claim("s1", NOW, NOW + 9_999, 10_000, NOW + 60_000) is None  # held
    # the claim expired with its holder: the next one fires the same tick, whatever it would
    assert index.claim("s1", NOW, NOW + 10_001, 10_000, NOW + 60_000) == str(NOW)


def test_the_advance_moves_only_from_the_tick_read_and_clears_the_claim(
    index: ScheduleIndex,
) -> None:
    made(index)
    assert index.claim("s1", NOW, NOW, 10_000, NOW) == str(NOW)
    assert index.advance("s1", NOW, NOW + 300_000, "turn_a")
    assert not index.advance("s1", NOW, NOW + 600_000, "turn_b")  # moved on already
    after = index.get("s1")
    assert after is not None
    assert (after.next_ms, after.last_turn_id, after.firing) == (NOW + 300_000, "turn_a", None)
    assert index.due(NOW + 299_999, 10) == [] and index.due(NOW + 300_000, 10) == ["s1"]
    assert index.claim("s1", NOW + 300_000, NOW + 300_000, 10_000, None) == ""  # fire nothing
    assert index.advance("s1", NOW + 300_000, None, None)  # spent
    spent = index.get("s1")
    assert spent is not None and (spent.next_ms, spent.last_turn_id) == (None, "turn_a")
    assert index.due(NOW * 2, 10) == []


def test_a_deleted_schedule_has_nothing_left_to_claim_advance_or_list(
    index: ScheduleIndex,
) -> None:
    made(index)
    made(index, "s2")
    assert index.delete("s1") and not index.delete("s1")
    assert index.claim("s1", NOW, NOW, 10_000, NOW) is None
    assert not index.advance("s1", NOW, NOW + 1, "turn_x")
    assert index.get("s1") is None
    assert index.due(NOW, 10) == ["s2"]
    assert [s.schedule_id for s in index.page(limit=10)[0]] == ["s2"]
