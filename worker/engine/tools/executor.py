"""The tool executor: records every call, and on a resumed attempt applies layer 2.

For each call the model makes, in order:
1. an unknown tool or invalid input gets an error result naming what is wrong; nothing runs;
2. ``worker.engine.tools.calls.decide`` says what layer 2 does with the call on this attempt
   (docs/semantics.md), from the call and the attempt's journal snapshot alone;
3. the executor acts on that decision here: records a blocked or refused call with the result
   the model gets instead, asks a tool's ``reconcile`` hook, or runs the call between its
   ``tool_start`` and ``tool_done``, both recorded inside ``DeferSignals`` so a soft time limit
   never lands between the side effect and its record. What the decision says the attempt
   claims (a completed entry used up, an interrupted one settled) is applied here too.

With ``DRES_DURABILITY`` above ``ack`` (the recorder's ``durable``) a write's ``tool_start`` is
confirmed before its effect runs and its ``tool_done`` before the turn goes on
(``worker.engine.tools.durable``); read-only tools and every other record confirm nothing.

Every result is stored and given to the model through ``worker.engine.tools.results``: a result
whose JSON is longer than ``DRES_MAX_RESULT_BYTES`` is cut, with a marker the model reads.

A tool that raises ``OutcomeUnknown`` (a tool from elsewhere whose write was sent but never
answered) gets no ``tool_done``: the call stays interrupted, and the exception ends the attempt
as a transport error does (``worker.engine.loop``).
"""

from __future__ import annotations

from typing import Any

import structlog
from pydantic_core import to_jsonable_python

from ledger.errors import SignatureError, StopRequested
from ledger.events import ApprovalRequested, ToolBlocked, ToolDone, ToolStart
from ledger.journal import JournalEntry
from ledger.signature import input_signature
from worker.base import metrics
from worker.base.errors import OutcomeUnknown, TurnCancelled
from worker.base.failpoints import OFF, Failpoints
from worker.base.tracing import OFF as OFF_TRACER
from worker.base.tracing import Settled, ToolSpan, Tracer
from worker.engine.models.base import ToolCall
from worker.engine.recorder import Recorder
from worker.engine.tools.approval import ApprovalPolicy
from worker.engine.tools.calls import (
    DENIED,
    Attempt,
    Block,
    PreparedCall,
    Reconcile,
    Refuse,
    Run,
    ToolOutcome,
    decide,
    error_result,
    prepare,
)
from worker.engine.tools.context import Reconciliation, ToolContext, idempotency_key
from worker.engine.tools.durable import confirm_done, confirm_start
from worker.engine.tools.guard import DeferSignals, Interrupts
from worker.engine.tools.registry import Registry
from worker.engine.tools.results import MAX_RESULT_BYTES, stored_result
from worker.engine.tools.timers import WaitUntil

log = structlog.get_logger("dres.executor")


