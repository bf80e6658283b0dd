"""The one service of a turn's lifecycle (CONTRACT §7.7): every step a turn takes, decided here.

Each step is a transition of the ledger's state machine (``ledger.turn.TABLE``) carried out
atomically by ``TurnStore``; a step whose turn moved on in between (another client, another
reaper, the run itself) is refused there, so two actors racing for a turn get one winner and the
others a clear refusal. The chunk task, the API, the CLI, the reaper and the test harness all call
this service; the chunk path (``run_chunk``) is the same for all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import redis
import structlog

from ledger.cache import EventCache
from ledger.errors import FencedOut, LedgerError, TransitionRefused, UnknownTurn
from ledger.events import Event, RunEnded, ToolDone, TurnEnded, TurnStarted
from ledger.store import Ledger, MetaValue
from ledger.turn import Step, StopCode, TurnMeta, TurnStatus, continue_refusal
from ledger.turns import EXPIRE, PERSIST, TurnStore
from worker.clock import Clock, Ids
from worker.failpoints import OFF, Failpoints
from worker.lifecycle.dispatch import Dispatcher
from worker.loop import AgentLoop, RunResult
from worker.recorder import RunContext
from worker.settings import Settings

log = structlog.get_logger("dres.lifecycle")


@dataclass(frozen=True)
class NewTurn:
    turn_id: str
    conversation_id: str
    run_id: str


@dataclass(frozen=True)
class Outcome:
    ok: bool
    #: why not, in words a client can show (or what was done)
    reason: str = ""
    run_id: str | None = None


class Lifecycle:
    def __init__(
        self,
        ledger: Ledger,
        settings: Settings,
        clock: Clock,
        ids: Ids,
        dispatcher: Dispatcher,
        *,
        cache: EventCache | None = None,
        heartbeat: Callable[[RunContext], AbstractContextManager[object]] | None = None,
        failpoints: Failpoints = OFF,
    ) -> None:
        self.ledger = ledger
        self.store = TurnStore(ledger)
        self.settings = settings
        self.clock = clock
        self.ids = ids
        self.dispatcher = dispatcher
        self.cache = cache
        #: keeps a running run's lease alive while it runs (none: the lease is not renewed)
        self.heartbeat = heartbeat or (lambda run: nullcontext())
        self.failpoints = failpoints

    def ms(self, after_s: float = 0.0) -> int:
        return int((self.clock.now() + after_s) * 1000)

    # -- a new turn --------------------------------------------------------------------------

    def create(
        self,
        message: str,
        *,
        conversation_id: str | None = None,
        mode: str = "foreground",
        model: str | None = None,
        turn_id: str | None = None,
        prior_turn_note: str | None = None,
    ) -> NewTurn:
        """Record a new turn (``turn_started``, queued, its first run pending); no dispatch."""
        turn_id = turn_id or self.ids.new("turn")
        conversation_id = conversation_id or self.ids.new("conv")
        run_id = self.ids.new("run")
        now = self.clock.now()
        event = TurnStarted(
            event_id=self.ids.new("ev"),
            turn_id=turn_id,
            run_id=run_id,
            chunk=0,
            ts=now,
            conversation_id=conversation_id,
            message=message,
            mode=mode,
            model=model,
            prior_turn_note=prior_turn_note,
        )
        fields = {"model": model or "", "dispatched": now, "redispatches": 0}
        look_at = self.ms(self.settings.handoff_grace_s)
        self.store.create(event, first_run=run_id, look_at_ms=look_at, fields=fields)
        return NewTurn(turn_id, conversation_id, run_id)

    def launch(self, turn_id: str, run_id: str, mode: str) -> None:
        """Dispatch a recorded pending run, watched for a lost message."""
        self.store.watch(turn_id, self.ms(self.settings.handoff_grace_s))
        self.dispatcher.dispatch(turn_id, run_id, mode)

    # -- the chunk path ----------------------------------------------------------------------

    def claim(self, turn_id: str, run_id: str) -> RunContext | None:
        """Claim the turn's pending run (recording run_started); None when ``run_id`` is not it.

        With the process's cache, the claim also reads what is new of the turn in its atomic
        step: the run's snapshot, with no round trip of its own.
        """
        cache = self.cache
        lease_until = self.ms(self.settings.lease_s)
        claim = self.store.claim(
            turn_id,
            run_id,
            lease_until_ms=lease_until,
            event_id=self.ids.new("ev"),
            ts=self.clock.now(),
            read_from=cache.read_point(turn_id) if cache is not None else "",
        )
        if claim.lease is None or claim.meta is None:
            return None
        # The reaper looks again when the lease would run out without its heartbeat.
        self.store.watch(turn_id, lease_until)
        meta = claim.meta
        return RunContext(
            claim.lease,
            mode=meta.mode,
            model=meta.model or None,
            stop_requested=meta.stop_requested,
            snapshot=cache.absorb(claim) if cache is not None else None,
            chunk_base=meta.chunk_base,
            conversation_id=meta.conversation_id,
        )

    def run_chunk(
        self,
        turn_id: str,
        run_id: str,
        loop: AgentLoop,
        *,
        interrupts: tuple[type[BaseException], ...],
        redelivered: bool = False,
    ) -> str:
        """One chunk: claim the pending run, run it, and record how it ended (or hand it over).

        ``interrupts`` (Celery's soft limit) hand the turn to its next chunk wherever they land,
        also while the ending is being recorded: a turn that already ended refuses the hand-over.
        Returns what happened, in a word or two.
        """
        run = self.claim(turn_id, run_id)
        if run is None:
            return self.not_claimed(turn_id, run_id, redelivered)
        structlog.contextvars.bind_contextvars(chunk=run.chunk, epoch=run.epoch)
        try:
            with self.heartbeat(run):
                result = loop.run(run)
                return self.finish(run, result)
        except interrupts:
            return self.chain(run)
        except FencedOut as e:
            log.warning("another run holds the turn; this one stops writing", error=str(e))
            return "fenced-out"
        except (LedgerError, redis.ConnectionError, redis.TimeoutError):
            # Redis is unreachable: nothing can be recorded; the lease runs out, the reaper acts
            raise
        except Exception as e:
            log.exception("chunk failed")
            self.fail(run, e)
            return "failed"

    def finish(self, run: RunContext, result: RunResult) -> str:
        """Record the run's and the turn's end in one fenced step; the turn's keys then expire."""
        if result.status == TurnStatus.COMPLETED:
            ended = self._turn_ended(run, TurnStatus.COMPLETED, "", "", can_continue=False)
            step = Step.COMPLETE
        else:
            code = StopCode.of(result.code)
            can_continue = self._is_newest(run.turn_id, run.conversation_id)
            ended = self._turn_ended(run, TurnStatus.STOPPED, code, result.detail, can_continue)
            step = Step.STOP
        events = [*result.held, self._run_ended(run, result.run_reason, result.detail), ended]
        self._end(run, step, events, ended.code)
        self.failpoints.hit("turn.ended")  # chaos and tests: a soft limit right after the end
        if self.cache is not None and step == Step.COMPLETE:
            self.cache.forget(run.turn_id)
        return str(ended.status if not ended.code else f"{ended.status}: {ended.code}")

    def chain(self, run: RunContext) -> str:
        """The soft limit: hand the turn to its next chunk, or stop it at the chunk budget."""
        budget = self.settings.max_chunks
        try:
            if run.chunk + 1 - run.chunk_base >= budget:
                detail = f"the turn used its {budget} chunks"
                ended = self._turn_ended(
                    run,
                    TurnStatus.STOPPED,
                    StopCode.MAX_CHUNKS,
                    detail,
                    self._is_newest(run.turn_id, run.conversation_id),
                )
                self._end(run, Step.STOP, [self._run_ended(run, "soft_limit", detail), ended])
                return "stopped: max_chunks"
            successor = self.hand_over(run)
        except TransitionRefused as e:
            log.info("soft limit after the run's turn moved on; nothing to hand over", why=str(e))
            return "ended"
        fault = self.failpoints.hit("chunk.handoff")  # chaos only: crash, drop or duplicate here
        if fault == "drop":
            self.store.watch(run.turn_id, self.ms(self.settings.handoff_grace_s))
            return "chained (message dropped)"
        self.launch(run.turn_id, successor, run.mode)
        if fault == "duplicate":
            self.dispatcher.dispatch(run.turn_id, successor, run.mode)
        log.info("soft limit: chained the next chunk", successor=successor)
        return "chained"

    def hand_over(self, run: RunContext, reason: str = "soft_limit") -> str:
        """End ``run`` and record its successor (the next chunk) as the turn's pending run.

        One fenced step: a run that no longer holds the turn, or whose turn ended, cannot hand it
        over. Returns the successor's run id, which the caller then dispatches (ids only).
        """
        successor = self.ids.new("run")
        fields: dict[str, MetaValue] = {
            "next_run": successor,
            "next_chunk": run.chunk + 1,
            "next_cause": "next_chunk",
            "dispatched": self.clock.now(),
            "redispatches": 0,
        }
        self.store.transition(
            run.turn_id,
            Step.HAND_OVER,
            expect=self.store.holder(run.lease),
            events=[self._run_ended(run, reason)],
            fields=fields,
        )
        return successor

    def fail(self, run: RunContext, error: BaseException) -> None:
        """A chunk raised: the turn stops (``internal_error``) with Continue available."""
        detail = repr(error)[:500]
        try:
            ended = self._turn_ended(
                run,
                TurnStatus.STOPPED,
                StopCode.INTERNAL_ERROR,
                detail,
                self._is_newest(run.turn_id, run.conversation_id),
            )
            self._end(run, Step.STOP, [self._run_ended(run, "error", detail), ended])
        except LedgerError:
            log.exception("could not record the failure")

    def not_claimed(self, turn_id: str, run_id: str, redelivered: bool) -> str:
        meta = self.store.meta(turn_id)
        if redelivered and meta.run_id == run_id and meta.status == TurnStatus.RUNNING:
            # This very run held the turn and its message came back: its worker may be lost, or
            # the broker's visibility timeout ran out under a live run. Only a lease that ran out
            # says which; until then the reaper looks at the turn when it does.
            if meta.lease_until > self.ms():
                self.store.watch(turn_id, meta.lease_until)
                return "holder alive"
            outcome = self.take_over(meta, "the run's worker was lost (message redelivered)")
            return f"took over: {outcome.reason}"
        log.info("duplicate or stale chunk message; nothing to run", status=meta.status)
        return "not-claimed"

    def _end(self, run: RunContext, step: Step, events: Sequence[Event], code: str = "") -> None:
        fields = {"code": code, "next_run": ""}
        expect = self.store.holder(run.lease)
        self.store.transition(
            run.turn_id, step, expect=expect, events=events, fields=fields, expiry=EXPIRE
        )
        self.store.unwatch(run.turn_id)

    # -- from outside a run ------------------------------------------------------------------

    def is_cancelled(self, turn_id: str) -> bool:
        """Was Stop requested? A check that cannot reach Redis says no: the next one asks again."""
        try:
            return self.store.stop_requested(turn_id)
        except (redis.ConnectionError, redis.TimeoutError) as e:
            log.warning("could not check for a Stop request", error=repr(e))
            return False

    def stop(self, turn_id: str) -> Outcome:
        """Cancel a running or resuming turn; a pending run never runs."""
        meta = self.store.meta(turn_id)
        if meta.ended:
            return Outcome(False, f"the turn is not running (status {meta.status})")
        self.store.request_stop(turn_id)
        if meta.next_run:
            ended = self._event(
                meta,
                TurnEnded,
                status="stopped",
                code="cancelled",
                detail="Stop requested",
                can_continue=self._is_newest(turn_id, meta.conversation_id),
            )
            try:
                self.store.transition(
                    turn_id,
                    Step.STOP_PENDING,
                    expect={"next_run": meta.next_run, "epoch": meta.epoch},
                    events=[ended],
                    fields={"next_run": "", "code": StopCode.CANCELLED.value},
                    expiry=EXPIRE,
                )
            except TransitionRefused:
                return Outcome(True, "stopping at the next safe point")  # it started meanwhile
            self.dispatcher.revoke(turn_id, meta.next_run)
            self.store.unwatch(turn_id)
            return Outcome(True, "cancelled before the next chunk ran")
        return Outcome(True, "stopping at the next safe point")

    def can_continue(self, meta: TurnMeta) -> bool:
        return self.continue_refusal(meta, auto=False) is None

    def continue_refusal(self, meta: TurnMeta, *, auto: bool) -> str | None:
        newest = self.store.newest_turn(meta.conversation_id)
        return continue_refusal(
            meta, newest_turn=newest, auto=auto, max_auto=self.settings.max_auto_continue
        )

    def continue_turn(self, turn_id: str, *, auto: bool) -> Outcome:
        """Continue a stopped turn with a new run (CONTRACT §7.7); refusals say why."""
        meta = self.store.meta(turn_id)
        refusal = self.continue_refusal(meta, auto=auto)
        if refusal:
            return Outcome(False, refusal)
        run_id = self.ids.new("run")
        # A turn stopped at its chunk budget goes on with the next chunk and a fresh budget.
        chunk = meta.chunk + 1 if meta.code == StopCode.MAX_CHUNKS else meta.chunk
        fields: dict[str, MetaValue] = {
            "next_run": run_id,
            "next_chunk": chunk,
            "next_cause": "auto_continue" if auto else "continue",
            "chunk_base": chunk,
            "code": "",
            "dispatched": self.clock.now(),
            "redispatches": 0,
            "takeovers": 0,
            "auto_continues": meta.auto_continues + int(auto),
        }
        expect: dict[str, MetaValue] = {
            "epoch": meta.epoch,
            "auto_continues": str(meta.auto_continues),
        }
        if not meta.auto_continues:
            expect["auto_continues"] = ""  # unset until the first automatic continuation
        try:
            self.store.transition(
                turn_id, Step.CONTINUE, expect=expect, fields=fields, expiry=PERSIST
            )
        except TransitionRefused:
            return Outcome(False, "the turn was continued or changed by another request")
        self.store.clear_stop(turn_id)
        self.launch(turn_id, run_id, meta.mode)
        return Outcome(True, "continuing", run_id)

    def take_over(self, meta: TurnMeta, why: str) -> Outcome:
        """The run holding ``meta`` died: resume a background turn, stop a foreground one.

        Guarded by the holder, its epoch and its lease deadline as read, so a run that renewed
        its lease or finished in between is left alone. A background turn whose dead runs made
        no progress ``max_takeovers`` times in a row stops (``no_progress``).
        """
        expect: dict[str, MetaValue] = {
            "run_id": meta.run_id,
            "epoch": meta.epoch,
            "lease_until": meta.lease_until,
        }
        crashed = self._event(meta, RunEnded, reason="crashed", detail=why)
        stalled = 0 if self._progressed(meta) else meta.takeovers + 1
        if self.is_cancelled(meta.turn_id):
            return self._stop_dead(meta, expect, [crashed], StopCode.CANCELLED, "Stop requested")
        if meta.mode != "background":
            return self._stop_dead(meta, expect, [crashed], StopCode.CRASHED, why)
        if stalled > self.settings.max_takeovers:
            detail = f"{stalled} runs in a row died without completing a tool call"
            return self._stop_dead(meta, expect, [crashed], StopCode.NO_PROGRESS, detail)
        run_id = self.ids.new("run")
        fields: dict[str, MetaValue] = {
            "next_run": run_id,
            "next_chunk": meta.chunk,
            "next_cause": "reaper",
            "dispatched": self.clock.now(),
            "redispatches": 0,
            "takeovers": stalled,
        }
        try:
            self.store.transition(
                meta.turn_id, Step.TAKE_OVER, expect=expect, events=[crashed], fields=fields
            )
        except TransitionRefused:
            return Outcome(False, "the turn changed")
        self.launch(meta.turn_id, run_id, "background")
        log.warning("resuming a turn whose run died", turn_id=meta.turn_id, why=why)
        return Outcome(True, "resumed", run_id)

    def _progressed(self, meta: TurnMeta) -> bool:
        """Did the dead run (all its events are of its epoch) complete a tool call?"""
        events = self.ledger.read_from(meta.turn_id, f"{meta.epoch}-0")
        return any(
            isinstance(e.event, ToolDone) and not e.event.is_error and e.event.run_id == meta.run_id
            for e in events
        )

    def _stop_dead(
        self,
        meta: TurnMeta,
        expect: Mapping[str, MetaValue],
        events: list[Event],
        code: StopCode,
        detail: str,
    ) -> Outcome:
        return self.stop_loudly(meta, Step.STOP_DEAD, expect, code, detail, events)

    def stop_loudly(
        self,
        meta: TurnMeta,
        step: Step,
        expect: Mapping[str, MetaValue],
        code: StopCode,
        detail: str,
        events: Sequence[Event] = (),
    ) -> Outcome:
        """End the turn as stopped with Continue available, recording why."""
        ended = self._event(
            meta,
            TurnEnded,
            status="stopped",
            code=code.value,
            detail=detail,
            can_continue=self._is_newest(meta.turn_id, meta.conversation_id),
        )
        try:
            self.store.transition(
                meta.turn_id,
                step,
                expect=expect,
                events=[*events, ended],
                fields={"code": code.value, "next_run": ""},
                expiry=EXPIRE,
            )
        except TransitionRefused:
            return Outcome(False, "the turn changed")
        self.store.unwatch(meta.turn_id)
        log.error("turn stopped", turn_id=meta.turn_id, code=code.value, detail=detail)
        return Outcome(True, f"stopped: {code.value}")

    # -- events ------------------------------------------------------------------------------

    def _is_newest(self, turn_id: str, conversation_id: str) -> bool:
        """Is the turn its conversation's newest (so a stop of it may be continued)?"""
        newest = self.store.newest_turn(conversation_id)
        return newest is None or newest == turn_id

    def _run_ended(self, run: RunContext, reason: str, detail: str = "") -> RunEnded:
        return RunEnded(
            event_id=self.ids.new("ev"),
            turn_id=run.turn_id,
            run_id=run.run_id,
            chunk=run.chunk,
            ts=self.clock.now(),
            reason=reason,
            detail=detail,
        )

    def _turn_ended(
        self, run: RunContext, status: TurnStatus, code: str, detail: str, can_continue: bool
    ) -> TurnEnded:
        return TurnEnded(
            event_id=self.ids.new("ev"),
            turn_id=run.turn_id,
            run_id=run.run_id,
            chunk=run.chunk,
            ts=self.clock.now(),
            status=status.value,
            code=str(code),
            detail=detail,
            can_continue=can_continue,
        )

    def _event(self, meta: TurnMeta, cls: type[Event], **fields: object) -> Event:
        return cls(
            event_id=self.ids.new("ev"),
            turn_id=meta.turn_id,
            run_id=meta.run_id or "control",
            chunk=meta.chunk,
            ts=self.clock.now(),
            **fields,
        )


__all__ = ["Lifecycle", "NewTurn", "Outcome", "UnknownTurn"]
