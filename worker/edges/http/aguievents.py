"""A turn's ledger events as AG-UI events (docs/chat.md): a pure fold, one ``AguiEvents`` per
run of the protocol (one request), as ``worker.edges.http.uichunks`` is for the AI SDK.

A model call's text is one assistant text message (its id: the first text event's id); a tool
call is announced once (``TOOL_CALL_START``/``ARGS``/``END``, the input as JSON) and answered by
``TOOL_CALL_RESULT``. The run finishes when the turn ends, or when a run of the turn ends waiting
for approval and the turn still waits: then with the ``interrupt`` outcome, one interrupt per
request (a replay of a turn decided since goes on through its wait, as the AI SDK's does).

Each model call is a step, ``STEP_STARTED``/``STEP_FINISHED`` named ``model_call_<n>`` (``n`` from
1: the turn's ``n``-th model call, the same name in every stream of the turn); a call cut by its
run's end finishes with the run, and its next attempt starts the same name again. ``RUN_FINISHED``
carries ``result`` ``{turn_id, status, usage}``: the turn's status there and its spend so far, in
the shape ``GET /v1/turns/{id}`` gives it (``input_tokens``, ``output_tokens``). ``RUN_ERROR``'s
``message`` names the stop's code and whether Continue is available; ``code`` is the code.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from ledger.event_models import (
    ApprovalRequested,
    Event,
    ModelDone,
    ModelStart,
    RunEnded,
    RunStarted,
    Text,
    ToolBlocked,
    ToolDone,
    ToolStart,
    TurnEnded,
)
from ledger.usage import UsageFold
from worker.edges.http.uichunks import Fold, stop_text

Message = dict[str, Any]

#: an interrupt's ``reason``: a tool call waits for a person's approval
APPROVAL_REASON = "tool_approval"
#: a model call's step name, ``n`` counted from 1 (``ModelStart.step`` counts the calls before it)
STEP_NAME = "model_call_{n}"


def as_content(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def interrupt(request: ApprovalRequested) -> Message:
    """An approval request as the interrupt a run that ends waiting on it lists."""
    return {
        "id": request.approval_id,
        "reason": APPROVAL_REASON,
        "message": f"{request.tool} waits for approval",
        "toolCallId": request.call_id,
        "expiresAt": iso(request.expires_at),
        "metadata": {"tool": request.tool, "input": request.input, "signature": request.signature},
    }


class AguiEvents(Fold):
    """The AG-UI events of one run (thread ``thread_id``, run ``run_id``) over a turn's events;
    ``done`` once the run has finished or failed."""

    def __init__(
        self,
        thread_id: str,
        run_id: str,
        *,
        turn_id: str,
        announced: Iterable[str] = (),
        answered: Iterable[str] = (),
        spent: UsageFold | None = None,
        waited_run: str | None = None,
        asking: Iterable[ApprovalRequested] = (),
    ) -> None:
        super().__init__(announced, spent, waited_run)
        #: calls whose output this run's input carried (the client has them): no result sent
        self.answered = set(answered)
        self.thread_id, self.run_id, self.turn_id = thread_id, run_id, turn_id
        #: the name of the model call's step open, if one is
        self.step: str | None = None
        #: the approval requests of the turn's current run (its interrupts if it ends waiting):
        #: a run that begins at a wait starts with those still ``asking``
        self.interrupts: list[Message] = [interrupt(request) for request in asking]

    def opening(self) -> list[Message]:
        return [{"type": "RUN_STARTED", "threadId": self.thread_id, "runId": self.run_id}]

    def map(self, event: Event) -> list[Message]:  # noqa: C901 (one branch per event type)
        if self.done:
            return []
        self.count(event)
        out: list[Message] = []
        if isinstance(event, Text):
            if self.text_id is None:
                self.text_id = event.event_id
                out.append(
                    {"type": "TEXT_MESSAGE_START", "messageId": self.text_id, "role": "assistant"}
                )
            out.append(
                {"type": "TEXT_MESSAGE_CONTENT", "messageId": self.text_id, "delta": event.text}
            )
        elif isinstance(event, ModelStart):
            # a step still open was a call cut short, made again now (its run went on)
            out += self._end_text() + self._end_step()
            self.step = STEP_NAME.format(n=event.step + 1)
            out.append({"type": "STEP_STARTED", "stepName": self.step})
        elif isinstance(event, ModelDone):
            out += self._end_text() + self._end_step()
        elif isinstance(event, RunStarted):
            self.interrupts = []
        elif isinstance(event, ApprovalRequested):
            out += self._end_text() + self._announce(event.call_id, event.tool, event.input)
            self.interrupts.append(interrupt(event))
        elif isinstance(event, ToolStart):
            out += self._end_text()
            if event.approval_id is None:  # an approved call was announced with its request
                out += self._announce(event.call_id or event.event_id, event.tool, event.input)
        elif isinstance(event, ToolDone):
            out += self._end_text()
            if event.call_id not in self.answered:
                out += self._result(event.event_id, event.call_id or "", event.result)
        elif isinstance(event, ToolBlocked):
            call_id = event.call_id or event.event_id
            out += self._end_text() + self._announce(call_id, event.tool, event.input)
            out += self._result(event.event_id, call_id, event.result)
        elif isinstance(event, RunEnded):
            out += self._end_text() + self._end_step()
        elif isinstance(event, TurnEnded):
            out += self._end_text() + self._end_step()
            out.append(self._ending(event))
            self.done = True
        return out

    def finish_waiting(self) -> list[Message]:
        """The end of a run whose turn waits (``paused`` on it): its interrupts, or, waiting on
        the client's tools alone, a run finished whose calls the client answers."""
        self.done = True
        if not self.interrupts:
            return [self._finished({"type": "success"}, "waiting")]
        outcome = {"type": "interrupt", "interrupts": self.interrupts}
        return [self._finished(outcome, "waiting")]

    def result(self, status: str) -> Message:
        """``RUN_FINISHED``'s ``result``: the turn, its status there and its spend so far."""
        return {"turn_id": self.turn_id, "status": status, "usage": self.usage.spent().model_dump()}

    def _announce(self, call_id: str, tool: str, value: Any) -> list[Message]:
        if not self.first_sight(call_id):
            return []
        return [
            {"type": "TOOL_CALL_START", "toolCallId": call_id, "toolCallName": tool},
            {"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": json.dumps(value or {})},
            {"type": "TOOL_CALL_END", "toolCallId": call_id},
        ]

    def _result(self, message_id: str, call_id: str, result: Any) -> list[Message]:
        return [
            {
                "type": "TOOL_CALL_RESULT",
                "messageId": message_id,
                "toolCallId": call_id,
                "content": as_content(result),
                "role": "tool",
            }
        ]

    def _finished(self, outcome: Message, status: str) -> Message:
        return {
            "type": "RUN_FINISHED",
            "threadId": self.thread_id,
            "runId": self.run_id,
            "outcome": outcome,
            "result": self.result(status),
        }

    def _ending(self, event: TurnEnded) -> Message:
        if event.status == "completed":
            return self._finished({"type": "success"}, event.status)
        return {"type": "RUN_ERROR", "message": stop_text(event), "code": event.code}

    def _end_step(self) -> list[Message]:
        step, self.step = self.step, None
        return [] if step is None else [{"type": "STEP_FINISHED", "stepName": step}]

    def _end_text(self) -> list[Message]:
        text_id = self.close_text()
        return [] if text_id is None else [{"type": "TEXT_MESSAGE_END", "messageId": text_id}]
