"""Acting on a turn from outside its run: Stop, Continue, and taking over from a dead run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import redis
import structlog

from ledger.errors import TransitionRefused
from ledger.events import Event, RunEnded, ToolDone
from ledger.store import MetaValue
from ledger.turn import Step, StopCode, TurnMeta, TurnStatus, continue_refusal
from ledger.turns import PERSIST
from worker.lifecycle.base import LifecycleBase, Outcome
from worker.lifecycle.heartbeat import Beats

log = structlog.get_logger("dres.lifecycle")


class Control(LifecycleBase):
    def is_cancelled(self, turn_id: str) -> bool:
        """Was Stop requested? A check that cannot reach Redis says no: the next one asks again."""
        try:
            return self.store.stop_requested(turn_id)
        except (redis.ConnectionError, redis.TimeoutError) as e:
            log.warning("could not check for a Stop request", error=repr(e))
            return False

    def stop_polled(self, turn_id: str, beats: Beats) -> bool:
        """Was Stop requested, as the heartbeat of the turn's run in this process (``beats``) last
        read it (a ``DRES_CANCEL_POLL_S`` tick ago at most), or as Redis answers when none reads
        it: for a run's frequent looks (between deltas, in a sleep), which then cost no round
        trip. A safe point, where a look decides whether a tool runs, asks Redis
        (``is_cancelled``)."""
        seen = beats.stop_seen(turn_id)
        return self.is_cancelled(turn_id) if seen is None else seen

    def stop(self, turn_id: str, code: StopCode = StopCode.CANCELLED) -> Outcome:
        """Cancel a running, resuming, queued or waiting turn: a running run ends at its next
        safe point, a pending run never runs, a held or waiting turn stops now. ``code``: why
        (``cancelled``: a person's Stop; ``superseded``: a new message of the conversation)."""
        meta = self.store.meta(turn_id)
        if meta.ended:
            return Outcome(False, f"the turn is not running (status {meta.status})")
        self.store.request_stop(turn_id, code.value)
        code, detail = self.stop_reason(turn_id)  # a reason set before stands
        # Read again after the flag is set: a run that ended waiting before the flag was set is
        # seen here as waiting; one that ends waiting after sees the flag (``Approvals.wait``).
        meta = self.store.meta(turn_id)
        while meta.status == TurnStatus.WAITING:
            # no run holds it: it stops now, its open approval requests voided
            if self.stop_waiting(meta, code, detail):
                return Outcome(True, f"{code.value} while waiting for approval")
            meta = self.store.meta(turn_id)  # decided, expired or stopped meanwhile
        if meta.ended:
            if meta.code == code:
                return Outcome(True, code.value)
            return Outcome(False, f"the turn is not running (status {meta.status})")
        if meta.status == TurnStatus.QUEUED and meta.held:
            expect: dict[str, MetaValue] = {"held": "1", "epoch": meta.epoch}
            if self.stop_loudly(meta, Step.STOP_PENDING, expect, code, detail).ok:
                return Outcome(True, f"{code.value} before it started")
            meta = self.store.meta(turn_id)  # released meanwhile: its run is pending now
        if not meta.next_run:
            return Outcome(True, "stopping at the next safe point")
        expect = {"next_run": meta.next_run, "epoch": meta.epoch}
        if not self.stop_loudly(meta, Step.STOP_PENDING, expect, code, detail).ok:
            return Outcome(True, "stopping at the next safe point")  # it started meanwhile
        self.dispatcher.revoke(turn_id, meta.next_run)
        return Outcome(True, f"{code.value} before the next chunk ran")

    def can_continue(self, meta: TurnMeta) -> bool:
        return self.continue_refusal(meta, auto=False) is None

    def continue_refusal(self, meta: TurnMeta, *, auto: bool) -> str | None:
        newest = self.store.newest_turn(meta.conversation_id)
        return continue_refusal(
            meta, newest_turn=newest, auto=auto, max_auto=self.settings.max_auto_continue
        )

    def continue_turn(self, turn_id: str, *, auto: bool) -> Outcome:
        """Continue a stopped turn with a new run (docs/semantics.md); refusals say why. The run
        goes through the conversation's line as a new turn does: at once while no other turn of
        the conversation is live (the usual case: only the newest stop may be continued)."""
        meta = self.store.meta(turn_id)
        refusal = self.continue_refusal(meta, auto=auto)
        if refusal:
            return Outcome(False, refusal)
        # A turn stopped at its chunk budget goes on with the next chunk and a fresh budget.
        chunk = meta.chunk + 1 if meta.code == StopCode.MAX_CHUNKS else meta.chunk
        fields: dict[str, MetaValue] = {
            "held": 1,
            "next_run": "",
            "next_chunk": chunk,
            "next_cause": "auto_continue" if auto else "continue",
            "chunk_base": chunk,
            "code": "",
            "dispatched": self.clock.now(),
            "redispatches": 0,
            "takeovers": 0,
            "auto_continues": meta.auto_continues + int(auto),
        }
        # Two requests that read the same stop: the first moves it on, the second is refused.
        # ``auto_continues`` is unset until the first automatic continuation.
        expect: dict[str, MetaValue] = {
            "epoch": meta.epoch,
            "auto_continues": meta.auto_continues or "",
        }
        # The reaper looks at the turn within the hand-off grace, watched before the step: a
        # stopped turn is in no index, and a Continue whose release never happened (its process
        # died, or a Redis restart lost the writes after the step) must still go on.
        # Refused, the look finds the turn ended and drops it.
        self.store.watch(turn_id, self.ms(self.settings.handoff_grace_s))
        try:
            self.store.transition(
                turn_id, Step.CONTINUE, expect=expect, fields=fields, expiry=PERSIST
            )
        except TransitionRefused:
            return Outcome(False, "the turn was continued or changed by another request")
        self.store.clear_stop(turn_id)
        # a Continue updates the conversation: it moves to the top of the listing
        self.store.conversations.touch(meta.conversation_id, self.ms())
        released = self.advance(meta.conversation_id)
        if released is None or released.turn_id != turn_id:
            return Outcome(True, "continuing once the conversation's live turn ends")
        return Outcome(True, "continuing", released.run_id)

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
        crashed = [self.event(meta, RunEnded, reason="crashed", detail=why)]
        if self.is_cancelled(meta.turn_id):
            code, detail = self.stop_reason(meta.turn_id)
            return self.stop_loudly(meta, Step.STOP_DEAD, expect, code, detail, crashed)
        if meta.mode != "background":
            return self.stop_loudly(meta, Step.STOP_DEAD, expect, StopCode.CRASHED, why, crashed)
        stalled = 0 if self._progressed(meta) else meta.takeovers + 1
        if stalled > self.settings.max_takeovers:
            detail = f"{stalled} runs in a row died without completing a tool call"
            code = StopCode.NO_PROGRESS
            return self.stop_loudly(meta, Step.STOP_DEAD, expect, code, detail, crashed)
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
                meta.turn_id, Step.TAKE_OVER, expect=expect, events=crashed, fields=fields
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
        ended = self.stopped(meta, code, detail, continuable=code != StopCode.SUPERSEDED)
        try:
            self.close(
                meta.turn_id, step, expect, [*events, ended], conversation_id=meta.conversation_id
            )
        except TransitionRefused:
            return Outcome(False, "the turn changed")
        log.error("turn stopped", turn_id=meta.turn_id, code=code.value, detail=detail)
        return Outcome(True, f"stopped: {code.value}")
