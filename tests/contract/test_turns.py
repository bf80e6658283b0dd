"""A turn's state machine in Redis (``TurnStore``), run on fakeredis and on a real redis-server.

Every step is checked against ``ledger.turn.TABLE``: carried out from the statuses it lists,
refused from every other, and refused too when the turn changed since its caller read it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import suppress

import pytest
import redis
from factories import base, text, turn_started

from ledger import keys
from ledger.errors import CorruptTurn, FencedOut, TransitionRefused, UnknownTurn
from ledger.events import Event, RunEnded, TurnEnded
from ledger.lease import Lease
from ledger.store import Ledger, MetaValue
from ledger.turn import TABLE, Step, TurnMeta, TurnStatus, allowed_from
from ledger.turns import EXPIRE, PERSIST, Outgoing, TurnStore

FAR = 2**62  # a lease deadline far in the future (ms)
#: the steps a run takes under its own lease
HOLDER_STEPS = (Step.RENEW, Step.HAND_OVER, Step.COMPLETE, Step.STOP)


def create(
    store: TurnStore, turn_id: str = "t1", *, first_run: str = "r1", conversation_id: str = "c1"
) -> bool:
    event = turn_started(turn_id, conversation_id=conversation_id)
    fields = {"dispatched": 1.0, "redispatches": 0}  # as the lifecycle creates a turn
    return store.create(event, first_run=first_run, look_at_ms=1000, fields=fields)


def claim(store: TurnStore, run_id: str, turn_id: str = "t1", until_ms: int = FAR) -> Lease:
    result = store.claim(turn_id, run_id, lease_until_ms=until_ms, event_id=f"s-{run_id}", ts=1.0)
    assert result.lease is not None, f"{run_id} could not claim {turn_id}"
    return result.lease


def run_ended(reason: str = "soft_limit") -> RunEnded:
    return RunEnded(**base(), reason=reason)  # type: ignore[arg-type]


def turn_ended(status: str = "stopped") -> TurnEnded:
    return TurnEnded(**base(), status=status)  # type: ignore[arg-type]


def step_events(step: Step) -> list[Event]:
    """What the real callers record with each step."""
    return {
        Step.HAND_OVER: [run_ended("soft_limit")],
        Step.COMPLETE: [run_ended("completed"), turn_ended("completed")],
        Step.STOP: [run_ended("error"), turn_ended()],
        Step.TAKE_OVER: [run_ended("crashed")],
        Step.STOP_DEAD: [run_ended("crashed"), turn_ended()],
        Step.STOP_PENDING: [turn_ended()],
    }.get(step, [])


def conditions(step: Step, meta: TurnMeta) -> dict[str, MetaValue]:
    """The conditions the real callers put on each step, as read from ``meta``."""
    if step in HOLDER_STEPS:
        return {"epoch": meta.epoch, "run_id": meta.run_id}
    if step in (Step.TAKE_OVER, Step.STOP_DEAD):
        return {"run_id": meta.run_id, "epoch": meta.epoch, "lease_until": meta.lease_until}
    if step == Step.REDISPATCH:
        return {"next_run": meta.next_run, "redispatches": meta.redispatches}
    if step == Step.STOP_PENDING:
        return {"next_run": meta.next_run, "epoch": meta.epoch}
    return {"epoch": meta.epoch}  # CONTINUE


def hand_over(
    store: TurnStore,
    lease: Lease,
    successor: str,
    outgoing: Outgoing | None = None,
    look_at_ms: int = 0,
) -> int:
    return store.transition(
        lease.turn_id,
        Step.HAND_OVER,
        expect=store.holder(lease),
        events=step_events(Step.HAND_OVER),
        fields={"next_run": successor, "next_chunk": lease.chunk + 1},
        outgoing=outgoing,
        look_at_ms=look_at_ms,
    )


def end(store: TurnStore, lease: Lease, step: Step) -> int:
    """The run ends the turn (COMPLETE or STOP) as the lifecycle does."""
    expect = store.holder(lease)
    events = step_events(step)
    fields = {"next_run": "", "code": "" if step == Step.COMPLETE else "internal_error"}
    return store.transition(
        lease.turn_id, step, expect=expect, events=events, fields=fields, expiry=EXPIRE
    )


def turn_in(store: TurnStore, status: TurnStatus) -> None:
    """Bring turn t1 to ``status`` through the steps of the table."""
    create(store)
    if status == TurnStatus.QUEUED:
        return
    lease = claim(store, "r1")
    if status == TurnStatus.RESUMING:
        hand_over(store, lease, "r2")
    elif status == TurnStatus.COMPLETED:
        end(store, lease, Step.COMPLETE)
    elif status == TurnStatus.STOPPED:
        end(store, lease, Step.STOP)
    elif status == TurnStatus.WAITING:
        store.transition("t1", Step.WAIT, expect=TurnStore.holder(lease))


def snapshot(client: redis.Redis, turn_id: str = "t1") -> tuple[object, object]:
    """The turn's metadata hash and stream, raw: what a refused step must leave untouched."""
    return client.hgetall(keys.turn_meta(turn_id)), client.xrange(keys.turn_events(turn_id))


