"""The ledger store, run on fakeredis and on a real redis-server (docs/events.md,
docs/architecture.md).

Turns are created, claimed and moved on through ``TurnStore`` (the one writer of a turn's
metadata); ``Ledger`` appends a run's events under its lease and reads them back.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
import redis
from factories import base, done, start, text, turn_started

from ledger import keys
from ledger.errors import CorruptTurn, FencedOut, StopRequested, TransitionRefused, UnknownTurn
from ledger.events import ModelStart, RunEnded, RunStarted, Text, TurnEnded
from ledger.store import Lease, Ledger
from ledger.turn import Step
from ledger.turns import EXPIRE, TurnStore
from tests.support import Backend

FAR = 2**62  # a lease deadline far in the future (ms)


def create(store: TurnStore, turn_id: str = "t1", first_run: str = "r1", **kw: str) -> bool:
    event = turn_started(turn_id, **kw)
    return store.create(event, first_run=first_run, look_at_ms=0, fields={})


def claim(store: TurnStore, run_id: str, turn_id: str = "t1") -> Lease:
    result = store.claim(turn_id, run_id, lease_until_ms=FAR, event_id=f"claim-{run_id}", ts=1.0)
    assert result.lease is not None, f"{run_id} could not claim {turn_id}"
    return result.lease


def new_turn(ledger: Ledger, turn_id: str = "t1") -> Lease:
    """Create a turn and claim its first run; returns the run's lease."""
    store = TurnStore(ledger)
    assert create(store, turn_id)
    return claim(store, "r1", turn_id)


def hand_over(store: TurnStore, lease: Lease, successor: str, **fields: str | int) -> int:
    """The run ends at its soft limit and ``successor`` is pending; returns the new epoch."""
    ended = RunEnded(**base(lease.turn_id, lease.run_id), reason="soft_limit")
    return store.transition(
        lease.turn_id,
        Step.HAND_OVER,
        expect=store.holder(lease),
        events=[ended],
        fields={"next_run": successor, "next_chunk": lease.chunk + 1, **fields},
    )


def test_create_turn_records_turn_started_and_queues_the_first_run(client: redis.Redis) -> None:
    ledger = Ledger(client)
    assert create(TurnStore(ledger), message="hi")
    meta = ledger.meta("t1")
    assert (meta.status, meta.epoch, meta.next_run, meta.runs) == ("queued", 0, "r1", 0)
    assert [e.type for e in ledger.events("t1")] == ["turn_started"]


def test_create_turn_twice_changes_nothing(client: redis.Redis) -> None:
    ledger = Ledger(client)
    store = TurnStore(ledger)
    assert create(store, message="first")
    assert not create(store, first_run="r2", message="second")
    assert ledger.meta("t1").next_run == "r1"
    assert [e.message for e in ledger.events("t1")] == ["first"]  # type: ignore[union-attr]


def test_only_the_pending_run_claims_and_only_once(client: redis.Redis) -> None:
    ledger = Ledger(client)
    store = TurnStore(ledger)
    create(store)
    other = store.claim("t1", "other", lease_until_ms=FAR, event_id="x1", ts=1.0)
    assert not other.claimed and other.status == "queued"
    lease = claim(store, "r1")
    duplicate = store.claim("t1", "r1", lease_until_ms=FAR, event_id="x2", ts=1.0)
    assert (lease.epoch, lease.chunk, lease.cause) == (1, 0, "first")
    assert not duplicate.claimed and duplicate.holder == "r1" and duplicate.status == "running"
    meta = ledger.meta("t1")
    assert (meta.status, meta.run_id, meta.runs, meta.next_run) == ("running", "r1", 1, "")


def test_a_claim_records_run_started_at_the_new_epochs_first_stream_id(
    client: redis.Redis,
) -> None:
    ledger = Ledger(client)
    lease = new_turn(ledger)
    [_, started] = ledger.read_turn("t1")
    assert started.stream_id == f"{lease.epoch}-0"
    assert started.event.type == "run_started" and started.event.epoch == lease.epoch  # type: ignore[union-attr]


