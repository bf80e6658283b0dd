"""The turn's state machine as data (``ledger.turn``), and actors racing through it on fakeredis.

The last test drives several actors at one turn the way the real callers do (each reads the
metadata, then attempts a step under the conditions it read) and checks that every step that
succeeds is one of the table's, that actors acting on the same reading never both win, and that
nothing follows a turn's end unless a Continue reopened it.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import fakeredis
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from ledger import keys
from ledger.codec import text
from ledger.errors import CorruptTurn, FencedOut, TransitionRefused
from ledger.events import Event, RunEnded, Text, TurnEnded, TurnStarted
from ledger.lease import Lease
from ledger.store import Ledger, MetaValue
from ledger.turn import (
    AUTO_CONTINUABLE,
    TABLE,
    Step,
    StopCode,
    TurnMeta,
    TurnStatus,
    allowed_from,
    continue_refusal,
    target,
)
from ledger.turns import EXPIRE, KEEP, PERSIST, TurnStore

# -- the table ----------------------------------------------------------------------------------


@pytest.mark.parametrize("step", list(Step))
def test_every_step_has_one_outcome_a_status_or_the_status_as_it_was(step: Step) -> None:
    """``target`` names the one status every row of the step leads to, or None for a step
    that leaves every status as it was (a renewal, a re-dispatch)."""
    rows = {status: TABLE[status, step] for status in allowed_from(step)}
    assert rows, f"{step} is never allowed"
    to = target(step)
    if to is None:
        assert all(status == after for status, after in rows.items())
    else:
        assert set(rows.values()) == {to}


def test_only_a_renewal_a_redispatch_a_release_and_a_decision_or_answer_not_the_last_stay() -> None:
    assert {step for step in Step if target(step) is None} == {
        Step.RENEW,
        Step.REDISPATCH,
        Step.DECIDE,
        Step.RELEASE,
        Step.ANSWER,
    }


def test_a_waiting_turn_is_left_by_a_decision_an_answer_a_wake_or_a_stop_only() -> None:
    from_waiting = {
        step: to for (status, step), to in TABLE.items() if status == TurnStatus.WAITING
    }
    assert from_waiting == {
        Step.DECIDE: TurnStatus.WAITING,
        Step.DECIDE_LAST: TurnStatus.RESUMING,
        Step.ANSWER: TurnStatus.WAITING,
        Step.ANSWER_LAST: TurnStatus.RESUMING,
        # the last decision or answer while the turn's tenant has no free slot (tenants)
        Step.DECIDE_HELD: TurnStatus.QUEUED,
        Step.ANSWER_HELD: TurnStatus.QUEUED,
        # its timer fell due (the reaper), with or without a free slot of its tenant
        Step.WAKE: TurnStatus.RESUMING,
        Step.WAKE_HELD: TurnStatus.QUEUED,
        Step.STOP_WAITING: TurnStatus.STOPPED,
    }
    assert allowed_from(Step.WAIT) == (TurnStatus.RUNNING,)
    assert not TurnStatus.WAITING.ended


def test_allowed_from_lists_exactly_the_tables_rows_of_a_step() -> None:
    for step in Step:
        assert set(allowed_from(step)) == {status for status, s in TABLE if s == step}


def test_an_ended_turn_allows_only_continue_and_only_when_stopped() -> None:
    from_ended = [(status, step) for status, step in TABLE if status.ended]
    assert from_ended == [(TurnStatus.STOPPED, Step.CONTINUE)]
    assert TABLE[TurnStatus.STOPPED, Step.CONTINUE] == TurnStatus.QUEUED


def test_only_a_claim_leaves_a_pending_status_for_running() -> None:
    """A queued or resuming turn runs only once its pending run claimed it."""
    for (status, step), to in TABLE.items():
        if status in (TurnStatus.QUEUED, TurnStatus.RESUMING) and to == TurnStatus.RUNNING:
            assert step == Step.CLAIM


@pytest.mark.parametrize(
    "raw, what",
    [
        ({}, "status None"),
        ({"status": "cancelled"}, "status 'cancelled'"),
        ({"status": "queued", "epoch": "one"}, "one"),
        ({"status": "running", "lease_until": "soon"}, "soon"),
    ],
)
def test_a_hash_without_a_known_status_or_with_a_bad_number_is_a_corrupt_turn(
    raw: dict[str, str], what: str
) -> None:
    with pytest.raises(CorruptTurn, match=what):
        TurnMeta.from_hash("t1", raw)


def test_a_hash_is_read_into_typed_fields() -> None:
    raw = {b"status": b"running", b"epoch": b"3", b"lease_until": b"900", b"listed": b"1"}
    meta = TurnMeta.from_hash("t1", raw)
    assert (meta.status, meta.epoch, meta.lease_until, meta.listed) == (
        TurnStatus.RUNNING,
        3,
        900,
        True,
    )


# -- the one rule for Continue ------------------------------------------------------------------


def stopped(code: str, *, auto_continues: int = 0, status: str = "stopped") -> TurnMeta:
    return TurnMeta(
        turn_id="t1", status=TurnStatus(status), code=code, auto_continues=auto_continues
    )


@pytest.mark.parametrize("auto", [False, True])
@pytest.mark.parametrize("status", [s for s in TurnStatus if s != TurnStatus.STOPPED])
def test_continue_is_refused_for_a_turn_that_is_not_stopped(status: str, auto: bool) -> None:
    meta = stopped(StopCode.CRASHED, status=status)
    refusal = continue_refusal(meta, newest_turn="t1", auto=auto, max_auto=3)
    assert refusal == f"the turn is not stopped (status {status})"


@pytest.mark.parametrize("auto", [False, True])
def test_continue_is_refused_for_a_stop_that_is_not_the_conversations_newest(auto: bool) -> None:
    refusal = continue_refusal(stopped(StopCode.CRASHED), newest_turn="t2", auto=auto, max_auto=3)
    assert refusal == "only the conversation's newest stop can be continued"


def test_a_stop_whose_conversations_newest_turn_is_unknown_is_taken_as_the_newest() -> None:
    meta = stopped(StopCode.CANCELLED)
    assert continue_refusal(meta, newest_turn=None, auto=False, max_auto=0) is None


@pytest.mark.parametrize(
    "code", [*(c for c in StopCode if c not in AUTO_CONTINUABLE), "", "something_new"]
)
def test_no_automatic_continuation_after_an_error_a_person_or_a_refusal(code: str) -> None:
    refusal = continue_refusal(stopped(code), newest_turn="t1", auto=True, max_auto=3)
    assert refusal is not None and refusal.startswith("no automatic continuation after")


@pytest.mark.parametrize("code", sorted(AUTO_CONTINUABLE))
def test_automatic_continuation_of_a_time_limit_stop_is_allowed_under_the_limit_only(
    code: StopCode,
) -> None:
    assert set(AUTO_CONTINUABLE) == {StopCode.CRASHED, StopCode.HANDOFF_LOST, StopCode.MAX_CHUNKS}
    for used in (0, 1, 2):
        meta = stopped(code, auto_continues=used)
        assert continue_refusal(meta, newest_turn="t1", auto=True, max_auto=3) is None
    meta = stopped(code, auto_continues=3)
    at_limit = continue_refusal(meta, newest_turn="t1", auto=True, max_auto=3)
    assert at_limit == "automatic continuation limit reached (3 of 3)"


@pytest.mark.parametrize("code", [*StopCode, ""])
def test_a_person_may_always_continue_the_conversations_newest_stop(code: str) -> None:
    """Whatever the stop, and however many automatic continuations came before."""
    meta = stopped(code, auto_continues=99)
    assert continue_refusal(meta, newest_turn="t1", auto=False, max_auto=3) is None


# -- actors racing through the table ------------------------------------------------------------

T = "t1"
#: actors that read the metadata and act on what they read
WORKERS = ("worker-a", "worker-b")
REAPERS = ("reaper-a", "reaper-b")
CONTINUERS = ("continue-a", "continue-b")
STOPPER = "stop"
#: steps that change who holds the turn or its status: of these, one reading gets one winner
#: (a renewal or a re-dispatch leaves both alone)
MOVES = frozenset(Step) - {Step.RENEW, Step.REDISPATCH}
HOLDER_STEPS = (Step.RENEW, Step.HAND_OVER, Step.COMPLETE, Step.STOP)
REAPER_STEPS = (Step.TAKE_OVER, Step.STOP_DEAD, Step.STOP_PENDING, Step.REDISPATCH)
#: an actor's reading, as far as who may move the turn goes: its epoch and its status
Reading = tuple[int, str]


class TurnRace(RuleBasedStateMachine):
    """One turn; runs holding leases, reapers, Stop and Continue clients, interleaved.

    An actor acts on its last reading of the metadata (``fresh``: it reads again first), with
    the conditions the real caller puts on its step; the runs act on their leases.
    """

    def __init__(self) -> None:
        super().__init__()
        self.client = fakeredis.FakeRedis()
        self.ledger = Ledger(self.client)
        self.store = TurnStore(self.ledger)
        self.now = itertools.count(1000, 7)  # ms; every lease deadline differs
        self.serial = itertools.count(1)
        started = TurnStarted(
            event_id="ev0",
            turn_id=T,
            run_id="run0",
            chunk=0,
            ts=1.0,
            conversation_id="c1",
            message="go",
        )
        fields = {"redispatches": 0}  # as the lifecycle creates a turn
        assert self.store.create(started, first_run="run0", look_at_ms=0, fields=fields)
        self.reads: dict[str, TurnMeta] = {}
        self.leases: list[Lease] = []
        #: per reading: the moves that succeeded on it
        self.wins: dict[Reading, list[str]] = defaultdict(list)
        #: stream ids of the turn_ended events a Continue reopened
        self.reopened: set[str] = set()

    # -- helpers and the oracle ----------------------------------------------------------------

    def raw(self) -> dict[str, str]:
        return {text(k): text(v) for k, v in self.client.hgetall(keys.turn_meta(T)).items()}

    def stream(self) -> list[Any]:
        return self.client.xrange(keys.turn_events(T))

    def new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self.serial)}"

    def event(self, cls: type[Event], **fields: Any) -> Event:
        return cls(event_id=self.new_id("ev"), turn_id=T, run_id="x", chunk=0, ts=1.0, **fields)

    def reading(self, actor: str, fresh: bool) -> TurnMeta:
        if fresh or actor not in self.reads:
            self.reads[actor] = self.store.meta(T)
        return self.reads[actor]

    def last_turn_ended(self) -> str | None:
        ended = [
            env.stream_id for env in self.ledger.read_turn(T) if env.event.type == "turn_ended"
        ]
        return ended[-1] if ended else None

    def attempt(
        self,
        step: Step,
        reading: Reading,
        expect: Mapping[str, MetaValue],
        events: Sequence[Event] = (),
        fields: Mapping[str, MetaValue] | None = None,
        expiry: str = KEEP,
    ) -> None:
        before, raw, stream = self.store.meta(T), self.raw(), self.stream()
        holds = all(raw.get(name, "") == str(value) for name, value in expect.items())
        try:
            epoch = self.store.transition(
                T, step, expect=expect, events=events, fields=fields, expiry=expiry
            )
        except TransitionRefused as e:
            # never a wrong refusal: the table does not allow the step, or the turn changed
            if e.why == "REFUSED":
                assert (before.status, step) not in TABLE and e.found == before.status
            else:
                assert (before.status, step) in TABLE and not holds, e
            assert (self.raw(), self.stream()) == (raw, stream), "a refused step wrote"
            return
        assert (before.status, step) in TABLE, f"{step} succeeded from {before.status}"
        assert holds, f"{step} succeeded though {expect} did not hold"
        assert self.store.meta(T).status == TABLE[before.status, step]
        assert epoch == before.epoch + (1 if events else 0)
        self.won(step, reading)
        if step == Step.CONTINUE:
            self.reopened.add(self.last_turn_ended() or "")

    def won(self, step: Step, reading: Reading) -> None:
        if step in MOVES:
            self.wins[reading].append(step.value)
            assert len(self.wins[reading]) == 1, f"two winners on {reading}: {self.wins[reading]}"

    # -- the actors ----------------------------------------------------------------------------

    @rule(actor=st.sampled_from((*WORKERS, *REAPERS, *CONTINUERS, STOPPER)))
    def read(self, actor: str) -> None:
        self.reads[actor] = self.store.meta(T)

    @rule(actor=st.sampled_from(WORKERS), fresh=st.booleans())
    def claim(self, actor: str, fresh: bool) -> None:
        """A chunk message for the pending run it read arrives (maybe twice, maybe late)."""
        read = self.reading(actor, fresh)
        run_id = read.next_run or "nobody"
        before, raw, stream = self.store.meta(T), self.raw(), self.stream()
        claim = self.store.claim(
            T, run_id, lease_until_ms=next(self.now), event_id=self.new_id("start"), ts=1.0
        )
        due = raw.get("next_run", "") == run_id and before.status in allowed_from(Step.CLAIM)
        assert claim.claimed is due, f"claim of {run_id} granted={claim.claimed} in {raw}"
        if claim.lease is None:
            assert (self.raw(), self.stream()) == (raw, stream), "a refused claim wrote"
            return
        assert self.store.meta(T).status == TABLE[before.status, Step.CLAIM]
        self.won(Step.CLAIM, (read.epoch, read.status.value))
        self.leases.append(claim.lease)

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), step=st.sampled_from(HOLDER_STEPS))
    def holder_step(self, data: st.DataObject, step: Step) -> None:
        """A run (the holder, or a zombie) renews, hands over or ends the turn on its lease."""
        lease = data.draw(st.sampled_from(self.leases))
        events: list[Event] = []
        fields: dict[str, MetaValue] = {"lease_until": next(self.now)}
        expiry = KEEP
        if step == Step.HAND_OVER:
            events = [self.event(RunEnded, reason="soft_limit")]
            fields = {"next_run": self.new_id("run"), "next_chunk": lease.chunk + 1}
            fields.update(next_cause="next_chunk", redispatches=0)
        elif step != Step.RENEW:
            done = step == Step.COMPLETE
            events = [
                self.event(RunEnded, reason="completed" if done else "error"),
                self.event(TurnEnded, status="completed" if done else "stopped"),
            ]
            fields = {"next_run": "", "code": "" if done else "internal_error"}
            expiry = EXPIRE
        reading = (lease.epoch, TurnStatus.RUNNING.value)
        self.attempt(step, reading, self.store.holder(lease), events, fields, expiry)

    @rule(actor=st.sampled_from(REAPERS), fresh=st.booleans(), stray=st.booleans(), data=st.data())
    def reaper_step(self, actor: str, fresh: bool, stray: bool, data: st.DataObject) -> None:
        """Mostly what the real reaper does with what it read; now and then any of its steps."""
        read = self.reading(actor, fresh)
        fitting = [s for s in REAPER_STEPS if (read.status, s) in TABLE]
        step = data.draw(st.sampled_from(REAPER_STEPS if stray or not fitting else fitting))
        reading = (read.epoch, read.status.value)
        if step == Step.STOP_PENDING:
            self.stop_pending(read, "handoff_lost")
        elif step == Step.REDISPATCH:
            expect: dict[str, MetaValue] = {
                "next_run": read.next_run,
                "redispatches": read.redispatches,
            }
            fields: dict[str, MetaValue] = {"redispatches": read.redispatches + 1}
            self.attempt(step, reading, expect, fields=fields)
        else:
            expect = {"run_id": read.run_id, "epoch": read.epoch, "lease_until": read.lease_until}
            crashed = self.event(RunEnded, reason="crashed")
            if step == Step.TAKE_OVER:
                fields = {"next_run": self.new_id("run"), "next_cause": "reaper"}
                fields["redispatches"] = 0
                self.attempt(step, reading, expect, [crashed], fields)
            else:
                ended = self.event(TurnEnded, status="stopped", code="crashed")
                fields = {"next_run": "", "code": "crashed"}
                self.attempt(step, reading, expect, [crashed, ended], fields, EXPIRE)

    def stop_pending(self, read: TurnMeta, code: str, *, tidy: bool = True) -> None:
        ended = self.event(TurnEnded, status="stopped", code=code)
        expect: dict[str, MetaValue] = {"next_run": read.next_run, "epoch": read.epoch}
        fields: dict[str, MetaValue] = {"next_run": "", "code": code} if tidy else {"code": code}
        reading = (read.epoch, read.status.value)
        self.attempt(Step.STOP_PENDING, reading, expect, [ended], fields, EXPIRE)

    @rule(fresh=st.booleans(), tidy=st.booleans())
    def stop(self, fresh: bool, tidy: bool) -> None:
        """Stop, before the pending run it read has started. Untidy, it leaves that run named
        pending: the table alone must keep the run from claiming the stopped turn."""
        self.stop_pending(self.reading(STOPPER, fresh), "cancelled", tidy=tidy)

    @rule(actor=st.sampled_from(CONTINUERS), fresh=st.booleans())
    def continue_(self, actor: str, fresh: bool) -> None:
        read = self.reading(actor, fresh)
        fields: dict[str, MetaValue] = {
            "next_run": self.new_id("run"),
            "next_cause": "continue",
            "code": "",
            "redispatches": 0,
        }
        reading = (read.epoch, read.status.value)
        expect: dict[str, MetaValue] = {"epoch": read.epoch}
        self.attempt(Step.CONTINUE, reading, expect, fields=fields, expiry=PERSIST)

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), batch=st.booleans())
    def append(self, data: st.DataObject, batch: bool) -> None:
        """A run writes (or a zombie tries to): it lands, or its writer is fenced out."""
        lease = data.draw(st.sampled_from(self.leases))
        events = [self.event(Text, text="a"), self.event(Text, text="b")][: 2 if batch else 1]
        stream = self.stream()
        try:
            self.ledger.append_many(events, lease=lease)
        except FencedOut:
            assert self.stream() == stream
            return
        assert int(self.raw()["epoch"]) == lease.epoch

    @rule()
    def mark(self) -> None:
        """The reaper's bookkeeping lands whatever the status and moves nothing."""
        meta = self.store.meta(T)
        self.store.mark(T, listed=1)
        after = self.store.meta(T)
        assert (after.status, after.epoch) == (meta.status, meta.epoch)

    # -- what must hold after every action -----------------------------------------------------

    @invariant()
    def nothing_follows_a_turn_ended_unless_a_continue_reopened_it(self) -> None:
        last = self.last_turn_ended()
        if last is not None and self.ledger.last_id(T) != last:
            assert last in self.reopened, f"events after the turn_ended at {last}"


RACE = settings(
    max_examples=100,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_racing_actors_take_only_the_tables_steps_and_never_both_win_on_one_reading() -> None:
    run_state_machine_as_test(TurnRace, settings=RACE)