def types(ledger: Ledger, turn_id: str = "t1") -> list[str]:
    return [event.type for event in ledger.events(turn_id)]


# -- creating -----------------------------------------------------------------------------------


def test_creating_a_turn_twice_changes_nothing_and_lists_it_once(client: redis.Redis) -> None:
    store = TurnStore(Ledger(client))
    assert create(store)
    meta, events = store.meta("t1"), store.ledger.events("t1")

    assert not create(store, first_run="r2", conversation_id="c2")

    assert store.meta("t1") == meta and store.ledger.events("t1") == events
    assert client.lrange(keys.conversation_turns("c1"), 0, -1) == [b"t1"]
    assert client.exists(keys.conversation_turns("c2")) == 0
    assert store.due(FAR, 10) == ["t1"]


def test_create_indexes_the_turn_for_the_reaper_before_the_turn_exists(
    client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash inside the create still leaves an index entry the reaper looks at (and drops)."""
    store = TurnStore(Ledger(client))

    def crash(*args: object, **kwargs: object) -> object:
        raise RuntimeError("the process died in the create")

    monkeypatch.setattr(store, "_create", crash)
    with pytest.raises(RuntimeError):
        create(store)
    assert store.due(FAR, 10) == ["t1"]
    assert client.exists(keys.turn_meta("t1")) == 0


def test_create_makes_the_turn_due_at_its_look_at_time(client: redis.Redis) -> None:
    store = TurnStore(Ledger(client))
    create(store)  # look_at_ms=1000
    assert store.due(999, 10) == []
    assert store.due(1000, 10) == ["t1"]


def test_create_lists_the_turn_as_its_conversations_newest(client: redis.Redis) -> None:
    store = TurnStore(Ledger(client))
    assert store.newest_turn("c1") is None
    create(store, "t1")
    assert store.newest_turn("c1") == "t1" and store.meta("t1").listed
    create(store, "t2")
    assert store.newest_turn("c1") == "t2"
    assert client.lrange(keys.conversation_turns("c1"), 0, -1) == [b"t1", b"t2"]


# -- claiming -----------------------------------------------------------------------------------


def test_a_run_claims_only_while_it_is_the_pending_run_and_only_once(client: redis.Redis) -> None:
    store = TurnStore(Ledger(client))
    create(store)

    def claims(run_id: str, event_id: str) -> Lease | None:
        return store.claim("t1", run_id, lease_until_ms=FAR, event_id=event_id, ts=1.0).lease

    assert claims("r2", "a") is None
    lease = claims("r1", "b")
    assert lease is not None and claims("r1", "c") is None
    hand_over(store, lease, "r2")
    assert claims("r1", "d") is None
    assert claims("r2", "e") is not None and claims("r2", "f") is None
    meta = store.meta("t1")
    assert (meta.runs, meta.run_id, meta.next_run) == (2, "r2", "")
    started = [e.event_id for e in store.ledger.events("t1") if e.type == "run_started"]
    assert started == ["b", "e"]


@pytest.mark.parametrize("status", list(TurnStatus))
def test_a_claim_is_granted_only_from_the_statuses_the_table_lists(
    client: redis.Redis, status: TurnStatus
) -> None:
    """Even to the run named pending: a claim never takes a running or an ended turn."""
    store = TurnStore(Ledger(client))
    turn_in(store, status)
    store.mark("t1", next_run="rx")
    before = snapshot(client)

    result = store.claim("t1", "rx", lease_until_ms=FAR, event_id="sx", ts=1.0)

    assert result.claimed is (status in allowed_from(Step.CLAIM))
    if result.claimed:
        assert store.meta("t1").status == TABLE[status, Step.CLAIM]
    else:
        assert result.status == status and snapshot(client) == before


# -- every step of the table --------------------------------------------------------------------


@pytest.mark.parametrize("step", [step for step in Step if step != Step.CLAIM])
@pytest.mark.parametrize("status", list(TurnStatus))
def test_a_step_is_carried_out_only_from_the_statuses_the_table_lists(
    client: redis.Redis, status: TurnStatus, step: Step
) -> None:
    """With its caller's conditions holding, only the table decides; a refusal writes nothing."""
    store = TurnStore(Ledger(client))
    turn_in(store, status)
    meta = store.meta("t1")
    events = step_events(step)
    before = snapshot(client)
    written = len(store.ledger.read_turn("t1"))
    expect = conditions(step, meta)

    if (status, step) not in TABLE:
        with pytest.raises(TransitionRefused) as refused:
            store.transition("t1", step, expect=expect, events=events)
        assert (refused.value.why, refused.value.found) == ("REFUSED", status.value)
        assert snapshot(client) == before
        return

    epoch = store.transition("t1", step, expect=expect, events=events)

    assert store.meta("t1").status == TABLE[status, step]
    assert epoch == meta.epoch + (1 if events else 0) == store.meta("t1").epoch
    new = store.ledger.read_turn("t1")[written:]
    assert [env.event for env in new] == events
    assert [env.stream_id for env in new] == [f"{epoch}-{k}" for k in range(len(events))]


def test_a_hand_over_after_the_turn_completed_is_refused_and_writes_nothing(
    client: redis.Redis,
) -> None:
    """A hand-over can never append after turn_ended (a soft limit landing after the end)."""
    store = TurnStore(Ledger(client))
    create(store)
    lease = claim(store, "r1")
    end(store, lease, Step.COMPLETE)
    before = snapshot(client)

    with pytest.raises(TransitionRefused) as refused:
        hand_over(store, lease, "r2")

    assert (refused.value.why, refused.value.found) == ("REFUSED", "completed")
    assert snapshot(client) == before
    assert types(store.ledger)[-1] == "turn_ended"


#: where a step sends its message itself: one server (a cluster's caller sends after the step)
one_server = pytest.mark.parametrize("backend", ["fakeredis", "redis-server"], indirect=True)


def hand_over_sending(store: TurnStore, lease: Lease, successor: str, look_at_ms: int) -> int:
    """A hand-over that sends its successor's message with it (as a chunk on one server does)."""
    message = Outgoing("q:chunks", f'{{"run": "{successor}"}}', f"m:{successor}", 600)
    return hand_over(store, lease, successor, message, look_at_ms)


@one_server
def test_a_hand_over_sends_its_message_its_mark_and_the_reapers_look_in_its_own_step(
    client: redis.Redis,
) -> None:
    """The successor is recorded and its message queued in one atomic step (docs/semantics.md: the
    record first), so no crash falls between the two; the reaper's look is only ever brought
    sooner, never put off."""
    store = TurnStore(Ledger(client))
    create(store)
    lease = claim(store, "r1", until_ms=9_000)

    hand_over_sending(store, lease, "r2", look_at_ms=5_000)

    assert client.lrange("q:chunks", 0, -1) == [b'{"run": "r2"}']
    assert client.get("m:r2") == b"1" and 590 <= client.ttl("m:r2") <= 600
    assert client.zscore(keys.active_turns(), "t1") == 5_000
    meta = store.meta("t1")
    assert (meta.status, meta.next_run, meta.next_chunk) == ("resuming", "r2", 1)
    assert types(store.ledger)[-1] == "run_ended"

    lease = claim(store, "r2", until_ms=4_000)  # the claim's own look, sooner
    hand_over_sending(store, lease, "r3", look_at_ms=8_000)
    assert client.zscore(keys.active_turns(), "t1") == 4_000
    assert client.lrange("q:chunks", 0, -1) == [b'{"run": "r3"}', b'{"run": "r2"}']
    assert client.ttl(keys.turn_meta("t1")) == -1  # the turn's own keys keep their expiry


@one_server
def test_a_refused_hand_over_sends_no_message(client: redis.Redis) -> None:
    """A soft limit after the turn completed: the step is refused and nothing goes out."""
    store = TurnStore(Ledger(client))
    create(store)
    lease = claim(store, "r1")
    end(store, lease, Step.COMPLETE)
    before = snapshot(client)

    with pytest.raises(TransitionRefused):
        hand_over_sending(store, lease, "r2", look_at_ms=5_000)

    assert snapshot(client) == before
    assert (client.exists("q:chunks"), client.exists("m:r2")) == (0, 0)


@pytest.mark.parametrize("backend", ["cluster"], indirect=True)
def test_on_a_cluster_a_step_with_a_message_is_refused_before_it_writes(
    client: redis.Redis,
) -> None:
    """A cluster's script touches one slot, and its broker is another server: the caller sends
    after the step there (``sends_with_steps``), and a step asked to send is a caller's error."""
    store = TurnStore(Ledger(client))
    create(store)
    lease = claim(store, "r1")
    before = snapshot(client)

    assert not store.sends_with_steps
    with pytest.raises(ValueError, match="one server"):
        hand_over_sending(store, lease, "r2", look_at_ms=5_000)
    assert snapshot(client) == before


@pytest.mark.parametrize("step", [Step.COMPLETE, Step.STOP, Step.HAND_OVER])
def test_the_old_lease_appends_nothing_after_its_run_ended_or_handed_over_the_turn(
    client: redis.Redis, step: Step
) -> None:
    store = TurnStore(Ledger(client))
    create(store)
    lease = claim(store, "r1")
    epoch = hand_over(store, lease, "r2") if step == Step.HAND_OVER else end(store, lease, step)
    before = snapshot(client)

    with pytest.raises(FencedOut) as fenced:
        store.ledger.append(text("late"), lease=lease)
    assert (fenced.value.presented, fenced.value.current) == (lease.epoch, epoch)
    with pytest.raises(FencedOut):
        store.ledger.append_many([text("late 1"), text("late 2")], lease=lease)
    assert snapshot(client) == before


def test_a_renewal_extends_the_lease_until_another_run_took_over(client: redis.Redis) -> None:
    store = TurnStore(Ledger(client))
    create(store)
    lease = claim(store, "r1", until_ms=1000)

    assert store.renew(lease, 5000)
    assert store.meta("t1").lease_until == 5000

    meta = store.meta("t1")
    store.transition(
        "t1",
        Step.TAKE_OVER,
        expect=conditions(Step.TAKE_OVER, meta),
        events=step_events(Step.TAKE_OVER),
        fields={"next_run": "r2"},
    )
    assert not store.renew(lease, 9000)
    assert store.meta("t1").lease_until == 5000
    claim(store, "r2", until_ms=6000)
    assert not store.renew(lease, 9000)
    assert store.meta("t1").lease_until == 6000


def test_a_takeover_read_before_the_run_renewed_its_lease_is_refused_as_changed(
    client: redis.Redis,
) -> None:
    """The reaper saw a lease run out, but the run was only slow: it renewed in between."""
    store = TurnStore(Ledger(client))
    create(store)
    lease = claim(store, "r1", until_ms=1000)
    read = store.meta("t1")
    assert store.renew(lease, 7000)
    before = snapshot(client)

    for step in (Step.TAKE_OVER, Step.STOP_DEAD):
        with pytest.raises(TransitionRefused) as refused:
            store.transition("t1", step, expect=conditions(step, read), events=step_events(step))
        assert (refused.value.why, refused.value.found) == ("CHANGED", "lease_until 7000")
    assert snapshot(client) == before
    store.ledger.append(text("the run goes on"), lease=lease)


def test_a_stop_that_read_the_pending_run_loses_to_its_claim(client: redis.Redis) -> None:
    store = TurnStore(Ledger(client))
    create(store)
    read = store.meta("t1")
    claim(store, "r1")
    before = snapshot(client)

    with pytest.raises(TransitionRefused) as refused:
        store.transition(
            "t1",
            Step.STOP_PENDING,
            expect=conditions(Step.STOP_PENDING, read),
            events=step_events(Step.STOP_PENDING),
        )

    assert (refused.value.why, refused.value.found) == ("REFUSED", "running")
    assert snapshot(client) == before


def test_only_a_stopped_turn_is_continued_and_only_once_per_read(client: redis.Redis) -> None:
    """Two clients continuing the same stop get one continuation; a continued turn persists."""
    ledger = Ledger(client, finished_ttl_s=3600)
    store = TurnStore(ledger)
    for turn_id, step in (("done", Step.COMPLETE), ("t1", Step.STOP)):
        create(store, turn_id)
        end(store, claim(store, "r1", turn_id), step)
    with pytest.raises(TransitionRefused) as refused:
        store.transition("done", Step.CONTINUE, expect={"epoch": store.meta("done").epoch})
    assert (refused.value.why, refused.value.found) == ("REFUSED", "completed")

    read = store.meta("t1")
    fields = {"next_run": "r2", "next_cause": "continue", "code": ""}
    epoch = store.transition(
        "t1", Step.CONTINUE, expect={"epoch": read.epoch}, fields=fields, expiry=PERSIST
    )
    with pytest.raises(TransitionRefused) as twice:
        store.transition("t1", Step.CONTINUE, expect={"epoch": read.epoch}, fields=fields)

    assert (twice.value.why, twice.value.found) == ("REFUSED", "queued")
    meta = store.meta("t1")
    assert (meta.status, meta.next_run) == ("queued", "r2")
    assert epoch == meta.epoch == read.epoch  # a Continue records nothing: its run's claim will
    assert all(client.ttl(key) == -1 for key in keys.turn_keys("t1"))
    assert claim(store, "r2").cause == "continue"


# -- bookkeeping never makes a turn -------------------------------------------------------------


def redispatch(store: TurnStore, lease: Lease) -> None:
    expect = {"next_run": "", "redispatches": 0}
    store.transition("t1", Step.REDISPATCH, expect=expect, fields={"redispatches": 1})


def stop_pending(store: TurnStore, lease: Lease) -> None:
    events = step_events(Step.STOP_PENDING)
    store.transition("t1", Step.STOP_PENDING, expect={}, events=events, fields={"code": "x"})


#: writes that come late, to a turn that may have expired meanwhile (the reaper, a heartbeat)
LATE_WRITES = {
    "mark": lambda store, lease: store.mark("t1", listed=1, redispatches=3),
    "listing": lambda store, lease: store.list_in_conversation("t1", "c1"),
    "renewal": lambda store, lease: store.renew(lease, 9000),
    "watch": lambda store, lease: store.watch("t1", 5000),
    "stop_pending": stop_pending,
    "redispatch": redispatch,
}


@pytest.mark.parametrize("write", LATE_WRITES.values(), ids=LATE_WRITES.keys())
def test_a_write_to_a_turn_that_expired_never_creates_its_hash(
    client: redis.Redis, write: Callable[[TurnStore, Lease], object]
) -> None:
    """A late bookkeeping or state-machine write lands on nothing once the turn is gone."""
    store = TurnStore(Ledger(client))
    create(store)
    lease = claim(store, "r1")
    client.delete(*keys.turn_keys("t1"))  # the finished-turn expiry ran out

    with suppress(UnknownTurn):
        write(store, lease)

    assert client.exists(keys.turn_meta("t1")) == 0
    assert client.exists(keys.turn_events("t1")) == 0
    with pytest.raises(UnknownTurn):
        store.meta("t1")
    assert not store.renew(lease, 9000)


def test_marking_a_turn_never_changes_its_status_or_epoch(client: redis.Redis) -> None:
    store = TurnStore(Ledger(client))
    turn_in(store, TurnStatus.COMPLETED)
    meta = store.meta("t1")
    store.mark("t1", redispatches=2)
    after = store.meta("t1")
    assert (after.status, after.epoch, after.redispatches) == (meta.status, meta.epoch, 2)


# -- metadata that is not a turn's --------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value", [("status", "cancelled"), ("status", ""), ("epoch", "one")]
)
def test_metadata_with_an_unknown_status_or_a_bad_number_reads_as_a_corrupt_turn(
    client: redis.Redis, field: str, value: str
) -> None:
    """Never as a queued turn: nothing claims it or moves it on."""
    store = TurnStore(Ledger(client))
    create(store)
    if value:
        client.hset(keys.turn_meta("t1"), field, value)
    else:
        client.hdel(keys.turn_meta("t1"), field)
    before = snapshot(client)

    with pytest.raises(CorruptTurn):
        store.meta("t1")
    with pytest.raises(CorruptTurn):
        store.ledger.meta("t1")
    if field == "status":
        with pytest.raises(CorruptTurn):
            store.claim("t1", "r1", lease_until_ms=FAR, event_id="s", ts=1.0)
        with pytest.raises(TransitionRefused):
            store.transition(
                "t1", Step.STOP_PENDING, expect={}, events=step_events(Step.STOP_PENDING)
            )
    assert snapshot(client) == before