def test_the_claims_run_started_takes_chunk_cause_and_epoch_from_the_metadata(
    client: redis.Redis,
) -> None:
    ledger = Ledger(client)
    store = TurnStore(ledger)
    lease = new_turn(ledger)
    handed = hand_over(store, lease, "r2", next_chunk=3, next_cause="next_chunk")

    result = store.claim("t1", "r2", lease_until_ms=FAR, event_id="s2", ts=1234.5)

    assert result.lease is not None
    new = handed + 1
    assert (result.lease.epoch, result.lease.chunk, result.lease.cause) == (new, 3, "next_chunk")
    started = ledger.read_turn("t1")[-1]
    assert started.stream_id == f"{new}-0"
    assert started.event == RunStarted(
        event_id="s2", turn_id="t1", run_id="r2", chunk=3, ts=1234.5, cause="next_chunk", epoch=new
    )
    after = ledger.meta("t1")
    assert (after.chunk, after.runs, after.run_id, after.status) == (3, 2, "r2", "running")


def test_a_claim_holds_the_lease_until_the_deadline_it_was_given_whatever_the_mode(
    client: redis.Redis,
) -> None:
    """One short lease for every mode (the heartbeat renews it); read back as a typed number."""
    ledger = Ledger(client)
    store = TurnStore(ledger)
    for turn_id, mode in (("t1", "foreground"), ("t2", "background")):
        create(store, turn_id, mode=mode)
        store.claim(turn_id, "r1", lease_until_ms=900, event_id=f"s-{turn_id}", ts=1.0)
        assert ledger.meta(turn_id).lease_until == 900


def test_a_claim_escapes_ids_in_the_event_it_builds(client: redis.Redis) -> None:
    turn_id = 'odd "turn" \\ ü'
    ledger = Ledger(client)
    store = TurnStore(ledger)
    create(store, turn_id, first_run='r "1"')
    assert store.claim(turn_id, 'r "1"', lease_until_ms=FAR, event_id='e"1', ts=1.0).claimed
    [_, started] = ledger.events(turn_id)
    assert (started.turn_id, started.run_id, started.event_id) == (turn_id, 'r "1"', 'e"1')


def test_a_pending_cause_that_is_not_one_of_ours_is_refused_and_nothing_written(
    client: redis.Redis,
) -> None:
    ledger = Ledger(client)
    store = TurnStore(ledger)
    create(store)
    client.hset(keys.turn_meta("t1"), "next_cause", 'x","epoch":99')
    with pytest.raises(CorruptTurn, match="next_cause"):
        store.claim("t1", "r1", lease_until_ms=FAR, event_id="s", ts=1.0)
    assert [e.type for e in ledger.events("t1")] == ["turn_started"]
    assert ledger.meta("t1").status == "queued"


