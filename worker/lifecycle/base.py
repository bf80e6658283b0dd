"""What every part of the lifecycle service shares: its collaborators, the events that end runs
and turns, and the one way a turn is ended (``close``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import redis
import structlog

from ledger.cache import EventCache
from ledger.errors import LedgerError
from ledger.events import ApprovalRequested, Event, RunEnded, TurnEnded
from ledger.store import Ledger, MetaValue
from ledger.tenants import Admitted
from ledger.turn import Step, StopCode, TurnMeta, TurnStatus
from ledger.turns import EXPIRE, TurnStore
from worker.base import metrics
from worker.base.clock import Clock, Ids
from worker.base.failpoints import OFF, Failpoints
from worker.base.settings import Settings
from worker.base.tracing import OFF as OFF_TRACER
from worker.base.tracing import Tracer
from worker.engine.outcome import RunResult
from worker.engine.recorder import E, RunContext, make_event
from worker.lifecycle.dispatch import Dispatcher
from worker.lifecycle.hooks import Hook, Hooks
from worker.lifecycle.tenancy import Tenancy

log = structlog.get_logger("dres.lifecycle")

#: what a turn stopped by its Stop flag says, by the flag's code
STOP_DETAILS = {
    StopCode.CANCELLED: "Stop requested",
    StopCode.SUPERSEDED: "a new message in the conversation superseded it",
}

#: tells a person that a run ended waiting on these approval requests (each names its turn): the
#: edges' webhook. Best-effort: it returns at once, the turn never waits on it.
NotifyApprovals = Callable[[Sequence[ApprovalRequested]], None]


#: a character that is not a space, a tab or a line break: a message holds one. Spelled out, not
#: ``\S``, so Python and a JSON Schema (ECMA-262) validator read the pattern alike.
NOT_BLANK = r"[^ \t\n\r\x0b\x0c]"


def is_blank(message: str) -> bool:
    return re.search(NOT_BLANK, message) is None


@dataclass(frozen=True)
class NewTurn:
    turn_id: str
    conversation_id: str
    #: its first run, pending and sent ("": the turn waits behind its conversation's line)
    run_id: str
    #: the turn was there already (its id given and taken: another process made it meanwhile),
    #: and this call recorded and sent nothing
    existed: bool = False


@dataclass(frozen=True)
class Released:
    """A held turn let through its conversation's line (``Line.advance``): its run, now pending
    and sent."""

    turn_id: str
    run_id: str


@dataclass(frozen=True)
class Outcome:
    ok: bool
    #: why not, in words a client can show (or what was done)
    reason: str = ""
    run_id: str | None = None


class LifecycleBase:
    def __init__(
        self,
        ledger: Ledger,
        settings: Settings,
        clock: Clock,
        ids: Ids,
        dispatcher: Dispatcher,
        *,
        cache: EventCache | None = None,
        heartbeat: Callable[[RunContext, Callable[[], None]], AbstractContextManager[object]]
        | None = None,
        failpoints: Failpoints = OFF,
        notify: NotifyApprovals | None = None,
        tracer: Tracer = OFF_TRACER,
        hooks: Sequence[Hook] | None = None,
    ) -> None:
        self.ledger = ledger
        self.store = TurnStore(ledger)
        self.settings = settings
        self.clock = clock
        self.ids = ids
        self.dispatcher = dispatcher
        self.cache = cache
        #: keeps a running run's lease alive while it runs, and calls its second argument when
        #: Stop is requested (none: the lease is not renewed, Stop is seen at safe points only)
        self.heartbeat = heartbeat or (lambda run, on_stop: nullcontext())
        self.failpoints = failpoints
        #: none: nobody is told; the requests stand in the ledger and the lists all the same
        self.notify: NotifyApprovals = notify or (lambda requests: None)
        #: the process's traces (docs/tracing.md)
        self.tracer = tracer
        #: tenants: fair order and limits (docs/semantics.md); a hook, as the next concern is
        self.tenancy = Tenancy(self.store, settings, clock, dispatcher)
        #: the concerns taking part at the lifecycle's points (``worker.lifecycle.hooks``)
        self.hooks = Hooks([self.tenancy] if hooks is None else hooks)

    def ms(self, after_s: float = 0.0) -> int:
        """The clock's now plus ``after_s``, in ms since the epoch (leases, the reaper's index)."""
        return int((self.clock.now() + after_s) * 1000)

    def resuming_after_wait(
        self, meta: TurnMeta, cause: str
    ) -> tuple[str | None, dict[str, MetaValue]]:
        """The run that resumes a waiting turn once nothing is awaited any more (the last
        decision or client output), and the fields its step sets. The turn first takes its
        tenant's next free slot (before any new turn: ``Tenancy``); with none free the run is
        None and the step leaves the turn ``queued`` and held, its next run's chunk and cause
        set, for the admission that lets it through. Watched before the step, not only by
        ``launch`` after it: a waiting turn's look is set for its requests' expiry (a day off, or
        none), so a step whose message then never left (its caller died, or Redis lost the
        writes after it) would wait that long to be sent again; a held one is let through by the
        reaper's look if no admission did. A refused step leaves an early look that finds the
        turn waiting and sets the expiry's again."""
        run_id = self.resuming_run(meta, self.hooks.wait(meta, "resume"))
        self.store.watch(meta.turn_id, self.ms(self.settings.handoff_grace_s))
        return run_id, self.resume_fields(meta, cause, run_id)

    def resuming_run(self, meta: TurnMeta, admitted: Sequence[Admitted]) -> str | None:
        """The run that resumes ``meta``'s turn when its hook's answer ``admitted`` holds it
        (None: no free slot), the others it lets through released."""
        self.let_through(admitted, but=meta.turn_id)
        slot = any(a.turn_id == meta.turn_id for a in admitted)
        return self.ids.new("run") if slot else None

    def resume_fields(self, meta: TurnMeta, cause: str, run_id: str | None) -> dict[str, MetaValue]:
        """What the step that resumes a waiting turn sets: its next run (``run_id``; None: held
        for its tenant's next free slot) of ``cause``, nothing awaited any more."""
        fields: dict[str, MetaValue] = {
            "next_run": run_id or "",
            "next_chunk": meta.chunk + 1,
            "next_cause": cause,
            "dispatched": self.clock.now(),
            "redispatches": 0,
            "takeovers": 0,
            "approval_expires": 0,
            "wake_at": 0,
        }
        if run_id is None:
            fields["held"] = 1
        return fields

    def launch(self, turn_id: str, run_id: str, mode: str) -> None:
        """Dispatch a recorded pending run, watched for a lost message."""
        self.store.watch(turn_id, self.ms(self.settings.handoff_grace_s))
        self.dispatcher.dispatch(turn_id, run_id, mode)

    def take_over(self, meta: TurnMeta, why: str) -> Outcome:
        raise NotImplementedError  # the control steps' (``Control.take_over``)

    def wait(self, run: RunContext, result: RunResult) -> str:
        raise NotImplementedError  # the approvals' (``Approvals.wait``)

    def wake_all(self, metas: Sequence[TurnMeta]) -> dict[str, str]:
        raise NotImplementedError  # the timers' (``Timers.wake_all``)

    def stop_waiting(
        self, meta: TurnMeta, code: StopCode, detail: str, *, advance: bool = True
    ) -> bool:
        raise NotImplementedError  # the approvals' (``Approvals.stop_waiting``)

    def stop(self, turn_id: str, code: StopCode = StopCode.CANCELLED) -> Outcome:
        raise NotImplementedError  # the control steps' (``Control.stop``)

    def advance(self, conversation_id: str, *, ended: str | None = None) -> Released | None:
        raise NotImplementedError  # the line's (``Line.advance``)

    def advance_quietly(self, conversation_id: str, *, ended: str | None = None) -> None:
        raise NotImplementedError  # the line's (``Line.advance_quietly``)

    def let_through(self, admitted: Sequence[Admitted], *, but: str = "") -> None:
        raise NotImplementedError  # the line's (``Line.let_through``)

    def give_back(self, turn_id: str) -> None:
        """The turn gives back what it held for its tenant (it ended, stopped, waits or was
        taken back), and what may start now is let through. Best effort: a failure must not
        undo the caller's step; a slot left taken is mended by the reaper's sweep."""
        try:
            self.let_through(self.hooks.leave(turn_id))
        except (LedgerError, redis.RedisError) as e:
            log.warning("could not give back the turn's slot", turn_id=turn_id, error=repr(e))

    # -- ending a turn -----------------------------------------------------------------------

    def close(
        self,
        turn_id: str,
        step: Step,
        expect: Mapping[str, MetaValue],
        events: Sequence[Event],
        *,
        conversation_id: str,
        allow_oom: bool = False,
        fields: Mapping[str, MetaValue] | None = None,
        advance: bool = True,
    ) -> None:
        """End the turn with ``events``, the last of which is its ``turn_ended``, in one step of
        the state machine; its keys then expire and the reaper stops looking at it, and the next
        turn of its conversation may go (``Line.advance``; ``advance`` False: the caller moves
        the line itself). ``allow_oom``: the step may write while Redis is out of memory (a
        ``store_full`` stop). ``fields``: metadata the step sets besides the code."""
        ended = events[-1]
        assert isinstance(ended, TurnEnded), "a turn is closed by its turn_ended"
        self.store.transition(
            turn_id,
            step,
            expect=expect,
            events=events,
            fields={"code": ended.code, "next_run": "", **(fields or {})},
            expiry=EXPIRE,
            allow_oom=allow_oom,
        )
        metrics.turn_ended(ended.status, ended.code)
        self.store.unwatch(turn_id)
        self.give_back(turn_id)
        if advance:
            self.advance_quietly(conversation_id, ended=turn_id)

    def stop_reason(self, turn_id: str) -> tuple[StopCode, str]:
        """Why the turn's Stop flag stops it: a person's Stop (``cancelled``) or a new message of
        its conversation (``superseded``); a flag that cannot be read is a person's Stop."""
        try:
            code = StopCode.of(self.store.stop_code(turn_id))
        except (redis.ConnectionError, redis.TimeoutError):
            code = StopCode.CANCELLED
        return code, STOP_DETAILS.get(code, STOP_DETAILS[StopCode.CANCELLED])

    def is_newest(self, turn_id: str, conversation_id: str) -> bool:
        """Is the turn its conversation's newest (so a stop of it may be continued)?"""
        newest = self.store.newest_turn(conversation_id)
        return newest is None or newest == turn_id

    # -- events ------------------------------------------------------------------------------

    def run_ended(self, run: RunContext, reason: str, detail: str = "") -> RunEnded:
        return self.of_run(run, RunEnded, reason=reason, detail=detail)

    def of_run(self, run: RunContext, cls: type[E], **fields: Any) -> E:
        return make_event(cls, self.clock, self.ids, run.turn_id, run.run_id, run.chunk, **fields)

    def turn_ended(
        self, run: RunContext, status: TurnStatus, code: str = "", detail: str = ""
    ) -> TurnEnded:
        """The run's turn ends; a stop may be continued while the turn is its conversation's
        newest."""
        stopped = status == TurnStatus.STOPPED and code != StopCode.SUPERSEDED
        return self.of_run(
            run,
            TurnEnded,
            status=status.value,
            code=code,
            detail=detail,
            can_continue=stopped and self.is_newest(run.turn_id, run.conversation_id),
        )

    def stopped(
        self, meta: TurnMeta, code: StopCode, detail: str, *, continuable: bool = True
    ) -> TurnEnded:
        """The ``turn_ended`` of a turn stopped from outside its run (Stop, the reaper, an
        expiry): it may be continued while it is its conversation's newest, and ``continuable``."""
        return self.event(
            meta,
            TurnEnded,
            status="stopped",
            code=code.value,
            detail=detail,
            can_continue=continuable and self.is_newest(meta.turn_id, meta.conversation_id),
        )

    def event(self, meta: TurnMeta, cls: type[E], **fields: Any) -> E:
        """An event written on behalf of the turn's last run (by Stop, the reaper, …)."""
        run_id = meta.run_id or "control"
        return make_event(cls, self.clock, self.ids, meta.turn_id, run_id, meta.chunk, **fields)
