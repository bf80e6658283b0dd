"""The tool executor: records every call, and on a resumed attempt applies layer 2.

For each call the model makes, in order:
1. an unknown tool or invalid input gets an error result naming what is wrong; nothing runs;
2. on a resumed attempt, a write is checked against the journal snapshot taken when the attempt
   began (CONTRACT §7.4, §7.5): an exact repeat of a completed call is not run and gets the
   journaled result (each completed entry claimed once); a reworded repeat of a completed call
   with ``identity`` fields is refused; an identical retry of an interrupted call is settled by the
   tool's ``reconcile`` hook, retried with the same idempotency key when the tool is
   ``idempotent``, and refused otherwise;
3. otherwise the call runs between its ``tool_start`` and ``tool_done``, both recorded inside
   ``DeferSignals`` so a soft time limit never lands between the side effect and its record.
Read-only tools are never blocked.
"""

from __future__ import annotations

from typing import Any

import structlog
from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python

from ledger.errors import SignatureError
from ledger.events import ToolBlocked, ToolDone, ToolStart
from ledger.journal import Journal, JournalEntry
from ledger.signature import input_signature
from worker.base.failpoints import OFF, Failpoints
from worker.engine.models.base import ToolCall
from worker.engine.recorder import Recorder
from worker.engine.tools.calls import (
    ALREADY_COMPLETED,
    INTERRUPTED_REFUSAL,
    REWORDED_REFUSAL,
    Attempt,
    ToolOutcome,
    error_result,
)
from worker.engine.tools.context import Reconciliation, ToolContext, idempotency_key
from worker.engine.tools.guard import DeferSignals
from worker.engine.tools.registry import Registry, ToolSpec

log = structlog.get_logger("dres.executor")