class ToolExecutor:
    def __init__(
        self,
        registry: Registry,
        recorder: Recorder,
        *,
        guard: Interrupts | None = None,
        interrupts: tuple[type[BaseException], ...] = (),
        redis: Any = None,
        failpoints: Failpoints = OFF,
        approval: ApprovalPolicy | None = None,
        max_result_bytes: int = MAX_RESULT_BYTES,
        tracer: Tracer = OFF_TRACER,
    ) -> None:
        self.registry = registry
        #: bytes of a result's JSON stored whole (DRES_MAX_RESULT_BYTES)
        self.max_result_bytes = max_result_bytes
        #: which calls wait for a person (None: none)
        self.approval = approval
        self.recorder = recorder
        if guard is None:
            guard = DeferSignals()
            guard.arm()
        self.guard = guard
        #: exceptions that end the run and must never become a tool error result
        self.interrupts = interrupts
        self.redis = redis
        self.failpoints = failpoints
        #: the process's traces: each call an ``execute_tool`` span (docs/tracing.md)
        self.tracer = tracer

    def execute(self, attempt: Attempt, call: ToolCall) -> ToolOutcome:
        """Decide what to do with ``call`` on this attempt, then record and do it."""
        with self.tracer.tool(call.name) as span:
            outcome = self._settled(span, self._execute(attempt, call), call.input)
        if outcome.request is not None:  # an event of the run, not of the call's span
            asked = {"dres.approval_id": outcome.request.approval_id, "gen_ai.tool.name": call.name}
            self.tracer.event("dres.approval.requested", asked)
        return outcome

    def _settled(self, span: ToolSpan, outcome: ToolOutcome, arguments: Any) -> ToolOutcome:
        spec = self.registry.get(outcome.tool)
        read_only = None if spec is None else spec.read_only
        span.settled(
            Settled(
                outcome.call_id,
                read_only,
                outcome.is_error,
                outcome.blocked_reason,
                arguments,
                outcome.result,
            )
        )
        return outcome

    def _execute(self, attempt: Attempt, call: ToolCall) -> ToolOutcome:
        call_id = self.recorder.ids.new("call")
        prepared = prepare(self.registry, call, call_id)
        if isinstance(prepared, str):
            return self._reject(call_id, call, prepared)
        decision = decide(prepared, attempt)
        if isinstance(decision, Block):
            if decision.consumes is not None:
                attempt.consumed.add(decision.consumes)
            return self._blocked(prepared, decision)
        if isinstance(decision, Refuse):
            return self._blocked(prepared, decision)
        if isinstance(decision, Reconcile):
            return self._reconcile(attempt, prepared, decision)
        if prepared.spec.client:
            return self._await_client(prepared)
        # A retry of an interrupted call (it supersedes one) was approved when it first ran.
        if not decision.supersedes and self._needs_approval(attempt, prepared):
            return self._ask(prepared)
        return self._run(attempt, prepared, decision)

    def _await_client(self, call: PreparedCall) -> ToolOutcome:
        """A client tool's call: its ``tool_start`` recorded (a write's, under the Stop flag),
        nothing run; the run ends waiting for the client's answer, which the API records as
        its ``tool_done`` (docs/semantics.md, waits)."""
        with self.guard:
            self._start(call, None)
        log.info("tool call waits for the client", tool=call.tool, call_id=call.call_id)
        return ToolOutcome(call.call_id, call.tool, None, False, awaited=True)

    # -- approvals (docs/semantics.md) ----------------------------------------------------------

    def _needs_approval(self, attempt: Attempt, call: PreparedCall) -> bool:
        if self.approval is None:
            return False
        return self.approval.needed(call.spec, call.data, self._context(attempt, call))

    def _ask(self, call: PreparedCall) -> ToolOutcome:
        """Record the call's approval request; nothing of it runs until a person decides."""
        request = self._request(call.call_id, call.tool, call.data, call.signature)
        log.info("tool call waits for approval", tool=call.tool, approval_id=request.approval_id)
        return ToolOutcome(request.call_id, call.tool, None, False, request=request)

    def ask_again(self, request: ApprovalRequested) -> ApprovalRequested:
        """A request that expired or was voided, asked again (a Continue): a new request for
        the same call, with a new id and a new expiry."""
        return self._request(request.call_id, request.tool, request.input, request.signature)

    def _request(self, call_id: str, tool: str, data: Any, signature: str) -> ApprovalRequested:
        ttl = (self.approval or ApprovalPolicy()).ttl_s
        return self.recorder.record(
            ApprovalRequested,
            approval_id=self.recorder.ids.new("apr"),
            call_id=call_id,
            tool=tool,
            input=data,
            signature=signature,
            expires_at=self.recorder.clock.now() + ttl,
        )

    def run_approved(self, attempt: Attempt, request: ApprovalRequested) -> ToolOutcome:
        """Run an approved call once, with exactly the approved input: its ``tool_start`` (under
        the call's id) names the approval, in one fenced append, so no other run uses it."""
        with self.tracer.tool(request.tool) as span:
            return self._settled(span, self._run_approved(attempt, request), request.input)

    def _run_approved(self, attempt: Attempt, request: ApprovalRequested) -> ToolOutcome:
        call = ToolCall(request.tool, request.input)
        prepared = prepare(self.registry, call, request.call_id)
        if isinstance(prepared, str) or prepared.signature != request.signature:
            why = prepared if isinstance(prepared, str) else "the tool's input schema changed"
            message = f"not run: the approved call no longer fits its tool ({why})"
            return self._reject(request.call_id, call, message, approval_id=request.approval_id)
        return self._run(attempt, prepared, Run(), approval_id=request.approval_id)

    def deny(self, request: ApprovalRequested, reason: str) -> ToolOutcome:
        """A call a person denied: recorded as blocked (``denied``) with the reason; not run."""
        with self.tracer.tool(request.tool) as span:
            return self._settled(span, self._deny(request, reason), request.input)

    def _deny(self, request: ApprovalRequested, reason: str) -> ToolOutcome:
        result = error_result(DENIED.format(reason=reason or "no reason given"))
        outcome = self._not_run(
            request.call_id,
            request.tool,
            request.input,
            request.signature,
            reason="denied",
            result=result,
            is_error=True,
        )
        metrics.tool_denied()
        log.info("tool call denied", tool=request.tool, approval_id=request.approval_id)
        return outcome

    # -- acting on a decision ----------------------------------------------------------------

    def _run(
        self,
        attempt: Attempt,
        call: PreparedCall,
        decision: Run,
        approval_id: str | None = None,
    ) -> ToolOutcome:
        ctx = self._context(attempt, call, decision.supersedes[0] if decision.supersedes else None)
        durable = self.recorder.durable is not None and not call.spec.read_only
        self.failpoints.hit("tool.before_start")
        with self.guard:
            self._start(call, approval_id)
            if durable:
                confirm_start(self.recorder, call.call_id, call.tool)
            try:
                result = call.spec.invoke(call.arguments, ctx)
                is_error = False
            except self.interrupts:
                raise
            except OutcomeUnknown as e:
                # Sent, never answered: no tool_done, so the call stays interrupted, and the
                # run ends as a transport error does (the loop resumes it under the guard).
                # (The sources' messages name the server or operation, never the input.)
                log.warning(
                    "tool outcome unknown; the call stays interrupted", tool=call.tool, error=str(e)
                )
                raise
            except Exception as e:  # a tool failure is recorded as an error result
                result, is_error = error_result(f"{type(e).__name__}: {e}"), True
            wake_at = None
            if isinstance(result, WaitUntil):  # the turn waits once the step's calls are done
                wake_at, result = result.wake_at, result.result
            result = stored_result(result, self.max_result_bytes)
            self.failpoints.hit("tool.after_effect")
            done = [
                self.recorder.make(
                    ToolDone,
                    call_id=call.call_id,
                    tool=call.tool,
                    result=result,
                    is_error=is_error,
                    wake_at=wake_at,
                )
            ]
            if not is_error:
                # Closes the interrupted starts this retry replaces: the journal then counts the
                # effect once, as the retry's.
                done += [
                    self.recorder.make(
                        ToolDone,
                        call_id=superseded.call_id,
                        tool=call.tool,
                        result={"superseded_by": call.call_id},
                        is_error=True,
                    )
                    for superseded in decision.supersedes
                ]
            self.recorder.record_many(done)
            metrics.tool_ran(is_error=is_error)
            if durable:
                confirm_done(self.recorder, call.call_id, call.tool)
        self.failpoints.hit("tool.after_done")
        if not is_error:
            attempt.completed[(call.tool, call.signature)] += 1
            attempt.settled.update(decision.settles)
        return ToolOutcome(call.call_id, call.tool, result, is_error, wake_at=wake_at)

    def _start(self, call: PreparedCall, approval_id: str | None) -> None:
        """Record the call's ``tool_start``; a write's only while Stop is not requested, in the
        same atomic step (docs/semantics.md): once a person's Stop or a new message that
        supersedes the turn is recorded, no write starts."""
        fields: dict[str, Any] = {
            "call_id": call.call_id,
            "tool": call.tool,
            "input": call.data,
            "signature": call.signature,
            "read_only": call.spec.read_only,
            "approval_id": approval_id,
        }
        if call.spec.read_only:
            self.recorder.record(ToolStart, **fields)
            return
        try:
            self.recorder.record_unless_stopped(ToolStart, **fields)
        except StopRequested as e:
            log.info("a write did not start: Stop was requested", tool=call.tool, code=e.code)
            raise TurnCancelled(e.code) from None

    def _reconcile(self, attempt: Attempt, call: PreparedCall, decision: Reconcile) -> ToolOutcome:
        """Settle an identical retry of an interrupted write by what the tool's hook finds."""
        entry = decision.entry
        verdict = self._ask_hook(attempt, call, decision)
        if verdict.outcome == "landed":
            result = stored_result(verdict.result, self.max_result_bytes)
            # The interrupted call completes with what the hook found, and this retry is
            # blocked against it: one record of one effect.
            with self.guard:
                self.recorder.record(ToolDone, call_id=entry.call_id, tool=call.tool, result=result)
                outcome = self._blocked(call, Block(entry, result, reason="reconciled"))
            attempt.settled.add(decision.settles)
            attempt.completed[(call.tool, call.signature)] += 1
            return outcome
        if verdict.outcome == "not_landed":
            self.recorder.record(
                ToolDone,
                call_id=entry.call_id,
                tool=call.tool,
                result=error_result("did not take effect (reconciled)"),
                is_error=True,
            )
            attempt.settled.add(decision.settles)
            return self._run(attempt, call, Run())
        return self._blocked(call, decision.otherwise)

    def _ask_hook(
        self, attempt: Attempt, call: PreparedCall, decision: Reconcile
    ) -> Reconciliation:
        """The hook's verdict; ``unknown`` when it fails or answers something else."""
        hook = call.spec.reconcile
        assert hook is not None  # decide reconciles only tools that declare a hook
        try:
            verdict = hook(dict(decision.entry.input or {}), self._context(attempt, call))
        except self.interrupts:
            raise
        except Exception as e:
            # the error's type only: its message may quote the call's input
            log.warning("reconcile failed; outcome unknown", tool=call.tool, error=type(e).__name__)
            return Reconciliation.unknown()
        if not isinstance(verdict, Reconciliation):
            log.warning(
                "reconcile returned no Reconciliation", tool=call.tool, got=type(verdict).__name__
            )
            return Reconciliation.unknown()
        return verdict

    def _context(
        self, attempt: Attempt, call: PreparedCall, retried: JournalEntry | None = None
    ) -> ToolContext:
        """The call's context. ``retried``: the interrupted call an idempotent retry repeats:
        one a fork inherited keeps its own turn's key (an approximation when that turn was a
        fork that had completed the same call too: then its occurrence counts those alone)."""
        run = self.recorder.run
        key_turn = run.turn_id
        occurrence = attempt.completed[(call.tool, call.signature)]
        if retried is not None and retried.turn_id not in ("", run.turn_id):
            key_turn = retried.turn_id
            done = attempt.journal.completed if attempt.journal else []
            occurrence = sum(
                1
                for e in done
                if (e.turn_id, e.tool, e.signature) == (key_turn, call.tool, call.signature)
            )
        return ToolContext(
            turn_id=run.turn_id,
            run_id=run.run_id,
            call_id=call.call_id,
            idempotency_key=idempotency_key(key_turn, call.tool, call.signature, occurrence),
            tool=call.tool,
            redis=self.redis,
            interruptible=self.guard.lifted,
        )

    # -- recording a call that does not run --------------------------------------------------

    def _reject(
        self, call_id: str, call: ToolCall, message: str, approval_id: str | None = None
    ) -> ToolOutcome:
        """An unknown tool or invalid input: recorded as a call that failed, so the model can
        read the error and correct it."""
        try:
            sig = input_signature(call.input)
        except SignatureError:
            sig = ""
        result = error_result(message)
        with self.guard:
            start = self.recorder.make(
                ToolStart,
                call_id=call_id,
                tool=call.name,
                input=to_jsonable_python(call.input, fallback=repr),
                signature=sig,
                approval_id=approval_id,
            )
            done = self.recorder.make(
                ToolDone, call_id=call_id, tool=call.name, result=result, is_error=True
            )
            self.recorder.record_many([start, done])
            metrics.tool_ran(is_error=True)
        return ToolOutcome(call_id, call.name, result, True)

    def _blocked(self, call: PreparedCall, decision: Block | Refuse) -> ToolOutcome:
        matched = decision.entry.call_id
        origin = decision.entry.turn_id
        outcome = self._not_run(
            call.call_id,
            call.tool,
            call.data,
            call.signature,
            reason=decision.reason,
            result=decision.result,
            is_error=isinstance(decision, Refuse),
            matched_call_id=matched,
            inherited_from=origin if origin not in ("", self.recorder.run.turn_id) else None,
        )
        metrics.tool_blocked(decision.reason)
        log.info("tool call blocked", tool=call.tool, reason=decision.reason, matched=matched)
        return outcome

    def _not_run(
        self,
        call_id: str,
        tool: str,
        data: Any,
        signature: str,
        *,
        reason: str,
        result: Any,
        is_error: bool,
        matched_call_id: str | None = None,
        inherited_from: str | None = None,
    ) -> ToolOutcome:
        """Record a call that does not run (blocked, refused, denied) and its outcome."""
        self.recorder.record(
            ToolBlocked,
            call_id=call_id,
            tool=tool,
            input=data,
            signature=signature,
            reason=reason,
            matched_call_id=matched_call_id,
            inherited_from=inherited_from,
            result=result,
            is_error=is_error,
        )
        return ToolOutcome(call_id, tool, result, is_error, blocked=True, blocked_reason=reason)
