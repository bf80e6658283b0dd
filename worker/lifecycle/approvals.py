"""Approval of writes (docs/semantics.md): a turn that waits for a person, and the decisions on it.

A run whose model made calls that need approval records their ``approval_requested`` and ends
``waiting`` (``Step.WAIT``): no run holds the turn, no worker slot waits. Each request is a field
of the turn's metadata (``ap:<id>`` = state|signature), so a decision is one step of the state
machine whose conditions are the request's state and signature: decided once, atomically, only
for the requested call. The last open request decided resumes the turn (``Step.DECIDE_LAST``,
a run of cause ``approval``); Stop, the expiry (the reaper) and a new message in the
conversation end a waiting turn (``Step.STOP_WAITING``), their requests ``voided`` or
``expired``. A person is told through the injected ``notify`` (the edges' webhook).

A decision's outcome is a ``Decided`` of one ``DecidedKind``: the HTTP wing maps the kinds to
status codes, the CLI to exit codes; nothing here knows either.
"""

from __future__ import annotations

import math
from contextlib import suppress
from dataclasses import dataclass
from enum import Enum

import structlog

from ledger.errors import TransitionRefused, UnknownTurn
from ledger.events import ApprovalDecided, ToolDone
from ledger.store import MetaValue
from ledger.turn import (
    PENDING,
    VOIDED,
    Step,
    StopCode,
    TurnMeta,
    TurnStatus,
    approval_field,
    approval_state,
    client_field,
)
from worker.base import metrics
from worker.engine.outcome import RunResult
from worker.engine.recorder import RunContext
from worker.lifecycle.base import LifecycleBase

log = structlog.get_logger("dres.approvals")

DECISIONS = ("approve", "deny")
#: a decision as a person reads it in the answer's detail
DECIDED = {"approve": "approved", "deny": "denied"}
#: attempts at a decision whose turn another decision changed meanwhile
DECIDE_ATTEMPTS = 8


class DecidedKind(Enum):
    """What became of a person's decision on a request."""

    #: taken: recorded, and the turn resumes once no request is left open
    DECIDED = "decided"
    #: neither approve nor deny
    INVALID = "invalid"
    #: the turn waits, but not on a request of that id
    UNKNOWN = "unknown"
    #: the request was decided before (``Decided.decision`` says how)
    ALREADY = "already"
    #: the turn does not wait (on that request or at all)
    NOT_WAITING = "not_waiting"
    #: the signature is not the requested call's: the call changed since it was shown
    WRONG_SIGNATURE = "wrong_signature"
    #: the turn kept changing under the decision; asking again may take it
    CONTENDED = "contended"


@dataclass(frozen=True)
class Decided:
    """What became of a decision, with a detail in words a person can be shown."""

    kind: DecidedKind
    detail: str
    #: the request's decision: this one, or the one that came first
    decision: str | None = None
    run_id: str | None = None

    @property
    def ok(self) -> bool:
        return self.kind == DecidedKind.DECIDED


