"""Client tools' outputs (docs/semantics.md, waits): a turn that waits for a client's answer to a
call of a tool the client runs, and the answer.

A run whose model called a client tool records the call's ``tool_start`` and ends ``waiting``
(``Approvals.wait``): each awaited call is a field of the turn's metadata (``cl:<call_id>`` =
state|tool). The client's answer — the chat protocol's own, or ``POST
/v1/turns/{id}/tool-outputs/{call_id}`` — is recorded as the call's ``tool_done`` in one step of the
state machine conditioned on the call still awaited: recorded once. The last awaited answer (with
no approval request left open) resumes the turn (``Step.ANSWER_LAST``, a run of cause
``tool_output``). Stop and a new message close the awaited calls unanswered (``stop_waiting``).

An answer's outcome is an ``Answered`` of one ``AnsweredKind``; the HTTP wing maps the kinds to
status codes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

import structlog

from ledger.errors import TransitionRefused
from ledger.events import ToolDone
from ledger.store import MetaValue
from ledger.turn import (
    ANSWERED,
    PENDING,
    Step,
    TurnMeta,
    TurnStatus,
    approval_state,
    client_field,
)
from worker.engine.tools.results import stored_result
from worker.lifecycle.base import LifecycleBase

log = structlog.get_logger("dres.outputs")

#: attempts at an answer whose turn another answer (or a decision) changed meanwhile
ANSWER_ATTEMPTS = 8


class AnsweredKind(Enum):
    #: recorded: the turn resumes once nothing else is awaited
    ANSWERED = "answered"
    #: the call was answered before (or its wait ended unanswered): nothing recorded again
    ALREADY = "already"
    #: the turn does not wait on that call (``Answered.detail`` says what it waits on)
    NOT_WAITING = "not_waiting"
    #: the turn kept changing under the answer; sending it again may take it
    CONTENDED = "contended"


@dataclass(frozen=True)
class Answered:
    kind: AnsweredKind
    detail: str
    #: the run that resumes the turn (None while something else is awaited)
    run_id: str | None = None

    @property
    def ok(self) -> bool:
        return self.kind == AnsweredKind.ANSWERED


def waits_on(meta: TurnMeta) -> str:
    """What a turn waits on, in words (a refused answer names it)."""
    if meta.status != TurnStatus.WAITING:
        return f"it does not wait (status {meta.status})"
    waits = [f"approval {aid}" for aid in meta.pending_approvals]
    waits += [f"the output of call {call_id} ({tool})" for call_id, tool in meta.pending_calls]
    return "it waits on " + ", ".join(waits) if waits else "it waits on nothing"


class ClientOutputs(LifecycleBase):
    def answer(
        self, turn_id: str, call_id: str, output: Any, *, is_error: bool = False
    ) -> Answered:
        """Record a client's output of an awaited call as its ``tool_done``: once, atomically,
        only while the turn waits on it. The last one awaited resumes the turn in a new run."""
        for _ in range(ANSWER_ATTEMPTS):
            meta = self.store.meta(turn_id)
            known = meta.client_call(call_id)
            if known is not None and known[0] != PENDING:
                detail = f"call {call_id} was already {known[0]}: nothing recorded again"
                return Answered(AnsweredKind.ALREADY, detail)
            if known is None or meta.status != TurnStatus.WAITING:
                detail = f"turn {turn_id} does not wait on call {call_id}: {waits_on(meta)}"
                return Answered(AnsweredKind.NOT_WAITING, detail)
            try:
                return self._answer(meta, call_id, known[1], output, is_error)
            except TransitionRefused:
                continue  # another answer, a decision or Stop came first: read again
        detail = "the turn kept changing while the output was recorded; send it again"
        return Answered(AnsweredKind.CONTENDED, detail)

    def _answer(
        self, meta: TurnMeta, call_id: str, tool: str, output: Any, is_error: bool
    ) -> Answered:
        field = client_field(call_id)
        left = meta.clients_pending - 1
        expect: dict[str, MetaValue] = {
            field: approval_state(PENDING, tool),
            "clients_pending": meta.clients_pending,
        }
        if meta.approvals_pending:  # a decision that came meanwhile changes it: read again
            expect["approvals_pending"] = meta.approvals_pending
        fields: dict[str, MetaValue] = {
            field: approval_state(ANSWERED, tool),
            "clients_pending": left,
        }
        step, run_id = Step.ANSWER, None
        if left <= 0 and not meta.approvals_pending:
            run_id, resume = self.resuming_after_wait(meta, "tool_output")
            step = Step.ANSWER_LAST if run_id else Step.ANSWER_HELD  # held: no free slot
            fields.update(resume)
        result = stored_result(output, self.settings.max_result_bytes)
        done = self.event(
            meta, ToolDone, call_id=call_id, tool=tool, result=result, is_error=is_error
        )
        self.store.transition(meta.turn_id, step, expect=expect, events=[done], fields=fields)
        log.info("client output recorded", turn_id=meta.turn_id, call_id=call_id, tool=tool)
        if step == Step.ANSWER_HELD:
            return Answered(
                AnsweredKind.ANSWERED, "recorded; the turn resumes once its tenant has a free slot"
            )
        if run_id is None:
            others = left + meta.approvals_pending
            detail = f"recorded; the turn still waits on {others} other call(s) or approval(s)"
            return Answered(AnsweredKind.ANSWERED, detail)
        self.launch(meta.turn_id, run_id, meta.mode)
        return Answered(AnsweredKind.ANSWERED, "recorded; the turn resumes", run_id)


__all__ = ["Answered", "AnsweredKind", "ClientOutputs", "waits_on"]
