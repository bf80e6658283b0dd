"""The ledger store, run on fakeredis and on a real redis-server (CONTRACT §6, §9)."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import redis
from conftest import Backend
from factories import done, start, text, turn_started

from ledger import keys
from ledger.errors import FencedOut, UnknownTurn
from ledger.events import RunEnded, TurnEnded
from ledger.store import Ledger

LEASE = 2**62  # a lease deadline far in the future (ms)


def new_turn(ledger: Ledger, turn_id: str = "t1") -> int:
    """Create a turn and claim its first run; returns the run's lease epoch."""
    assert ledger.create_turn(turn_started(turn_id), first_run="r1")
    claim = ledger.claim(turn_id, "r1", lease_until_ms=LEASE)
    assert claim.claimed
    return claim.epoch


def test_create_turn_records_turn_started_and_queues_the_first_run(client: redis.Redis) -> None:
    ledger = Ledger(client)
    assert ledger.create_turn(turn_started("t1", "hi"), first_run="r1")
    meta = ledger.meta("t1")
    assert (meta.status, meta.epoch, meta.next_run, meta.runs) == ("queued", 0, "r1", 0)
    assert [e.type for e in ledger.events("t1")] == ["turn_started"]


def test_create_turn_twice_changes_nothing(client: redis.Redis) -> None:
    ledger = Ledger(client)
    assert ledger.create_turn(turn_started("t1", "first"), first_run="r1")
    assert not ledger.create_turn(turn_started("t1", "second"), first_run="r2")
    assert ledger.meta("t1").next_run == "r1"
    assert [e.message for e in ledger.events("t1")] == ["first"]  # type: ignore[union-attr]


def test_only_the_pending_run_claims_and_only_once(client: redis.Redis) -> None:
    ledger = Ledger(client)
    ledger.create_turn(turn_started(), first_run="r1")
    assert not ledger.claim("t1", "other", lease_until_ms=LEASE).claimed
    first = ledger.claim("t1", "r1", lease_until_ms=LEASE)
    duplicate = ledger.claim("t1", "r1", lease_until_ms=LEASE)
    assert first.claimed and first.epoch == 1 and first.chunk == 0
    assert not duplicate.claimed and duplicate.holder == "r1" and duplicate.status == "running"
    meta = ledger.meta("t1")
    assert (meta.status, meta.run_id, meta.runs, meta.next_run) == ("running", "r1", 1, "")


def test_claiming_an_unknown_turn_raises_unknown_turn(client: redis.Redis) -> None:
    with pytest.raises(UnknownTurn, match="nope"):
        Ledger(client).claim("nope", "r1", lease_until_ms=LEASE)


def test_append_with_a_stale_epoch_is_rejected_and_writes_nothing(client: redis.Redis) -> None:
    ledger = Ledger(client)
    old = new_turn(ledger)
    # The run hands over to a successor, which claims the turn with a new epoch.
    ledger.append(
        RunEnded(**text("x").model_dump(exclude={"type", "text"}), reason="soft_limit"),
        epoch=old,
    )
    ledger.update_meta("t1", epoch=old, meta={"next_run": "r2", "next_chunk": 1})
    new = ledger.claim("t1", "r2", lease_until_ms=LEASE)
    assert new.claimed and new.epoch == old + 1 and new.chunk == 1
    before = ledger.read_turn("t1")
    with pytest.raises(FencedOut) as info:
        ledger.append(text("zombie write"), epoch=old)
    assert (info.value.presented, info.value.current) == (old, new.epoch)
    with pytest.raises(FencedOut):
        ledger.update_meta("t1", epoch=old, meta={"status": "completed"})
    assert ledger.read_turn("t1") == before
    assert ledger.meta("t1").status == "running"
    ledger.append(text("successor write"), epoch=new.epoch)


def test_append_to_a_turn_that_does_not_exist_raises_unknown_turn(client: redis.Redis) -> None:
    with pytest.raises(UnknownTurn):
        Ledger(client).append(text("x", turn_id="ghost"), epoch=1)


def test_a_retried_append_of_the_same_event_adds_no_second_entry(client: redis.Redis) -> None:
    ledger = Ledger(client)
    epoch = new_turn(ledger)
    event = start("send_email", {"to": "a@x.io"}, call_id="c1")
    first = ledger.append(event, epoch=epoch)
    again = ledger.append(event, epoch=epoch)
    assert first == again
    assert [e.event_id for e in ledger.events("t1")].count(event.event_id) == 1


