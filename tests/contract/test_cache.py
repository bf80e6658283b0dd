"""A process's event cache: a turn's next read returns the whole turn, reading only what is new.

Run on fakeredis and on a real redis-server. Each test compares the cache's answer with a plain
whole-turn read of the same stream, which is what layer 2's snapshot must equal.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest
import redis
from factories import base, done, start, text, turn_started

from ledger import keys
from ledger.cache import EventCache
from ledger.events import Event, RunEnded
from ledger.lease import Claim
from ledger.store import Lease, Ledger
from ledger.turn import Step
from ledger.turns import TurnStore

FAR = 2**62


def new_turn(ledger: Ledger, turn_id: str = "t1") -> Lease:
    store = TurnStore(ledger)
    assert store.create(turn_started(turn_id), first_run="r1", look_at_ms=0, fields={})
    claim = store.claim(turn_id, "r1", lease_until_ms=FAR, event_id=f"claim-{turn_id}", ts=1.0)
    assert claim.lease is not None
    return claim.lease


def ids(events: list[Event]) -> list[str]:
    return [e.event_id for e in events]


def test_a_second_read_returns_the_whole_turn_reading_only_the_new_entries(
    client: redis.Redis,
) -> None:
    ledger = Ledger(client)
    lease = new_turn(ledger)
    cache = EventCache(ledger)
    assert ids(cache.events("t1")) == ids(ledger.events("t1"))
    ledger.append_many([start("send_email", {"to": "a"}), done("send_email", "ok")], lease=lease)

    events = cache.events("t1")

    assert ids(events) == ids(ledger.events("t1"))
    assert [e.type for e in events][-2:] == ["tool_start", "tool_done"]
    assert (cache.misses, cache.hits) == (1, 1)


def test_an_append_its_writer_never_saw_land_is_in_the_next_read(client: redis.Redis) -> None:
    # A soft limit can cut a writer off after its XADD landed and before it noted the event: the
    # cache remembers reads only, so the next read still has the entry.
    ledger = Ledger(client)
    lease = new_turn(ledger)
    cache = EventCache(ledger)
    cache.events("t1")
    landed = start("send_email", {"to": "a"})
    ledger.append(landed, lease=lease)

    assert landed.event_id in ids(cache.events("t1"))


def test_the_caller_may_extend_the_list_it_gets(client: redis.Redis) -> None:
    ledger = Ledger(client)
    new_turn(ledger)
    cache = EventCache(ledger)
    first = cache.events("t1")
    first.append(text("only in the caller's memory"))

    assert ids(cache.events("t1")) == ids(ledger.events("t1"))


def test_a_turn_whose_stream_was_replaced_is_read_whole(client: redis.Redis) -> None:
    ledger = Ledger(client)
    first = new_turn(ledger)
    ledger.append(text("before the replacement"), lease=first)
    cache = EventCache(ledger)
    cache.events("t1")
    client.delete(keys.turn_events("t1"), keys.turn_meta("t1"))  # expired ...
    lease = new_turn(ledger)  # ... and created again under the same id
    ledger.append(text("after the replacement"), lease=lease)

    events = cache.events("t1")

    assert ids(events) == ids(ledger.events("t1"))
    assert (cache.misses, cache.hits) == (2, 0)


def test_a_forgotten_turn_is_read_whole(client: redis.Redis) -> None:
    ledger = Ledger(client)
    new_turn(ledger)
    cache = EventCache(ledger)
    cache.events("t1")
    cache.forget("t1")

    assert ids(cache.events("t1")) == ids(ledger.events("t1"))
    assert (cache.misses, cache.hits) == (2, 0)


def test_the_least_recently_read_turn_is_dropped_beyond_max_turns(client: redis.Redis) -> None:
    ledger = Ledger(client)
    for turn_id in ("t1", "t2", "t3"):
        new_turn(ledger, turn_id)
    cache = EventCache(ledger, max_turns=2)
    cache.events("t1")
    cache.events("t2")
    cache.events("t1")  # t2 is now the least recently read
    cache.events("t3")

    assert len(cache) == 2
    cache.events("t1")
    assert cache.hits == 2
    cache.events("t2")
    assert cache.misses == 4


def test_a_malformed_entry_after_the_last_read_is_skipped_and_later_events_kept(
    client: redis.Redis,
) -> None:
    ledger = Ledger(client)
    lease = new_turn(ledger)
    cache = EventCache(ledger)
    cache.events("t1")
    client.xadd(keys.turn_events("t1"), {"e": b"{not json"}, id=f"{lease.epoch}-10")
    later = done("send_email", "ok")
    ledger.append(later, lease=lease)

    events = cache.events("t1")

    assert ids(events) == ids(ledger.events("t1"))
    assert events[-1].event_id == later.event_id


def test_an_empty_or_unknown_turn_is_not_remembered(client: redis.Redis) -> None:
    cache = EventCache(Ledger(client))
    assert cache.events("nope") == []
    assert len(cache) == 0


def test_max_turns_must_be_positive(client: redis.Redis) -> None:
    with pytest.raises(ValueError, match="max_turns"):
        EventCache(Ledger(client), max_turns=0)


def handed_over(ledger: Ledger, lease: Lease, successor: str) -> None:
    store = TurnStore(ledger)
    ended = RunEnded(**base(lease.turn_id, lease.run_id), reason="soft_limit")
    store.transition(
        lease.turn_id,
        Step.HAND_OVER,
        expect=store.holder(lease),
        events=[ended],
        fields={"next_run": successor},
    )


def claim_next(ledger: Ledger, run_id: str, read_from: str) -> Claim:
    return TurnStore(ledger).claim(
        "t1", run_id, lease_until_ms=FAR, event_id=f"claim-{run_id}", ts=1.0, read_from=read_from
    )


def test_a_claim_reads_the_turn_in_its_own_step_its_run_started_included(
    client: redis.Redis,
) -> None:
    ledger = Ledger(client)
    lease = new_turn(ledger)
    handed_over(ledger, lease, "r2")

    claim = claim_next(ledger, "r2", "-")

    assert claim.lease is not None and claim.read_all
    assert claim.entries is not None
    assert ids([e.event for e in claim.entries]) == ids(ledger.events("t1"))
    assert claim.entries[-1].event.type == "run_started"


def test_a_claim_through_the_cache_reads_only_from_the_last_remembered_entry(
    client: redis.Redis,
) -> None:
    ledger = Ledger(client)
    lease = new_turn(ledger)
    cache = EventCache(ledger)
    cache.events("t1")
    ledger.append(start("send_email", {"to": "a"}), lease=lease)
    handed_over(ledger, lease, "r2")
    point = cache.read_point("t1")

    claim = claim_next(ledger, "r2", point)
    snapshot = cache.absorb(claim)

    assert claim.entries is not None and claim.entries[0].stream_id == point
    assert len(claim.entries) == 4  # the remembered last entry, tool_start, run_ended, run_started
    assert snapshot is not None and ids(snapshot) == ids(ledger.events("t1"))
    assert cache.hits == 1


def test_a_claim_read_cut_at_a_page_is_completed_by_the_next_read(client: redis.Redis) -> None:
    ledger = Ledger(client, page=3)
    lease = new_turn(ledger)
    ledger.append_many([text(f"part {n}") for n in range(5)], lease=lease)
    handed_over(ledger, lease, "r2")
    cache = EventCache(ledger)

    claim = claim_next(ledger, "r2", cache.read_point("t1"))

    assert claim.lease is not None and not claim.read_all
    assert cache.absorb(claim) is None  # the run reads the rest itself
    assert ids(cache.events("t1")) == ids(ledger.events("t1"))
    assert cache.hits == 1


def test_a_claim_that_loses_reads_nothing(client: redis.Redis) -> None:
    ledger = Ledger(client)
    lease = new_turn(ledger)
    handed_over(ledger, lease, "r2")
    claim = claim_next(ledger, "stale", "-")
    assert claim.lease is None and claim.entries is None
    assert EventCache(ledger).absorb(claim) is None


def test_a_claim_read_of_a_replaced_stream_is_not_trusted(client: redis.Redis) -> None:
    ledger = Ledger(client)
    first = new_turn(ledger)
    ledger.append(text("before the replacement"), lease=first)
    cache = EventCache(ledger)
    cache.events("t1")
    point = cache.read_point("t1")
    client.delete(keys.turn_events("t1"), keys.turn_meta("t1"))
    lease = new_turn(ledger)
    ledger.append(text("after the replacement"), lease=lease)
    handed_over(ledger, lease, "r2")

    assert cache.absorb(claim_next(ledger, "r2", point)) is None
    assert ids(cache.events("t1")) == ids(ledger.events("t1"))


class Tally:
    """A fold that records every event it is fed, in every copy, in one shared list."""

    fed: list[str]

    def __init__(self) -> None:
        self.seen: list[str] = []

    def feed(self, events: Iterable[Event]) -> Tally:
        new = [e.event_id for e in events]
        self.seen += new
        self.fed += new
        return self

    def copy(self) -> Tally:
        twin = type(self)()
        twin.seen = list(self.seen)
        return twin


def tally() -> type[Tally]:
    """A fresh kind of fold per test (the cache keeps folds by kind)."""
    return type("OneTestTally", (Tally,), {"fed": []})


def test_a_fold_of_the_next_read_folds_only_the_new_events(client: redis.Redis) -> None:
    ledger = Ledger(client)
    lease = new_turn(ledger)
    cache = EventCache(ledger)
    kind = tally()
    first = cache.fold("t1", cache.events("t1"), kind)
    ledger.append_many([start("send_email", {"to": "a"}), done("send_email", "ok")], lease=lease)

    second = cache.fold("t1", cache.events("t1"), kind)

    assert first.seen == ids(ledger.events("t1"))[:2]
    assert second.seen == ids(ledger.events("t1"))
    assert kind.fed == second.seen  # each event folded once, in order


def test_a_callers_own_events_are_folded_into_its_copy_only(client: redis.Redis) -> None:
    ledger = Ledger(client)
    new_turn(ledger)
    cache = EventCache(ledger)
    kind = tally()
    events = cache.events("t1")
    own = text("written by this run; a time limit may have cut its append")
    events.append(own)

    mine = cache.fold("t1", events, kind)
    again = cache.fold("t1", cache.events("t1"), kind)

    assert mine.seen == [*ids(ledger.events("t1")), own.event_id]
    assert again.seen == ids(ledger.events("t1"))


def test_a_list_the_cache_did_not_give_is_folded_whole(client: redis.Redis) -> None:
    ledger = Ledger(client)
    new_turn(ledger)
    cache = EventCache(ledger)
    kind = tally()
    cache.fold("t1", cache.events("t1"), kind)
    kind.fed.clear()

    # the same events, decoded again: equal, but not the ones the cache's fold was fed
    folded = cache.fold("t1", ledger.events("t1"), kind)

    assert folded.seen == kind.fed == ids(ledger.events("t1"))


def test_a_turn_whose_stream_was_replaced_is_folded_afresh(client: redis.Redis) -> None:
    ledger = Ledger(client)
    first = new_turn(ledger)
    ledger.append(text("before the replacement"), lease=first)
    cache = EventCache(ledger)
    kind = tally()
    cache.fold("t1", cache.events("t1"), kind)
    client.delete(keys.turn_events("t1"), keys.turn_meta("t1"))
    lease = new_turn(ledger)
    ledger.append(text("after the replacement"), lease=lease)

    folded = cache.fold("t1", cache.events("t1"), kind)

    assert folded.seen == ids(ledger.events("t1"))


def test_a_claims_snapshot_continues_the_fold_of_the_last_read(client: redis.Redis) -> None:
    ledger = Ledger(client)
    lease = new_turn(ledger)
    cache = EventCache(ledger)
    kind = tally()
    cache.fold("t1", cache.events("t1"), kind)
    ledger.append(start("send_email", {"to": "a"}), lease=lease)
    handed_over(ledger, lease, "r2")
    kind.fed.clear()

    snapshot = cache.absorb(claim_next(ledger, "r2", cache.read_point("t1")))
    assert snapshot is not None
    folded = cache.fold("t1", snapshot, kind)

    assert folded.seen == ids(ledger.events("t1"))
    assert kind.fed == folded.seen[-3:]  # tool_start, run_ended, run_started