class Approvals(LifecycleBase):
    # -- a run ends waiting ------------------------------------------------------------------

    def wait(self, run: RunContext, result: RunResult) -> str:
        """End ``run`` waiting on its turn's open ``result.requests`` (a person's decisions),
        ``result.calls`` (a client's outputs) and ``result.wake_at`` (a timer): one fenced step,
        the requests listed for a person before it and the reaper told when the first expires
        or the timer falls due (a client call has no deadline: the turn waits for it, held by
        nothing, until it comes or the turn stops)."""
        requests = result.requests
        expires = min((r.expires_at for r in requests), default=0.0)
        fields: dict[str, MetaValue] = {
            "next_run": "",
            "approvals_pending": len(requests),
            "approval_expires": expires,
            "clients_pending": len(result.calls),
            "wake_at": result.wake_at,
        }
        for request in requests:
            fields[approval_field(request.approval_id)] = approval_state(PENDING, request.signature)
        for call_id, tool in result.calls:
            fields[client_field(call_id)] = approval_state(PENDING, tool)
        ran = self.run_ended(run, "waiting", result.detail)
        self.store.approvals.add(requests)
        self.store.transition(
            run.turn_id,
            Step.WAIT,
            expect=self.store.holder(run.lease),
            events=[*result.held, ran],
            fields=fields,
        )
        look_at = min(t for t in (expires, result.wake_at, math.inf) if t)
        if look_at < math.inf:
            self.store.watch(run.turn_id, int(look_at * 1000))
        else:
            self.store.unwatch(run.turn_id)
        if result.wake_at:  # every worker's reaper sweeps then, not up to an interval later
            self.store.hint_timer(run.turn_id, int(result.wake_at * 1000))
        if self.store.stop_requested(run.turn_id):
            # Stop came while the run was ending: it stops the waiting turn (``Control.stop``
            # reads the status again after setting the flag, so one of the two sees the other)
            with suppress(UnknownTurn):
                if self.stop_waiting(
                    self.store.meta(run.turn_id), StopCode.CANCELLED, "Stop requested"
                ):
                    return f"stopped: {StopCode.CANCELLED}"
        if requests:
            self.notify(requests)
        log.info(
            "turn waits",
            approvals=[r.approval_id for r in requests],
            calls=[call_id for call_id, _ in result.calls],
            wake_at=result.wake_at or None,
        )
        self.give_back(run.turn_id)  # a waiting turn holds no slot of its tenant
        # a message that came while the run went on supersedes the turn now that it waits
        self.advance_quietly(run.conversation_id, ended=run.turn_id)
        return "waiting"

    # -- a person decides --------------------------------------------------------------------

    def decide(
        self,
        turn_id: str,
        approval_id: str,
        decision: str,
        signature: str,
        *,
        reason: str = "",
        by: str = "api",
    ) -> Decided:
        """Take a person's decision on one request: once, atomically, for the requested
        signature only. The last open request decided resumes the turn in a new run."""
        if decision not in DECISIONS:
            detail = f"decision must be approve or deny, not {decision!r}"
            return Decided(DecidedKind.INVALID, detail)
        for _ in range(DECIDE_ATTEMPTS):
            meta = self.store.meta(turn_id)
            refused = self._refusal(meta, approval_id, signature)
            if refused is not None:
                return refused
            try:
                return self._decide(meta, approval_id, decision, signature, reason, by)
            except TransitionRefused:
                continue  # another decision (or Stop, or the expiry) came first: read again
        detail = "the turn kept changing while the decision was taken; try again"
        return Decided(DecidedKind.CONTENDED, detail)

    def _refusal(self, meta: TurnMeta, approval_id: str, signature: str) -> Decided | None:
        known = meta.approval(approval_id)
        if known is None:
            if meta.status == TurnStatus.WAITING:
                kind = DecidedKind.UNKNOWN
                return Decided(kind, f"turn {meta.turn_id} has no approval request {approval_id}")
            return _not_waiting(meta, approval_id)
        state, requested = known
        if state != PENDING:
            detail = f"approval {approval_id} was already decided: {state}"
            return Decided(DecidedKind.ALREADY, detail, state)
        if meta.status != TurnStatus.WAITING:
            return _not_waiting(meta, approval_id)
        if signature != requested:
            return Decided(
                DecidedKind.WRONG_SIGNATURE,
                f"signature {signature!r} is not the requested call's ({requested}): the call "
                "changed since it was shown; read the request again",
            )
        return None

    def _decide(
        self,
        meta: TurnMeta,
        approval_id: str,
        decision: str,
        signature: str,
        reason: str,
        by: str,
    ) -> Decided:
        field = approval_field(approval_id)
        left = meta.approvals_pending - 1
        expect: dict[str, MetaValue] = {
            field: approval_state(PENDING, signature),
            "approvals_pending": meta.approvals_pending,
        }
        if meta.clients_pending:  # an answer that came meanwhile changes it: read again
            expect["clients_pending"] = meta.clients_pending
        fields: dict[str, MetaValue] = {
            field: approval_state(decision, signature),
            "approvals_pending": left,
        }
        run_id = None
        step = Step.DECIDE
        decided = self.event(
            meta, ApprovalDecided, approval_id=approval_id, decision=decision, reason=reason, by=by
        )
        request = self.store.approvals.open_request(meta.turn_id, approval_id)
        if left <= 0 and not meta.clients_pending:
            run_id, resume = self.resuming_after_wait(meta, "approval")
            step = Step.DECIDE_LAST if run_id else Step.DECIDE_HELD  # held: no free slot
            fields.update(resume)
        self.store.transition(meta.turn_id, step, expect=expect, events=[decided], fields=fields)
        self.store.approvals.remove(meta.turn_id, [approval_id])
        waited = None if request is None else decided.ts - request.ts
        metrics.approval_decided(decision, waited)
        log.info(
            "approval decided",
            turn_id=meta.turn_id,
            approval_id=approval_id,
            by=by,
            decision=decision,
        )
        if step == Step.DECIDE_HELD:
            detail = f"{DECIDED[decision]}; the turn resumes once its tenant has a free slot"
            return Decided(DecidedKind.DECIDED, detail, decision)
        if run_id is None:
            detail = f"{DECIDED[decision]}; {left} request(s) still open"
            return Decided(DecidedKind.DECIDED, detail, decision)
        self.launch(meta.turn_id, run_id, meta.mode)
        detail = f"{DECIDED[decision]}; the turn resumes"
        return Decided(DecidedKind.DECIDED, detail, decision, run_id)

    # -- a waiting turn ends -----------------------------------------------------------------

    def stop_waiting(
        self, meta: TurnMeta, code: StopCode, detail: str, *, advance: bool = True
    ) -> bool:
        """End a waiting turn: its open requests ``expired`` (``approval_expired``) or
        ``voided`` (Stop, a new message). False when the turn changed meanwhile. ``advance``
        False: the caller moves the conversation's line itself (``Line.advance``)."""
        decision = "expired" if code == StopCode.APPROVAL_EXPIRED else "voided"
        open_ids = meta.pending_approvals
        events: list[ApprovalDecided] = [
            self.event(
                meta, ApprovalDecided, approval_id=aid, decision=decision, reason=detail, by="dres"
            )
            for aid in open_ids
        ]
        # a superseded turn is never continued: the new message's turn, made next, is newest
        # a client call the turn waited on gets no answer now: closed as an error (neither
        # completed nor interrupted: a Continue's model may ask the client again)
        unanswered = [
            self.event(
                meta,
                ToolDone,
                call_id=call_id,
                tool=tool,
                result={"error": f"not answered: the turn stopped ({detail})"},
                is_error=True,
            )
            for call_id, tool in meta.pending_calls
        ]
        ended = self.stopped(meta, code, detail, continuable=code != StopCode.SUPERSEDED)
        asked = {aid: self.store.approvals.open_request(meta.turn_id, aid) for aid in open_ids}
        fields: dict[str, MetaValue] = {
            "approvals_pending": 0,
            "approval_expires": 0,
            "clients_pending": 0,
            "wake_at": 0,
        }
        for aid, state, signature in meta.approvals:
            if state == PENDING:
                fields[approval_field(aid)] = approval_state(decision, signature)
        for call_id, tool in meta.pending_calls:
            fields[client_field(call_id)] = approval_state(VOIDED, tool)
        try:
            self.close(
                meta.turn_id,
                Step.STOP_WAITING,
                {"epoch": meta.epoch},
                [*events, *unanswered, ended],
                conversation_id=meta.conversation_id,
                fields=fields,
                advance=advance,
            )
        except TransitionRefused:
            return False
        self.store.approvals.remove(meta.turn_id, open_ids)
        for event in events:
            request = asked.get(event.approval_id)
            metrics.approval_decided(decision, None if request is None else event.ts - request.ts)
        log.warning("waiting turn stopped", turn_id=meta.turn_id, code=code.value)
        return True

    def expire_if_due(self, meta: TurnMeta) -> str:
        """The reaper's look at a waiting turn: stop it once its first request expired, wake
        it once its timer fell due (and nothing else is awaited). A turn that waits on client
        calls alone has no deadline: nothing looks at it until it moves."""
        if meta.wake_at and not meta.approvals_pending and not meta.clients_pending:
            return self.wake_all([meta])[meta.turn_id]
        if not meta.approval_expires:
            self.store.unwatch(meta.turn_id)
            return "awaiting_client"
        if meta.approval_expires and self.clock.now() >= meta.approval_expires:
            detail = (
                f"no decision within {self.settings.approval_ttl_s:g} s "
                f"(DRES_APPROVAL_TTL_S); Continue asks again"
            )
            if self.stop_waiting(meta, StopCode.APPROVAL_EXPIRED, detail):
                return f"stopped: {StopCode.APPROVAL_EXPIRED}"
            return "changed"
        self.store.watch(meta.turn_id, int((meta.approval_expires or self.clock.now()) * 1000))
        return "awaiting_approval"

    def supersede(self, conversation_id: str) -> str | None:
        """A new message in the conversation: its newest turn, if waiting, stops
        (``superseded``); returns that turn's id."""
        newest = self.store.newest_turn(conversation_id)
        if newest is None:
            return None
        for _ in range(DECIDE_ATTEMPTS):
            meta = self.store.meta(newest)
            if meta.status != TurnStatus.WAITING:
                return None
            detail = "a new message in the conversation came while it waited for approval"
            if self.stop_waiting(meta, StopCode.SUPERSEDED, detail):
                return newest
        return None


def _not_waiting(meta: TurnMeta, approval_id: str) -> Decided:
    detail = f"the turn is not waiting on approval {approval_id} (status {meta.status})"
    return Decided(DecidedKind.NOT_WAITING, detail)