def test_an_append_whose_reply_was_lost_is_retried_without_duplicating(
    client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The XADD ran but the connection dropped before the reply: the retry returns the same id."""
    ledger = Ledger(client)
    epoch = new_turn(ledger)
    real = client.evalsha
    lost: list[bool] = []

    def reply_lost_once(*args: object, **kwargs: object) -> object:
        reply = real(*args, **kwargs)  # type: ignore[arg-type]
        if not lost:
            lost.append(True)
            raise redis.ConnectionError("connection reset after the command ran")
        return reply

    monkeypatch.setattr(client, "evalsha", reply_lost_once)
    sid = ledger.append(text("once"), epoch=epoch)
    assert lost
    assert [env.stream_id for env in ledger.read_turn("t1") if env.event.type == "text"] == [sid]


def test_a_batch_append_keeps_order_across_script_batches(client: redis.Redis) -> None:
    ledger = Ledger(client)
    epoch = new_turn(ledger)
    batch = [text(f"part {i}") for i in range(700)]
    ids = ledger.append_many(batch, epoch=epoch, meta={"chunk": 3})
    assert len(ids) == 700 and ids == sorted(ids, key=lambda s: tuple(map(int, s.split("-"))))
    assert [e.text for e in ledger.events("t1")[1:]] == [f"part {i}" for i in range(700)]  # type: ignore[union-attr]
    assert ledger.meta("t1").chunk == 3


def test_paged_read_of_25k_events_returns_every_event_in_order(client: redis.Redis) -> None:
    ledger = Ledger(client, page=1000)
    epoch = new_turn(ledger)
    ledger.append_many([text(str(i)) for i in range(25_000)], epoch=epoch)
    events = ledger.events("t1")
    assert len(events) == 25_001
    assert [e.text for e in events[1:]] == [str(i) for i in range(25_000)]  # type: ignore[union-attr]


def test_read_after_returns_only_events_strictly_after_the_id(client: redis.Redis) -> None:
    ledger = Ledger(client, page=3)
    epoch = new_turn(ledger)
    ids = ledger.append_many([text(str(i)) for i in range(10)], epoch=epoch)
    after = ledger.read_after("t1", ids[4])
    assert [env.stream_id for env in after] == ids[5:]
    assert [env.stream_id for env in ledger.read_after("t1", ids[4], limit=2)] == ids[5:7]
    assert ledger.last_id("t1") == ids[-1]


def test_tail_from_an_id_while_another_connection_appends_has_no_gap_and_no_duplicate(
    backend: Backend,
) -> None:
    writer = Ledger(backend.connect())
    epoch = new_turn(writer)
    first = writer.append_many([text(f"old {i}") for i in range(5)], epoch=epoch)
    reader = Ledger(backend.connect())
    appended: list[str] = []

    def write() -> None:
        for i in range(200):
            appended.append(writer.append(text(f"live {i}"), epoch=epoch))

    thread = threading.Thread(target=write)
    seen: list[str] = []
    deadline = time.monotonic() + 20
    tail = reader.tail("t1", after=first[1], block_ms=100, count=7)
    thread.start()
    for batch in tail:
        seen += [env.stream_id for env in batch]
        if len(seen) >= 3 + 200 or time.monotonic() > deadline:
            break
    thread.join()
    assert seen == first[2:] + appended


def test_tail_yields_an_empty_batch_when_nothing_arrives(client: redis.Redis) -> None:
    ledger = Ledger(client)
    new_turn(ledger)
    last = ledger.last_id("t1")
    assert last is not None
    assert next(ledger.tail("t1", after=last, block_ms=50)) == []


def test_a_malformed_entry_is_skipped_with_a_warning(
    client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = Ledger(client)
    epoch = new_turn(ledger)
    stream = keys.turn_events("t1")
    bad_json = client.xadd(stream, {"e": "{not json"})
    no_field = client.xadd(stream, {"x": "1"})
    unknown_type = client.xadd(stream, {"e": '{"type": "mystery", "v": 1}'})
    ledger.append(done("send_email", {"ok": True}, call_id="c1"), epoch=epoch)
    with caplog.at_level(logging.WARNING, logger="ledger.store"):
        types = [e.type for e in ledger.events("t1")]
        tailed = next(ledger.tail("t1", block_ms=10))
    assert types == ["turn_started", "tool_done"]
    assert [env.event.type for env in tailed] == types
    skipped = [r.stream_id for r in caplog.records if r.msg == "skipped malformed ledger entry"]  # type: ignore[attr-defined]
    ids = [i.decode() for i in (bad_json, no_field, unknown_type)]
    assert skipped == ids + ids


def test_ending_a_turn_sets_its_status_and_the_finished_expiry(client: redis.Redis) -> None:
    ledger = Ledger(client, finished_ttl_s=3600)
    epoch = new_turn(ledger)
    ended = TurnEnded(**text("x").model_dump(exclude={"type", "text"}), status="completed")
    ledger.append_many([ended], epoch=epoch, meta={"status": "completed"}, expire=True)
    assert ledger.meta("t1").status == "completed"
    for key in keys.turn_keys("t1"):
        assert 3500 < client.ttl(key) <= 3600


def test_an_unfinished_turn_has_no_expiry(client: redis.Redis) -> None:
    ledger = Ledger(client)
    epoch = new_turn(ledger)
    ledger.append(text("x"), epoch=epoch)
    assert all(client.ttl(key) == -1 for key in keys.turn_keys("t1"))


def test_meta_of_an_unknown_turn_raises_unknown_turn(client: redis.Redis) -> None:
    with pytest.raises(UnknownTurn):
        Ledger(client).meta("nope")