def test_a_claim_whose_reply_was_lost_is_retried_and_recognised_as_its_own(
    client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger(client)
    store = TurnStore(ledger)
    create(store)
    real = store._claim
    lost: list[bool] = []

    def reply_lost_once(*args: object, **kwargs: object) -> object:
        reply = real(*args, **kwargs)  # type: ignore[arg-type]
        if not lost:
            lost.append(True)
            raise redis.ConnectionError("Connection closed by server.")
        return reply

    monkeypatch.setattr(store, "_claim", reply_lost_once)
    result = store.claim("t1", "r1", lease_until_ms=FAR, event_id="mine", ts=1.0)
    assert lost and result.lease is not None
    assert (result.lease.epoch, result.lease.chunk, result.lease.cause) == (1, 0, "first")
    assert [e.event_id for e in ledger.events("t1") if e.type == "run_started"] == ["mine"]


def test_claiming_an_unknown_turn_raises_unknown_turn(client: redis.Redis) -> None:
    with pytest.raises(UnknownTurn, match="nope"):
        TurnStore(Ledger(client)).claim("nope", "r1", lease_until_ms=FAR, event_id="e", ts=1.0)


def test_a_zombie_cannot_append_once_its_successor_claimed_the_turn(client: redis.Redis) -> None:
    """Nor end the turn: a step under its old lease's conditions is refused, writing nothing."""
    ledger = Ledger(client)
    store = TurnStore(ledger)
    old = new_turn(ledger)
    hand_over(store, old, "r2")
    new = claim(store, "r2")
    assert new.epoch == old.epoch + 2 and new.chunk == 1  # the hand-over's epoch, the claim's
    before = ledger.read_turn("t1")
    with pytest.raises(FencedOut) as info:
        ledger.append(text("zombie write"), lease=old)
    assert (info.value.presented, info.value.current) == (old.epoch, new.epoch)
    ended = TurnEnded(**base(), status="completed")
    with pytest.raises(TransitionRefused) as refused:
        store.transition("t1", Step.COMPLETE, expect=store.holder(old), events=[ended])
    assert (refused.value.why, refused.value.found) == ("CHANGED", f"epoch {new.epoch}")
    with pytest.raises(FencedOut):
        ledger.append_many([text("zombie batch"), text("zombie batch 2")], lease=old)
    assert ledger.read_turn("t1") == before
    assert ledger.meta("t1").status == "running"
    ledger.append(text("successor write"), lease=new)


def test_a_zombie_that_kept_appending_is_fenced_by_the_takeover_alone(client: redis.Redis) -> None:
    """No claim or write of a successor is needed: the takeover's run_ended fences the zombie."""
    ledger = Ledger(client)
    store = TurnStore(ledger)
    old = new_turn(ledger)
    for i in range(5):
        ledger.append(text(f"old {i}"), lease=old)
    meta = store.meta("t1")
    crashed = RunEnded(**base(), reason="crashed")
    store.transition(
        "t1",
        Step.TAKE_OVER,
        expect={"run_id": meta.run_id, "epoch": meta.epoch, "lease_until": meta.lease_until},
        events=[crashed],
        fields={"next_run": "r2"},
    )
    with pytest.raises(FencedOut):
        ledger.append(text("late"), lease=old)
    with pytest.raises(FencedOut):
        ledger.append_many([text("late 1"), text("late 2")], lease=old)
    assert ledger.events("t1")[-1] == crashed


def test_append_to_a_turn_that_does_not_exist_raises_unknown_turn(client: redis.Redis) -> None:
    lease = Lease("ghost", "r1", epoch=1, chunk=0)
    with pytest.raises(UnknownTurn):
        Ledger(client).append(text("x", turn_id="ghost"), lease=lease)
    assert client.exists(keys.turn_events("ghost")) == 0


def test_appending_the_same_event_again_adds_no_second_entry(client: redis.Redis) -> None:
    ledger = Ledger(client)
    lease = new_turn(ledger)
    event = start("send_email", {"to": "a@x.io"}, call_id="c1")
    first = ledger.append(event, lease=lease)
    again = ledger.append(event, lease=lease)
    assert first == again
    assert [e.event_id for e in ledger.events("t1")].count(event.event_id) == 1


def test_an_append_whose_reply_was_lost_is_retried_without_duplicating(
    client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The XADD ran but the connection dropped before the reply: the retry finds it landed."""
    ledger = Ledger(client)
    lease = new_turn(ledger)
    real = client.execute_command
    lost: list[bool] = []

    def reply_lost_once(*args: object, **kwargs: object) -> object:
        reply = real(*args, **kwargs)
        if args[0] == "XADD" and not lost:
            lost.append(True)
            raise redis.ConnectionError("connection reset after the command ran")
        return reply

    monkeypatch.setattr(client, "execute_command", reply_lost_once)
    sid = ledger.append(text("once"), lease=lease)
    assert lost
    assert [env.stream_id for env in ledger.read_turn("t1") if env.event.type == "text"] == [sid]
    assert ledger.append(text("next"), lease=lease) != sid


def test_after_an_append_abandoned_mid_flight_the_next_append_goes_after_it(
    client: redis.Redis,
) -> None:
    """An interrupted XADD may have landed; the run's next event is added after it, not lost."""
    ledger = Ledger(client)
    lease = new_turn(ledger)
    client.xadd(keys.turn_events("t1"), {"e": text("landed").model_dump_json()}, id=lease.next_id())
    ledger.append(text("after"), lease=lease)
    assert [e.text for e in ledger.events("t1")[2:]] == ["landed", "after"]  # type: ignore[union-attr]


def test_a_batch_append_keeps_order_across_script_batches(client: redis.Redis) -> None:
    ledger = Ledger(client)
    lease = new_turn(ledger)
    meta = ledger.meta("t1")
    batch = [text(f"part {i}") for i in range(700)]
    ids = ledger.append_many(batch, lease=lease)
    assert ids == [f"{lease.epoch}-{i}" for i in range(1, 701)]
    assert [e.text for e in ledger.events("t1")[2:]] == [f"part {i}" for i in range(700)]  # type: ignore[union-attr]
    assert ledger.meta("t1") == meta  # an append never changes the metadata
    assert ledger.append(text("then one more"), lease=lease) == f"{lease.epoch}-701"


def test_a_retried_batch_whose_first_attempt_landed_adds_nothing_twice(
    client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger(client)
    lease = new_turn(ledger)
    real = ledger._append_batch_script
    lost: list[bool] = []

    def reply_lost_once(*args: object, **kwargs: object) -> object:
        reply = real(*args, **kwargs)  # type: ignore[arg-type]
        if not lost:
            lost.append(True)
            raise redis.ConnectionError("connection reset after the script ran")
        return reply

    monkeypatch.setattr(ledger, "_append_batch_script", reply_lost_once)
    ids = ledger.append_many([text("a"), text("b")], lease=lease)
    assert lost and [e.text for e in ledger.events("t1")[2:]] == ["a", "b"]  # type: ignore[union-attr]
    assert ids == [f"{lease.epoch}-1", f"{lease.epoch}-2"]
    assert ledger.append(text("c"), lease=lease) == f"{lease.epoch}-3"


def test_paged_read_of_25k_events_returns_every_event_in_order(client: redis.Redis) -> None:
    ledger = Ledger(client, page=1000)
    lease = new_turn(ledger)
    ledger.append_many([text(str(i)) for i in range(25_000)], lease=lease)
    events = ledger.events("t1")
    assert len(events) == 25_002
    assert [e.text for e in events[2:]] == [str(i) for i in range(25_000)]  # type: ignore[union-attr]


def test_read_after_returns_only_events_strictly_after_the_id(client: redis.Redis) -> None:
    ledger = Ledger(client, page=3)
    lease = new_turn(ledger)
    ids = [ledger.append(text(str(i)), lease=lease) for i in range(10)]
    after = ledger.read_after("t1", ids[4])
    assert [env.stream_id for env in after] == ids[5:]
    assert [env.stream_id for env in ledger.read_after("t1", ids[4], limit=2)] == ids[5:7]
    assert ledger.last_id("t1") == ids[-1]


def test_tail_from_an_id_while_another_connection_appends_has_no_gap_and_no_duplicate(
    backend: Backend,
) -> None:
    writer = Ledger(backend.connect())
    lease = new_turn(writer)
    first = [writer.append(text(f"old {i}"), lease=lease) for i in range(5)]
    reader = Ledger(backend.connect())
    appended: list[str] = []

    def write() -> None:
        for i in range(200):
            appended.append(writer.append(text(f"live {i}"), lease=lease))

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
    lease = new_turn(ledger)
    stream = keys.turn_events("t1")
    bad_json = client.xadd(stream, {"e": "{not json"}, id="1-10")
    no_field = client.xadd(stream, {"x": "1"}, id="1-11")
    unknown_type = client.xadd(stream, {"e": '{"type": "mystery", "v": 1}'}, id="1-12")
    ledger.append(done("send_email", {"ok": True}, call_id="c1"), lease=lease)
    with caplog.at_level(logging.WARNING, logger="ledger.store"):
        types = [e.type for e in ledger.events("t1")]
        tailed = next(ledger.tail("t1", block_ms=10))
    assert types == ["turn_started", "run_started", "tool_done"]
    assert [env.event.type for env in tailed] == types
    skipped = [r.stream_id for r in caplog.records if r.msg == "skipped malformed ledger entry"]  # type: ignore[attr-defined]
    ids = [i.decode() for i in (bad_json, no_field, unknown_type)]
    assert skipped == ids + ids


def test_ending_a_turn_sets_its_status_and_the_finished_expiry(client: redis.Redis) -> None:
    ledger = Ledger(client, finished_ttl_s=3600)
    store = TurnStore(ledger)
    lease = new_turn(ledger)
    ended = TurnEnded(**base(), status="completed")
    expect = store.holder(lease)
    store.transition("t1", Step.COMPLETE, expect=expect, events=[ended], expiry=EXPIRE)
    assert ledger.meta("t1").status == "completed"
    for key in keys.turn_keys("t1"):
        assert 3500 < client.ttl(key) <= 3600


def test_an_ended_turns_stream_keeps_every_entry_and_gives_back_its_room(
    backend: Backend, client: redis.Redis
) -> None:
    """The end step writes the stream anew from its dump (Redis holds 4 KB of room in a stream's
    newest node): the same entries at the same ids, the fence and the expiry as before."""
    ledger = Ledger(client, finished_ttl_s=3600)
    store = TurnStore(ledger)
    lease = new_turn(ledger)
    for i in range(5):
        ledger.append(text(f"part {i} "), lease=lease)
    stream = keys.turn_events("t1")
    before = [(e.stream_id, e.event) for e in ledger.read_turn("t1")]
    measured = backend.name != "fakeredis"  # MEMORY USAGE is a real server's
    held = client.memory_usage(stream, samples=0) if measured else 0
    ended = TurnEnded(**base(), status="completed")
    store.transition("t1", Step.COMPLETE, expect=store.holder(lease), events=[ended], expiry=EXPIRE)

    after = [(e.stream_id, e.event) for e in ledger.read_turn("t1")]
    assert after[:-1] == before and after[-1][1] == ended
    assert 3500 < client.ttl(stream) <= 3600
    with pytest.raises(FencedOut):  # the stream's top id came back with it: the fence holds
        ledger.append(text("late"), lease=lease)
    if measured:
        assert client.memory_usage(stream, samples=0) < held - 1000


def test_an_unfinished_turn_has_no_expiry(client: redis.Redis) -> None:
    ledger = Ledger(client)
    lease = new_turn(ledger)
    ledger.append(text("x"), lease=lease)
    assert all(client.ttl(key) == -1 for key in keys.turn_keys("t1"))


def test_meta_of_an_unknown_turn_raises_unknown_turn(client: redis.Redis) -> None:
    with pytest.raises(UnknownTurn):
        Ledger(client).meta("nope")


def test_a_duplicate_delivery_racing_the_winner_of_a_claim_gets_no_lease(
    client: redis.Redis,
) -> None:
    """Both read the turn before either claimed; only the one whose run_started opens E wins."""
    ledger = Ledger(client)
    store = TurnStore(ledger)
    create(store)
    winner = store.claim("t1", "r1", lease_until_ms=FAR, event_id="a", ts=1.0)
    loser = store.claim("t1", "r1", lease_until_ms=FAR, event_id="b", ts=1.0)
    assert winner.claimed and not loser.claimed
    assert [e.event_id for e in ledger.events("t1") if e.type == "run_started"] == ["a"]


def test_reads_are_retried_after_a_dropped_connection(
    client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A redis-server restart under a running chunk: its next reads wait for it, then go on."""
    ledger = Ledger(client)
    new_turn(ledger)
    for command in ("hgetall", "xrange"):
        real = getattr(client, command)
        dropped: list[bool] = []

        def drop_once(
            *args: object, real: object = real, dropped: list[bool] = dropped, **kwargs: object
        ) -> object:
            if not dropped:
                dropped.append(True)
                raise redis.ConnectionError("Connection closed by server.")
            return real(*args, **kwargs)  # type: ignore[operator]

        monkeypatch.setattr(client, command, drop_once)
    assert ledger.meta("t1").status == "running"
    assert [e.type for e in ledger.events("t1")] == ["turn_started", "run_started"]


def test_a_claim_reads_the_stop_flag_in_its_own_step(client: redis.Redis) -> None:
    store = TurnStore(Ledger(client))
    for turn_id, stop in (("t1", False), ("t2", True)):
        create(store, turn_id)
        if stop:
            store.request_stop(turn_id)
        result = store.claim(turn_id, "r1", lease_until_ms=FAR, event_id=turn_id, ts=1.0)
        assert result.meta is not None and result.meta.stop_requested is stop


def test_a_write_a_demoted_master_refused_as_read_only_is_sent_again_and_lands_once(
    client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a failover the old master, now a replica, answers a write READONLY (a plain
    client's connection stays on it; a Sentinel client's turns it into a ConnectionError): the
    write did not run, so the append and the script are sent again, each landing once."""
    ledger = Ledger(client)
    lease = new_turn(ledger)
    refusals: list[str] = []
    for name, command in (
        ("xadd", client.execute_command),
        ("script", ledger._append_batch_script),
    ):

        def read_only_once(
            *args: object, name: str = name, real: object = command, **kw: object
        ) -> object:
            if name not in refusals and (name == "script" or args[0] == "XADD"):
                refusals.append(name)
                raise redis.exceptions.ReadOnlyError("You can't write against a read only replica.")
            return real(*args, **kw)  # type: ignore[operator]

        if name == "xadd":
            monkeypatch.setattr(client, "execute_command", read_only_once)
        else:
            monkeypatch.setattr(ledger, "_append_batch_script", read_only_once)
    ledger.append(text("one"), lease=lease)
    ledger.append_many([text("two"), text("three")], lease=lease)
    assert refusals == ["xadd", "script"]
    texts = [e.text for e in ledger.events("t1") if e.type == "text"]
    assert texts == ["one", "two", "three"]


# -- a write's start, only while the turn's Stop flag is unset ----------------------------------


def test_a_start_unless_stopped_lands_while_the_flag_is_unset_and_nothing_once_it_is_set(
    client: redis.Redis,
) -> None:
    ledger = Ledger(client)
    lease = new_turn(ledger)
    first = start("send_email", {"to": "a@x.io"}, call_id="c1")
    sid = ledger.append(first, lease=lease, unless_stopped=True)
    TurnStore(ledger).request_stop("t1", "superseded")
    before = ledger.read_turn("t1")

    with pytest.raises(StopRequested) as refused:
        ledger.append(
            start("send_email", {"to": "b@x.io"}, call_id="c2"), lease=lease, unless_stopped=True
        )
    with pytest.raises(StopRequested):
        ledger.append_many([text("a"), text("b")], lease=lease, unless_stopped=True)

    assert refused.value.code == "superseded"
    assert ledger.read_turn("t1") == before
    assert [env.stream_id for env in before if env.event.type == "tool_start"] == [sid]
    ledger.append(text("the stopping run's own end goes on"), lease=lease)


def test_a_start_whose_reply_was_lost_is_found_landed_even_once_the_flag_is_set(
    client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start ran, its reply was lost, then Stop came: the retry finds it there (its call
    did start, and its effect must be recorded), not a refusal."""
    ledger = Ledger(client)
    lease = new_turn(ledger)
    real = client.execute_command
    lost: list[bool] = []

    def reply_lost_once(*args: object, **kwargs: object) -> object:
        reply = real(*args, **kwargs)
        if args[0] == "EVALSHA" and not lost:
            lost.append(True)
            TurnStore(ledger).request_stop("t1")
            raise redis.ConnectionError("connection reset after the command ran")
        return reply

    monkeypatch.setattr(client, "execute_command", reply_lost_once)
    sid = ledger.append(start("send_email", {}, call_id="c1"), lease=lease, unless_stopped=True)
    assert lost
    assert [e.stream_id for e in ledger.read_turn("t1") if e.event.type == "tool_start"] == [sid]


def test_a_start_is_fenced_as_an_append_is_and_loads_its_script_again_after_a_flush(
    client: redis.Redis,
) -> None:
    ledger = Ledger(client)
    store = TurnStore(ledger)
    old = new_turn(ledger)
    hand_over(store, old, "r2")
    new = claim(store, "r2")
    with pytest.raises(FencedOut):
        ledger.append(start("send_email", {}, call_id="c0"), lease=old, unless_stopped=True)
    client.script_flush()  # a restarted server: the script is loaded again
    ledger.append(start("send_email", {}, call_id="c1"), lease=new, unless_stopped=True)
    with pytest.raises(UnknownTurn):
        ghost = Lease("ghost", "r1", epoch=1, chunk=0)
        ledger.append(start("x", {}, turn_id="ghost"), lease=ghost, unless_stopped=True)


@pytest.mark.parametrize("after", [3, 200])
def test_the_last_response_is_read_from_the_end_back_to_its_model_start(
    client: redis.Redis, after: int
) -> None:
    """What an earlier turn answered, for a new turn's history: the events from its last
    model_start on, however many pages of them there are, and nothing before."""
    ledger = Ledger(client)
    lease = new_turn(ledger)
    for step in range(3):
        ledger.append(ModelStart(**base(), step=step), lease=lease)
        ledger.append_many([text(f"step {step} part {n}") for n in range(after)], lease=lease)

    last = ledger.last_response("t1")

    assert isinstance(last[0], ModelStart) and last[0].step == 2
    assert last[1:] == [e for e in ledger.events("t1") if isinstance(e, Text)][-after:]


def test_a_turn_without_a_model_call_answers_with_all_it_holds(client: redis.Redis) -> None:
    ledger = Ledger(client)
    new_turn(ledger)
    assert ledger.last_response("t1") == ledger.events("t1")
    assert ledger.last_response("nobody") == []
