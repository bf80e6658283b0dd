"""A turn's life in Redis: create it, claim it, and every other step of its state machine.

``TurnStore`` is the only writer of a turn's metadata, of the reaper's index and of the Stop
flag, and through its ``conversations`` and ``approvals`` (``ledger.conversations``,
``ledger.approval_index``) of the structures across turns. Each status change is one atomic
script over the turn's own ``{turn_id}`` keys (``lua/create.lua``, ``lua/claim.lua``,
``lua/transition.lua``) that checks the from-status against ``ledger.turn.TABLE`` and the
caller's conditions (the lease epoch, the run, the pending run); a step the table does not allow,
or a turn that changed since the caller read it, is refused with ``TransitionRefused``.
Structures across turns (the reaper's index, a conversation's list) are written idempotently
beside those scripts, never inside them, so every script stays in one Redis Cluster slot; the
reaper repairs what a crash between the two left.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import redis
from redis.cluster import RedisCluster

from ledger import keys
from ledger.approval_index import ApprovalIndex
from ledger.codec import decode_one, encode, text
from ledger.conversations import Conversations
from ledger.errors import CorruptTurn, TransitionRefused, UnknownTurn
from ledger.events import (
    RUN_CAUSES,
    Event,
    RunStarted,
    TurnStarted,
)
from ledger.lease import Claim, Lease
from ledger.lines import Lines
from ledger.store import Ledger, MetaValue, pairs, script, stop_code
from ledger.tenants import Tenants
from ledger.turn import Step, TurnMeta, TurnStatus, allowed_from, target

#: seconds the Stop flag outlives the request (a run checks it at every safe point)
STOP_FLAG_TTL_S = 24 * 3600
#: the status a claim leads to
_CLAIMED = target(Step.CLAIM) or TurnStatus.RUNNING
#: what ``transition`` does to the turn's keys' expiry
EXPIRE, PERSIST, KEEP = "expire", "persist", "keep"


@dataclass(frozen=True)
class Outgoing:
    """A message that goes out with a step (a hand-over's, to its successor), written in the
    step's own atomic script or not at all: pushed onto ``queue``, its presence marked at
    ``mark`` for ``mark_ttl_s``. Its keys are the broker's, on the ledger's own server; the
    broker's transport made the message (``worker.edges.celery.marks``), which the ledger passes on
    unread."""

    queue: str
    message: str | bytes
    mark: str
    mark_ttl_s: int


def _no_script_flags(error: redis.ResponseError) -> bool:
    """A script's ``#!lua flags=...`` line refused by a server that cannot read it."""
    text = str(error).lower()
    return "shebang" in text or "compil" in text or "unexpected symbol near '#'" in text


def refusal(turn_id: str, step: Step | None, error: redis.ResponseError) -> Exception:
    """What a step's error reply means: ``UnknownTurn``, ``TransitionRefused``, or itself."""
    reply = str(error)
    if reply.startswith("NOTURN"):
        return UnknownTurn(turn_id)
    word, _, rest = reply.partition(" ")
    if word in ("REFUSED", "CHANGED") and step is not None:
        return TransitionRefused(turn_id, step.value, word, rest)
    return error


@dataclass(frozen=True)
class PlannedStep:
    """One turn's step for ``TurnStore.transitions``: ``transition``'s arguments, no events."""

    turn_id: str
    step: Step
    expect: Mapping[str, MetaValue]
    fields: Mapping[str, MetaValue]
    outgoing: Outgoing | None = None
    look_at_ms: int = 0


class TurnStore:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.client = ledger.client
        self._create = self.client.register_script(script("create.lua"))
        self._claim = self.client.register_script(script("claim.lua"))
        self._transition = self.client.register_script(script("transition.lua"))
        #: the same step, allowed to write while Redis is out of memory (Redis >= 7: the script's
        #: flags): only a run's end, so a turn whose append was refused for memory still ends
        self._transition_oom = self.client.register_script(
            "#!lua flags=allow-oom\n" + script("transition.lua")
        )
        self._withdraw = self.client.register_script(script("withdraw.lua"))
        self._due = self.client.register_script(script("due.lua"))
        #: the listing of conversations, written beside the turn scripts (``ledger.conversations``)
        self.conversations = Conversations(ledger)
        #: the open approval requests across turns, written beside the turn scripts
        self.approvals = ApprovalIndex(ledger)
        #: each conversation's line: the one turn of it that may run now (``ledger.lines``)
        self.lines = Lines(ledger)
        #: tenant admission: slots, waiting turns, fair order (``ledger.tenants``)
        self.tenants = Tenants(ledger)

    # -- creating ----------------------------------------------------------------------------

    def create(
        self, event: TurnStarted, *, first_run: str, look_at_ms: int, fields: Mapping[str, Any]
    ) -> bool:
        """Create the turn (queued, ``first_run`` pending) with its ``turn_started``; once only.

        The reaper's index gets the turn first (due at ``look_at_ms``, unless it is there
        already), so a crash right after the create still leaves a turn someone looks at; an
        index entry whose turn never came is dropped by the reaper. The conversation's list gets
        it after (``list_in_conversation``). Returns False, changing nothing of the turn, when it
        already exists.
        """
        self.client.zadd(keys.active_turns(), {event.turn_id: look_at_ms}, nx=True)
        meta: dict[str, MetaValue] = {
            "status": TurnStatus.QUEUED.value,
            "next_run": first_run,
            "next_chunk": 0,
            "next_cause": "first",
            "conversation_id": event.conversation_id,
            "mode": event.mode,
            "created": event.ts,
            "dispatched": event.ts,
            "redispatches": 0,
            "listed": 0,
            # the turn's usage totals, kept by every append of a model_done (lua/append.lua)
            "input_tokens": 0,
            "output_tokens": 0,
            **fields,
        }
        args: list[MetaValue] = [encode(event)]
        for name, value in meta.items():
            args += [name, value]
        turn_keys = keys.turn_keys(event.turn_id)
        created = self.ledger.retry(lambda: self._create(keys=turn_keys, args=args))
        if int(created):
            self.list_in_conversation(event.turn_id, event.conversation_id)
        return bool(int(created))

    def withdraw(self, turn_id: str, conversation_id: str) -> bool:
        """Take back a turn whose creation did not finish (its first chunk could not be sent):
        while it is still as ``create`` left it (queued at epoch 0), its keys, its entry in its
        conversation's list and its reaper's index entry go. Returns False, changing nothing,
        when the turn went on (a run claimed it, Stop ended it). A conversation it was the only
        turn of leaves the listing of conversations too.

        Deletes only, so it works on a Redis out of memory. One attempt, no retry: a creation
        that failed is being answered already, and a turn a failed withdrawal leaves is one
        a crash between creating and sending leaves, which the reaper dispatches.
        """
        turn_keys = keys.turn_keys(turn_id)
        if not int(self._withdraw(keys=turn_keys, args=[TurnStatus.QUEUED.value])):
            return False
        self.conversations.leave(turn_id, conversation_id)
        self.unwatch(turn_id)
        return True

    def list_in_conversation(self, turn_id: str, conversation_id: str) -> None:
        """Add the turn to its conversation (``Conversations.join``), then mark it listed."""
        self.conversations.join(turn_id, conversation_id)
        self.mark(turn_id, listed=1)

    def newest_turn(self, conversation_id: str) -> str | None:
        newest = self.client.lindex(keys.conversation_turns(conversation_id or "_"), -1)
        return None if newest is None else text(newest)

    # -- claiming ----------------------------------------------------------------------------

    def claim(
        self,
        turn_id: str,
        run_id: str,
        *,
        lease_until_ms: int,
        event_id: str,
        ts: float,
        read_from: str = "",
    ) -> Claim:
        """Make ``run_id`` the lease holder if it is the turn's pending run (one atomic step).

        The claim records ``run_started`` (with ``event_id`` and ``ts``; its chunk, cause and
        epoch from the metadata read just before, which the claim checks is still current) at the
        new epoch's first stream id; the codec encodes it, as every event. A run that is not the
        pending one (a duplicate delivery, a run already claimed, a stale message) gets no lease.
        The lease runs to ``lease_until_ms`` unless renewed, and the reaper's index looks at the
        turn then. ``read_from``: a stream id (``-``
        for the start) to read the turn from in the same step, up to a page of entries.
        ``Claim.meta`` is the metadata as it was just before, with the Stop flag.
        """
        # The pending run's chunk and cause, and the new epoch, are the metadata's: the script
        # sets them in this template (no read of the metadata before the claim).
        started = RunStarted.model_construct(
            event_id=event_id, turn_id=turn_id, run_id=run_id, chunk=0, ts=ts, epoch=0
        )
        count = self.ledger.page if read_from else 0
        allowed = allowed_from(Step.CLAIM)
        args: list[MetaValue] = [
            run_id,
            encode(started),
            lease_until_ms,
            _CLAIMED.value,
            read_from,
            count,
            len(allowed),
            *(status.value for status in allowed),
            len(RUN_CAUSES),
            *RUN_CAUSES,
        ]
        turn_keys = [*keys.turn_keys(turn_id), keys.turn_cancel(turn_id)]

        def claim_and_watch() -> Any:
            # The reaper's look at the lease's end goes with the claim: inside the script on one
            # server; a cluster refuses a key of no turn's slot in a turn's script, so there it
            # is a second command, after the claim. A look at a turn this claim did not take is
            # harmless: the reaper finds it as it is.
            if isinstance(self.client, RedisCluster):
                claimed = self._claim(keys=turn_keys, args=args)
                self.client.zadd(keys.active_turns(), {turn_id: lease_until_ms})
                return claimed
            return self._claim(keys=[*turn_keys, keys.active_turns()], args=args)

        try:
            reply: Any = self.ledger.retry(claim_and_watch)
        except redis.ResponseError as e:
            if str(e).startswith("NOTURN"):
                raise UnknownTurn(turn_id) from e
            if str(e).startswith("CORRUPT"):
                raise CorruptTurn(turn_id, str(e).split(" ", 1)[-1]) from None
            raise
        meta = TurnMeta.from_hash(turn_id, pairs(reply[1]), stop_requested=bool(reply[2]))
        if int(reply[0]) == 1:
            epoch = int(reply[3])
            lease = Lease(turn_id, run_id, epoch, meta.next_chunk, meta.next_cause, seq=1)
            # the run_started the claim wrote at E-0 (the template, as the script filled it in):
            # the run's text is stored against it
            lease.opened = started.model_copy(
                update={"chunk": meta.next_chunk, "cause": meta.next_cause, "epoch": epoch}
            )
            if len(reply) < 5:
                return Claim(lease, meta)
            raw = [(sid, pairs(flat)) for sid, flat in reply[4]]
            entries = list(self.ledger.decode(turn_id, raw))
            return Claim(
                lease, meta, entries=entries, read_from=read_from, read_all=len(raw) < count
            )
        return self._not_pending(meta, run_id, event_id)

    def _not_pending(self, meta: TurnMeta, run_id: str, event_id: str) -> Claim:
        if meta.run_id == run_id and meta.status == TurnStatus.RUNNING:
            # A retried claim whose first reply was lost: the claim is ours. A duplicate delivery
            # of the same run that lost the race looks alike, but the epoch opens with the
            # winner's run_started, not ours.
            started = self._opening(meta.turn_id, meta.epoch)
            if started is not None and started.event_id == event_id:
                lease = Lease(meta.turn_id, run_id, meta.epoch, started.chunk, started.cause, seq=1)
                lease.opened = started
                return Claim(lease, meta)
        return Claim(None, meta, status=meta.status, holder=meta.run_id)

    def _opening(self, turn_id: str, epoch: int) -> RunStarted | None:
        """The ``run_started`` that opened epoch ``epoch`` (stream id ``E-0``), if any."""
        sid = f"{epoch}-0"
        event = decode_one(self.client.xrange(keys.turn_events(turn_id), min=sid, max=sid))
        return event if isinstance(event, RunStarted) else None

    # -- the steps of the state machine ------------------------------------------------------

    def transition(
        self,
        turn_id: str,
        step: Step | None,
        *,
        expect: Mapping[str, MetaValue],
        events: Sequence[Event] = (),
        fields: Mapping[str, MetaValue] | None = None,
        expiry: str = KEEP,
        allow_oom: bool = False,
        outgoing: Outgoing | None = None,
        look_at_ms: int = 0,
    ) -> int:
        """Carry out ``step`` if the table allows it from the turn's status and every ``expect``
        field holds its value (``""``: unset); write ``events`` under a new epoch and set
        ``fields``, atomically. Returns the turn's epoch after the step. ``step`` None is a
        mark: any status, the status kept.

        ``outgoing``: a message sent with the step, in the same atomic step (one server only:
        ``sends_with_steps``), with the reaper's look at the turn at ``look_at_ms`` unless one is
        already sooner; a step refused sends nothing.

        ``expiry``: ``EXPIRE`` gives the turn's keys the finished-turn expiry, ``PERSIST`` takes
        it away (a stopped turn continued). ``allow_oom``: the step may write while Redis is at
        ``maxmemory`` (a turn's end after ``StoreFull``; a few small writes). Raises
        ``TransitionRefused`` (the turn is in another status, or changed since it was read),
        ``UnknownTurn`` and ``StoreFull``.
        """
        turn_keys, args = self.step_args(
            turn_id, step, expect, events, fields, expiry, outgoing, look_at_ms
        )
        step_script = self._transition_oom if allow_oom else self._transition
        try:
            try:
                return int(self.ledger.retry(lambda: step_script(keys=turn_keys, args=args)))
            except redis.ResponseError as e:
                if not (allow_oom and _no_script_flags(e)):
                    raise
                # A Redis before 7 (or fakeredis) cannot read the flags: the plain step, which
                # writes only when there is memory for it
                return int(self.ledger.retry(lambda: self._transition(keys=turn_keys, args=args)))
        except redis.ResponseError as e:
            refused = refusal(turn_id, step, e)
            if refused is e:
                raise
            raise refused from e

    @property
    def sends_with_steps(self) -> bool:
        """Can a step carry an ``Outgoing`` message? Not on a Redis Cluster, whose scripts
        touch one slot (and whose broker is another server anyway)."""
        return not isinstance(self.client, RedisCluster)

    def mark(self, turn_id: str, **fields: MetaValue) -> None:
        """Set bookkeeping fields (not the status) of an existing turn, whatever its status."""
        with suppress(UnknownTurn):  # expired meanwhile: nothing left to mark
            self.transition(turn_id, None, expect={}, fields=fields)

    def renew(self, lease: Lease, until_ms: int) -> bool:
        """The run's heartbeat: extend its lease; False when the run no longer holds the turn."""
        try:
            self.transition(
                lease.turn_id,
                Step.RENEW,
                expect=self.holder(lease),
                fields={"lease_until": until_ms},
            )
        except (TransitionRefused, UnknownTurn):
            return False
        return True

    @staticmethod
    def holder(lease: Lease) -> dict[str, MetaValue]:
        """The conditions of a step the lease holder takes: its epoch and its run."""
        return {"epoch": lease.epoch, "run_id": lease.run_id}

    def step_args(
        self,
        turn_id: str,
        step: Step | None,
        expect: Mapping[str, MetaValue],
        events: Sequence[Event],
        fields: Mapping[str, MetaValue] | None,
        expiry: str,
        outgoing: Outgoing | None = None,
        look_at_ms: int = 0,
    ) -> tuple[Sequence[str], list[MetaValue]]:
        """The keys and arguments of ``lua/transition.lua`` for a step."""
        allowed = tuple(TurnStatus) if step is None else allowed_from(step)
        to = None if step is None else target(step)
        ttl = {EXPIRE: self.ledger.finished_ttl_s, PERSIST: -1, KEEP: 0}[expiry]
        args: list[MetaValue] = [str(step or "mark"), to.value if to else "", ttl, len(allowed)]
        args += [status.value for status in allowed]
        args.append(len(expect))
        for name, value in expect.items():
            args += [name, value]
        args.append(len(events))
        args += [encode(event) for event in events]
        turn_keys: Sequence[str] = keys.turn_keys(turn_id)
        if outgoing is None:
            args.append(0)
        else:
            if not self.sends_with_steps:
                raise ValueError("a step's message needs the ledger and the broker on one server")
            if look_at_ms <= 0:
                raise ValueError("a step's message needs the reaper's look at the turn")
            args += [1, outgoing.message, outgoing.mark_ttl_s, look_at_ms]
            turn_keys = [*turn_keys, outgoing.queue, outgoing.mark, keys.active_turns()]
        for name, value in (fields or {}).items():
            args += [name, value]
        return turn_keys, args

    # -- reads -------------------------------------------------------------------------------

    def meta(self, turn_id: str) -> TurnMeta:
        raw = self.ledger.retry(lambda: self.client.hgetall(keys.turn_meta(turn_id)))
        if not raw:
            raise UnknownTurn(turn_id)
        return TurnMeta.from_hash(turn_id, raw)

    def metas(self, turn_ids: Sequence[str]) -> list[TurnMeta | UnknownTurn | CorruptTurn]:
        """Several turns' metadata in one round trip (``batches``), each a ``TurnMeta`` or the
        error ``meta`` would raise for it."""

        def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for turn_id in turn_ids:
                pipe.hgetall(keys.turn_meta(turn_id))
            return list(pipe.execute())

        found: list[TurnMeta | UnknownTurn | CorruptTurn] = []
        for turn_id, raw in zip(turn_ids, self.ledger.retry(read, "read"), strict=True):
            try:
                found.append(TurnMeta.from_hash(turn_id, raw) if raw else UnknownTurn(turn_id))
            except CorruptTurn as e:
                found.append(e)
        return found

    @property
    def batches(self) -> bool:
        """May several turns' steps and reads go in one round trip (a pipeline)? Not on a Redis
        Cluster, whose turns live on many servers."""
        return self.sends_with_steps

    def transitions(self, steps: Sequence[PlannedStep]) -> list[int | Exception]:
        """Several turns' steps (``transition``'s, each on its own turn) in one round trip, in
        order; each answers its epoch after the step, or the error ``transition`` would raise
        (``TransitionRefused``, ``UnknownTurn``). A pipeline cut off with its connection is sent
        again whole: each step is conditioned on its turn as it was read, so a repeat of one that
        was taken is refused, and sends nothing again."""
        planned = [
            (
                step,
                self.step_args(
                    step.turn_id,
                    step.step,
                    step.expect,
                    (),
                    step.fields,
                    KEEP,
                    step.outgoing,
                    step.look_at_ms,
                ),
            )
            for step in steps
        ]

        def run() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for _, (turn_keys, args) in planned:
                self._transition(keys=turn_keys, args=args, client=pipe)
            return list(pipe.execute(raise_on_error=False))

        answers: list[int | Exception] = []
        for (step, _), reply in zip(planned, self.ledger.retry(run), strict=True):
            if isinstance(reply, redis.ResponseError):
                answers.append(refusal(step.turn_id, step.step, reply))
            elif isinstance(reply, Exception):
                answers.append(reply)
            else:
                answers.append(int(reply))
        return answers

    # -- the reaper's index ------------------------------------------------------------------

    def watch(self, turn_id: str, at_ms: int, *, sooner: bool = False) -> None:
        """Have the reaper look at the turn at ``at_ms`` (ms since the epoch); ``sooner``: only
        if that is sooner than the look already set (or there is none)."""
        self.client.zadd(keys.active_turns(), {turn_id: at_ms}, lt=sooner)

    def unwatch(self, turn_id: str) -> None:
        self.client.zrem(keys.active_turns(), turn_id)

    def take_due(self, now_ms: int, count: int, hold_ms: int) -> list[str]:
        """The turns whose look has come (most overdue first, at most ``count``), each put off
        by ``hold_ms`` in the same step so another reaper takes others (``lua/due.lua``); the
        look at each sets its next one."""
        due = self.ledger.retry(
            lambda: self._due(keys=[keys.active_turns()], args=[now_ms, count, hold_ms])
        )
        return [text(turn_id) for turn_id in due]

    def hint_timer(self, turn_id: str, wake_at_ms: int) -> None:
        """Say when a waiting turn's timer falls due (``keys.timer_hints``)."""
        self.client.zadd(keys.timer_hints(), {turn_id: wake_at_ms})

    def next_timer(self, now_ms: int) -> int | None:
        """When the next timer falls due after ``now_ms`` (ms; None: none hinted), the hints
        whose time came dropped on the way (their turns' looks are the reaper's index's)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.zremrangebyscore(keys.timer_hints(), "-inf", now_ms)
        pipe.zrange(keys.timer_hints(), 0, 0, withscores=True)
        _, first = pipe.execute()
        return int(first[0][1]) if first else None

    def watch_all(self, looks: Mapping[str, int]) -> None:
        """``watch`` for several turns at once: each at its ms time."""
        if looks:
            self.client.zadd(keys.active_turns(), dict(looks))

    def due(self, now_ms: int, count: int) -> list[str]:
        """Turns the reaper should look at now, most overdue first."""
        due = self.client.zrangebyscore(keys.active_turns(), "-inf", now_ms, start=0, num=count)
        return [text(turn_id) for turn_id in due]

    # -- Stop --------------------------------------------------------------------------------

    def request_stop(self, turn_id: str, code: str = "cancelled") -> None:
        """Set the turn's Stop flag, holding the code the turn stops with (``cancelled``; a new
        message's ``superseded``); a code set before is kept (the first reason stands)."""
        flag = keys.turn_cancel(turn_id)
        if not self.client.set(flag, code, ex=STOP_FLAG_TTL_S, nx=True):
            self.client.expire(flag, STOP_FLAG_TTL_S)

    def clear_stop(self, turn_id: str) -> None:
        self.client.delete(keys.turn_cancel(turn_id))

    def stop_requested(self, turn_id: str) -> bool:
        return bool(self.client.exists(keys.turn_cancel(turn_id)))

    def stop_code(self, turn_id: str) -> str:
        """The code the turn's Stop flag holds (``cancelled`` when it holds none)."""
        flag = self.client.get(keys.turn_cancel(turn_id))
        return stop_code("" if flag is None else text(flag))
