"""A turn's ledger events as the AI SDK's UI message chunks (docs/chat.md): a pure fold, one
``UIChunks`` per stream, so every stream of a turn, first or reconnected, says the same.

The stream is one assistant message whose id is the turn id. A model call is a step (opened by
its ``model_start``, closed by the next one or by the run's end), its text one text part (ended
by ``model_done``). A call cut by its run's end is made again by the next run, so its step is
reset (``reset-step``: the client drops the cut text) rather than followed by another. A tool call
is one tool part, announced once (``tool-input-available``) and then answered
(``tool-output-available`` / ``-error`` / ``-denied``); a decision on an approval request this
stream showed is its ``tool-approval-response``, so a replay folds into the part the client's own
answer makes. A run that ends waiting closes the message if the turn still waits: the client
answers the approval (or the client tool's call) with a new request (a replay of a turn that has
been decided since goes on through its wait).

Wherever the message closes, ``message-metadata`` comes first: the turn's id, its status there and
its usage, the sum of every ``model_done`` of the turn so far (those before the stream's start
included: a stream that resumes after an approval starts mid-turn). ``finish`` carries the same
metadata and a ``finishReason``: ``stop`` (completed), ``tool-calls`` (the turn waits), ``error``
(stopped). A stop is ``error`` (a person's Stop: ``abort``), its text naming the stop's code and
whether Continue is available.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ledger.event_models import (
    ApprovalDecided,
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
from ledger.events import parse_event
from ledger.usage import UsageFold

Chunk = dict[str, Any]

#: the stop code of a person's Stop: the protocol's ``abort``, every other stop its ``error``
CANCELLED = "cancelled"
#: ``finish``'s ``finishReason`` at each end of the message: a turn that waits waits on tool calls
FINISH_REASONS = {"completed": "stop", "waiting": "tool-calls", "stopped": "error"}


def stop_text(event: TurnEnded) -> str:
    """A stop as a person reads it (both protocols): its code and detail, and whether Continue is
    available (``can_continue`` of its ``turn_ended``)."""
    detail = f"{event.code}: {event.detail}" if event.detail else event.code
    can = "Continue is available" if event.can_continue else "Continue is not available"
    return f"the turn stopped ({detail}); {can}"


def events_of(message: bytes) -> list[Event]:
    """The events of SSE messages as ``worker.edges.http.sse`` writes them (a keepalive holds
    none)."""
    found: list[Event] = []
    for block in message.split(b"\n\n"):
        for line in block.split(b"\n"):
            if line.startswith(b"data: "):
                found.append(parse_event(json.loads(line[6:])))
    return found


def sse_data(chunks: Iterable[Chunk]) -> bytes:
    return b"".join(f"data: {json.dumps(c, separators=(',', ':'))}\n\n".encode() for c in chunks)


#: the protocol's end of a stream
DONE = b"data: [DONE]\n\n"


class Fold:
    """What a fold of a turn's events into a protocol keeps, whichever the protocol: the text
    message open, the calls announced, the wait it is at, and whether the stream has said all."""

    def __init__(
        self,
        announced: Iterable[str],
        spent: UsageFold | None = None,
        waited_run: str | None = None,
    ) -> None:
        #: calls the client has already (a resumed stream's approved calls)
        self.announced = set(announced)
        self.text_id: str | None = None
        self.done = False
        #: the turn's spend so far: ``spent`` before the stream's start, and every model call since
        self.usage = UsageFold() if spent is None else spent.copy()
        #: the run that ended waiting, until the turn's next run starts (answers and decisions
        #: in between leave it): the stream ends there if the turn still waits on that run's end
        #: (``finish_waiting``), and goes on if it was answered since (a replay)
        self.waited_run = waited_run

    @property
    def paused(self) -> bool:
        return self.waited_run is not None

    def count(self, event: Event) -> None:
        """An event of the stream, counted in the turn's spend when it is a model call's end,
        and the wait it ends or begins."""
        self.usage.feed((event,))
        if isinstance(event, RunStarted):
            self.waited_run = None  # whatever follows is the resumed turn
        elif isinstance(event, RunEnded):
            self.waited_run = event.run_id if event.reason == "waiting" else None

    def first_sight(self, call_id: str) -> bool:
        """True the first time a call is met: it is announced then, never again."""
        if call_id in self.announced:
            return False
        self.announced.add(call_id)
        return True

    def close_text(self) -> str | None:
        """The id of the text message open (now closed), if one was."""
        text_id, self.text_id = self.text_id, None
        return text_id


class UIChunks(Fold):
    """The chunks of one stream of a turn; ``done`` once the stream has nothing more to say."""

    def __init__(
        self,
        turn_id: str,
        *,
        announced: Iterable[str] = (),
        spent: UsageFold | None = None,
        waited_run: str | None = None,
    ) -> None:
        super().__init__(announced, spent, waited_run)
        self.turn_id = turn_id
        self.step_open = False
        #: a model call of the open step has begun and not ended
        self.calling = False
        #: the approval requests this stream showed and not yet their decisions: id -> call id
        self.asked: dict[str, str] = {}

    def opening(self) -> list[Chunk]:
        return [{"type": "start", "messageId": self.turn_id}]

    def map(self, event: Event) -> list[Chunk]:  # noqa: C901 (one branch per event type)
        if self.done:
            return []
        self.count(event)
        out: list[Chunk] = []
        if isinstance(event, ModelStart):
            out += self._end_text()
            if self.step_open and self.calling:
                # the call before was cut by its run's end and is made again: its text goes
                out.append({"type": "reset-step"})
            else:
                out += self._end_step()
                out.append({"type": "start-step"})
            self.step_open = self.calling = True
        elif isinstance(event, Text):
            if self.text_id is None:
                self.text_id = event.event_id
                out.append({"type": "text-start", "id": self.text_id})
            out.append({"type": "text-delta", "id": self.text_id, "delta": event.text})
        elif isinstance(event, ModelDone):
            out += self._end_text()
            self.calling = False
        elif isinstance(event, ApprovalRequested):
            out += self._end_text()
            out += self._announce(event.call_id, event.tool, event.input)
            out.append(
                {
                    "type": "tool-approval-request",
                    "approvalId": event.approval_id,
                    "toolCallId": event.call_id,
                }
            )
            self.asked[event.approval_id] = event.call_id
        elif isinstance(event, ApprovalDecided):
            out += self._decided(event)
        elif isinstance(event, ToolStart):
            out += self._end_text()
            if event.approval_id is None:  # an approved call was announced with its request
                out += self._announce(event.call_id or event.event_id, event.tool, event.input)
        elif isinstance(event, ToolDone):
            out += self._output(event.call_id or "", event.result, event.is_error)
        elif isinstance(event, ToolBlocked):
            out += self._blocked(event)
        elif isinstance(event, RunEnded):
            out += self._end_text()
        elif isinstance(event, TurnEnded):
            out += self._end_text() + self._end_step() + self._ending(event)
            self.done = True
        return out

    def go_on(self) -> None:
        """The turn was continued after its ``turn_ended`` (docs/events.md): a fold of its whole
        ledger goes on with the new run, keeping the calls and requests it has shown."""
        self.done = False

    def finish_waiting(self) -> list[Chunk]:
        """The end of a stream whose turn waits (``paused`` on it): the client answers."""
        self.done = True
        return [*self._end_step(), *self._finish("waiting")]

    def metadata(self, status: str) -> dict[str, Any]:
        """The message's metadata at its end: the turn, its status there and its spend so far."""
        spent = self.usage
        return {
            "turnId": self.turn_id,
            "status": status,
            "usage": {
                "inputTokens": spent.input_tokens,
                "outputTokens": spent.output_tokens,
                "totalTokens": spent.input_tokens + spent.output_tokens,
            },
        }

    def _announce(self, call_id: str, tool: str, value: Any) -> list[Chunk]:
        if not self.first_sight(call_id):
            return []
        return [
            {
                "type": "tool-input-available",
                "toolCallId": call_id,
                "toolName": tool,
                "input": value,
            }
        ]

    def _decided(self, event: ApprovalDecided) -> list[Chunk]:
        """A decision on a request this stream showed (on another, the client shows its own
        answer). A request that expired or was voided (Stop, a new message) runs nothing: its
        call is denied on it (a Continue asks again, a new request for the same call)."""
        call_id = self.asked.pop(event.approval_id, None)
        if call_id is None:
            return []
        response: Chunk = {
            "type": "tool-approval-response",
            "approvalId": event.approval_id,
            "approved": event.decision == "approve",
        }
        if event.decision in ("approve", "deny"):
            return [response | ({"reason": event.reason} if event.reason else {})]
        response["reason"] = event.reason or event.decision
        return [response, {"type": "tool-output-denied", "toolCallId": call_id}]

    def _output(self, call_id: str, result: Any, is_error: bool) -> list[Chunk]:
        if is_error:
            error = result if isinstance(result, str) else json.dumps(result)
            return [{"type": "tool-output-error", "toolCallId": call_id, "errorText": error}]
        return [{"type": "tool-output-available", "toolCallId": call_id, "output": result}]

    def _blocked(self, event: ToolBlocked) -> list[Chunk]:
        """A call not run: denied by a person, or answered from the journal (its result)."""
        call_id = event.call_id or event.event_id
        out = self._end_text() + self._announce(call_id, event.tool, event.input)
        if event.reason == "denied":
            return [*out, {"type": "tool-output-denied", "toolCallId": call_id}]
        return out + self._output(call_id, event.result, event.is_error)

    def _ending(self, event: TurnEnded) -> list[Chunk]:
        if event.status == "completed":
            return self._finish(event.status)
        if event.code == CANCELLED:
            # as the AI SDK's own stream ends when it is aborted: no ``finish`` follows
            told = {"type": "message-metadata", "messageMetadata": self.metadata(event.status)}
            return [told, {"type": "abort", "reason": stop_text(event)}]
        # the metadata before the error: ``useChat`` stops reading a stream at its ``error``
        told, finish = self._finish(event.status)
        return [told, {"type": "error", "errorText": stop_text(event)}, finish]

    def _finish(self, status: str) -> list[Chunk]:
        """``message-metadata`` and ``finish`` with the same metadata, at a message's end."""
        metadata = self.metadata(status)
        return [
            {"type": "message-metadata", "messageMetadata": metadata},
            {"type": "finish", "finishReason": FINISH_REASONS[status], "messageMetadata": metadata},
        ]

    def _end_text(self) -> list[Chunk]:
        text_id = self.close_text()
        return [] if text_id is None else [{"type": "text-end", "id": text_id}]

    def _end_step(self) -> list[Chunk]:
        if not self.step_open:
            return []
        self.step_open = False
        return [{"type": "finish-step"}]