# -- batches of a run's events ------------------------------------------------------------------


def stream_texts(ledger: Ledger, turn_id: str = "t1") -> list[str]:
    return [e.text for e in ledger.events(turn_id) if e.type == "text"]  # type: ignore[union-attr]


def test_a_batch_after_an_append_that_landed_unseen_writes_every_event_once_in_order(
    client: redis.Redis,
) -> None:
    """An XADD landed but the writer's sequence did not advance (a soft limit in between): the
    next batch meets another event at its first id and goes on after it, dropping nothing."""
    ledger = Ledger(client)
    store = TurnStore(ledger)
    create(store)
    lease = claim(store, "r1")
    ledger.append(text("x"), lease=lease)
    lease.seq -= 1
    lease.last = ("", "")

    ids = ledger.append_many([text("y"), text("z")], lease=lease)

    assert stream_texts(ledger) == ["x", "y", "z"]
    assert ids == [f"{lease.epoch}-2", f"{lease.epoch}-3"]
    assert ledger.append(text("w"), lease=lease) == f"{lease.epoch}-4"


def test_the_same_batch_sent_twice_writes_each_event_once(client: redis.Redis) -> None:
    """A retry of the same call (the lease's sequence rolled back) finds its own events."""
    ledger = Ledger(client)
    store = TurnStore(ledger)
    create(store)
    lease = claim(store, "r1")
    batch: Sequence[Event] = [text("a"), text("b"), text("c")]
    seq = lease.seq

    first = ledger.append_many(batch, lease=lease)
    lease.seq, lease.last = seq, ("", "")
    again = ledger.append_many(batch, lease=lease)

    assert again == first
    assert stream_texts(ledger) == ["a", "b", "c"]
    assert ledger.append(text("d"), lease=lease) == f"{lease.epoch}-4"