class ToolExecutor:
    def __init__(
        self,
        registry: Registry,
        recorder: Recorder,
        *,
        guard: DeferSignals | None = None,
        interrupts: tuple[type[BaseException], ...] = (),
        redis: Any = None,
        failpoints: Failpoints = OFF,
    ) -> None:
        self.registry = registry
        self.recorder = recorder
        if guard is None:
            guard = DeferSignals()
            guard.arm()
        self.guard = guard
        #: exceptions that end the run and must never become a tool error result
        self.interrupts = interrupts
        self.redis = redis
        self.failpoints = failpoints

    def execute(self, attempt: Attempt, call: ToolCall) -> ToolOutcome:
        call_id = self.recorder.ids.new("call")
        spec = self.registry.get(call.name)
        if spec is None:
            known = ", ".join(self.registry.names())
            return self._reject(call_id, call, f"unknown tool {call.name!r}; known tools: {known}")
        try:
            arguments = spec.input_model.model_validate(call.input)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "input"
            return self._reject(
                call_id, call, f"invalid input for {spec.name}: {where}: {first['msg']}"
            )
        data = arguments.model_dump(mode="json")
        signature = input_signature(data)
        supersedes: int | None = None
        if not spec.read_only and attempt.journal is not None:
            verdict = self._layer2(attempt, attempt.journal, spec, call_id, data, signature)
            if isinstance(verdict, ToolOutcome):
                return verdict
            supersedes = verdict
        return self._run(attempt, spec, call_id, data, signature, arguments, supersedes)

    # -- layer 2 -----------------------------------------------------------------------------

    def _layer2(
        self, attempt: Attempt, journal: Journal, spec: ToolSpec, call_id: str, data: Any, sig: str
    ) -> ToolOutcome | int | None:
        """A blocked call's outcome; or, to run the call, the interrupted entry it supersedes."""
        for i, entry in enumerate(journal.completed):
            if i not in attempt.consumed and entry.tool == spec.name and entry.signature == sig:
                attempt.consumed.add(i)
                result = {
                    "status": "already_completed",
                    "note": ALREADY_COMPLETED,
                    "result": entry.result,
                }
                return self._blocked(call_id, spec, data, sig, "completed", entry, result, False)
        index = self._interrupted_index(attempt, journal, spec.name, sig)
        if index is not None:
            return self._interrupted(
                attempt, index, journal.interrupted[index], spec, call_id, data, sig
            )
        return self._reworded(attempt, journal, spec, call_id, data, sig)

    @staticmethod
    def _interrupted_index(attempt: Attempt, journal: Journal, tool: str, sig: str) -> int | None:
        for i, entry in enumerate(journal.interrupted):
            if i not in attempt.settled and entry.tool == tool and entry.signature == sig:
                return i
        return None

    def _reworded(
        self, attempt: Attempt, journal: Journal, spec: ToolSpec, call_id: str, data: Any, sig: str
    ) -> ToolOutcome | None:
        if not spec.identity:
            return None
        wanted = _identity(spec, data)
        for entry in journal.completed:
            if (
                entry.tool == spec.name
                and entry.signature != sig
                and _identity(spec, entry.input) == wanted
            ):
                message = REWORDED_REFUSAL.format(
                    tool=spec.name, fields=" and ".join(spec.identity)
                )
                completed = {"input": entry.input, "result": entry.result}
                result = error_result(message, completed_call=completed)
                return self._blocked(call_id, spec, data, sig, "identity", entry, result, True)
        for i, entry in enumerate(journal.interrupted):
            if (
                i not in attempt.settled
                and entry.tool == spec.name
                and _identity(spec, entry.input) == wanted
            ):
                return self._refuse_interrupted(spec, call_id, data, sig, entry)
        return None

    def _interrupted(
        self,
        attempt: Attempt,
        index: int,
        entry: JournalEntry,
        spec: ToolSpec,
        call_id: str,
        data: Any,
        sig: str,
    ) -> ToolOutcome | int | None:
        """Settle an identical retry of an interrupted write.

        Returns the outcome when the call is not run; the entry's index when the call runs and
        supersedes it (an idempotent retry); None when it runs fresh (reconciled: not landed).
        """
        if spec.reconcile is not None:
            verdict = self._reconcile(attempt, spec, entry, call_id)
            if verdict.outcome == "landed":
                result = to_jsonable_python(verdict.result, fallback=repr)
                with self.guard:
                    self.recorder.record(
                        ToolDone, call_id=entry.call_id, tool=spec.name, result=result
                    )
                    outcome = self._blocked(
                        call_id, spec, data, sig, "reconciled", entry, result, False
                    )
                attempt.settled.add(index)
                attempt.completed[(spec.name, sig)] += 1
                return outcome
            if verdict.outcome == "not_landed":
                self.recorder.record(
                    ToolDone,
                    call_id=entry.call_id,
                    tool=spec.name,
                    result=error_result("did not take effect (reconciled)"),
                    is_error=True,
                )
                attempt.settled.add(index)
                return None
        elif spec.idempotent:
            return index
        return self._refuse_interrupted(spec, call_id, data, sig, entry)

    def _refuse_interrupted(
        self, spec: ToolSpec, call_id: str, data: Any, sig: str, entry: JournalEntry
    ) -> ToolOutcome:
        reads = ", ".join(self.registry.read_only_names()) or "none registered"
        message = INTERRUPTED_REFUSAL.format(tool=spec.name, reads=reads)
        result = error_result(message, interrupted_call={"input": entry.input})
        return self._blocked(call_id, spec, data, sig, "interrupted", entry, result, True)

    def _reconcile(
        self, attempt: Attempt, spec: ToolSpec, entry: JournalEntry, call_id: str
    ) -> Reconciliation:
        assert spec.reconcile is not None
        ctx = self._context(attempt, spec, call_id, entry.signature)
        try:
            verdict = spec.reconcile(dict(entry.input or {}), ctx)
        except self.interrupts:
            raise
        except Exception as e:
            log.warning("reconcile failed; outcome unknown", tool=spec.name, error=repr(e))
            return Reconciliation.unknown()
        if not isinstance(verdict, Reconciliation):
            log.warning("reconcile returned no Reconciliation", tool=spec.name, got=repr(verdict))
            return Reconciliation.unknown()
        return verdict

    # -- recording ---------------------------------------------------------------------------

    def _context(self, attempt: Attempt, spec: ToolSpec, call_id: str, sig: str) -> ToolContext:
        run = self.recorder.run
        occurrence = attempt.completed[(spec.name, sig)]
        return ToolContext(
            turn_id=run.turn_id,
            run_id=run.run_id,
            call_id=call_id,
            idempotency_key=idempotency_key(run.turn_id, spec.name, sig, occurrence),
            tool=spec.name,
            redis=self.redis,
        )

    def _run(
        self,
        attempt: Attempt,
        spec: ToolSpec,
        call_id: str,
        data: Any,
        sig: str,
        arguments: BaseModel,
        supersedes: int | None = None,
    ) -> ToolOutcome:
        ctx = self._context(attempt, spec, call_id, sig)
        self.failpoints.hit("tool.before_start")
        with self.guard:
            self.recorder.record(
                ToolStart,
                call_id=call_id,
                tool=spec.name,
                input=data,
                signature=sig,
                read_only=spec.read_only,
            )
            try:
                result = to_jsonable_python(spec.invoke(arguments, ctx), fallback=repr)
                is_error = False
            except self.interrupts:
                raise
            except Exception as e:  # a tool failure is recorded as an error result
                result, is_error = error_result(f"{type(e).__name__}: {e}"), True
            self.failpoints.hit("tool.after_effect")
            done = [
                self.recorder.make(
                    ToolDone, call_id=call_id, tool=spec.name, result=result, is_error=is_error
                )
            ]
            if supersedes is not None and not is_error and attempt.journal is not None:
                old = attempt.journal.interrupted[supersedes]
                done.append(
                    self.recorder.make(
                        ToolDone,
                        call_id=old.call_id,
                        tool=spec.name,
                        result={"superseded_by": call_id},
                        is_error=True,
                    )
                )
            self.recorder.record_many(done)
        self.failpoints.hit("tool.after_done")
        if not is_error:
            attempt.completed[(spec.name, sig)] += 1
            if supersedes is not None:
                attempt.settled.add(supersedes)
        return ToolOutcome(call_id, spec.name, result, is_error)

    def _reject(self, call_id: str, call: ToolCall, message: str) -> ToolOutcome:
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
            )
            done = self.recorder.make(
                ToolDone, call_id=call_id, tool=call.name, result=result, is_error=True
            )
            self.recorder.record_many([start, done])
        return ToolOutcome(call_id, call.name, result, True)

    def _blocked(
        self,
        call_id: str,
        spec: ToolSpec,
        data: Any,
        sig: str,
        reason: str,
        entry: JournalEntry,
        result: Any,
        is_error: bool,
    ) -> ToolOutcome:
        self.recorder.record(
            ToolBlocked,
            call_id=call_id,
            tool=spec.name,
            input=data,
            signature=sig,
            reason=reason,
            matched_call_id=entry.call_id,
            result=result,
            is_error=is_error,
        )
        log.info("tool call blocked", tool=spec.name, reason=reason, matched=entry.call_id)
        return ToolOutcome(call_id, spec.name, result, is_error, blocked=True)


def _identity(spec: ToolSpec, data: Any) -> tuple[Any, ...]:
    source = data if isinstance(data, dict) else {}
    return tuple(input_signature(source.get(name)) for name in spec.identity)
