"""A conversation as the AI SDK's ``UIMessage`` list (``GET /v1/chat/{id}/messages``,
docs/chat.md): a pure fold, for ``useChat``'s initial messages.

A turn's answer is what its stream builds: its events become UI message chunks through
``uichunks.UIChunks`` (the one mapping of an event to the protocol), and the chunks become the
message's parts here, as the AI SDK's ``readUIMessageStream`` folds them
(``processUIMessageStream`` in the ``ai`` package): a text part per ``text-start``, a
``step-start`` part per ``start-step``, one tool part per call, moved to its last state by the
chunks that answer it; ``reset-step`` drops the parts of the step it ends. So a page that loads
the history and one that watched the stream hold the same message, and a call with no output yet
(a client tool's, a call still running) is ``input-available`` with nothing more to say.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ledger.event_models import Event, RunStarted
from worker.edges.http.uichunks import Chunk, UIChunks

Part = dict[str, Any]
UIMessage = dict[str, Any]


@dataclass(frozen=True)
class TurnRecord:
    """A turn as the history shows it: its user message and its events."""

    turn_id: str
    #: the client's id of the user message (a turn from before ids were kept has none)
    message_id: str
    message: str
    events: Sequence[Event]
    #: the fork that replaced the turn ("" if none): a replaced turn is no part of the history
    replaced_by: str = ""
    #: the turn waits now (for a person or a client): its stream ends there
    waiting: bool = False


def conversation_messages(turns: Iterable[TurnRecord]) -> list[UIMessage]:
    """The turns no fork replaced, oldest first, each as its user message and its answer."""
    messages: list[UIMessage] = []
    for turn in turns:
        if turn.replaced_by:
            continue
        messages.append(user_message(turn.message_id or f"{turn.turn_id}:message", turn.message))
        messages.append(turn_message(turn.turn_id, turn.events, waiting=turn.waiting))
    return messages


def user_message(message_id: str, text: str) -> UIMessage:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


def turn_message(turn_id: str, events: Iterable[Event], *, waiting: bool = False) -> UIMessage:
    """The turn's answer so far: one assistant message whose id is the turn id."""
    return fold_chunks(turn_id, turn_chunks(turn_id, events, waiting=waiting))


def turn_chunks(turn_id: str, events: Iterable[Event], *, waiting: bool = False) -> list[Chunk]:
    """Every chunk of the turn's stream, through a continued turn's later runs too; a turn that
    waits ends as its stream does there (``message-metadata``, ``finish``: status ``waiting``)."""
    chunks = UIChunks(turn_id)
    out = chunks.opening()
    for event in events:
        if chunks.done and isinstance(event, RunStarted):
            chunks.go_on()
        out += chunks.map(event)
    if waiting and not chunks.done:
        out += chunks.finish_waiting()
    return out


def fold_chunks(message_id: str, chunks: Iterable[Chunk]) -> UIMessage:
    message = MessageFold(message_id)
    for chunk in chunks:
        message.add(chunk)
    return message.message()


class MessageFold:
    """One assistant message built from its chunks, as ``readUIMessageStream`` builds it."""

    def __init__(self, message_id: str) -> None:
        self.id = message_id
        self.parts: list[Part] = []
        self.metadata: dict[str, Any] | None = None
        #: the text parts open, by their chunks' id
        self.texts: dict[str, Part] = {}

    def message(self) -> UIMessage:
        found: UIMessage = {"id": self.id, "role": "assistant", "parts": self.parts}
        if self.metadata is not None:
            found["metadata"] = self.metadata
        return found

    def add(self, chunk: Chunk) -> None:
        kind = chunk.get("type")
        if kind in ("start", "finish", "message-metadata"):
            if kind == "start" and chunk.get("messageId"):
                self.id = chunk["messageId"]
            self._metadata(chunk.get("messageMetadata"))
        elif kind == "start-step":
            self.parts.append({"type": "step-start"})
        elif kind == "reset-step":
            # the step's model call was cut and is made again: what it said goes
            del self.parts[len(self.parts) - len(self._step()) :]
            self.texts = {}
        elif kind == "text-start":
            part: Part = {"type": "text", "text": "", "state": "streaming"}
            self.texts[chunk["id"]] = part
            self.parts.append(part)
        elif kind == "text-delta" and chunk["id"] in self.texts:
            self.texts[chunk["id"]]["text"] += chunk["delta"]
        elif kind == "text-end" and chunk["id"] in self.texts:
            self.texts.pop(chunk["id"])["state"] = "done"
        elif kind == "tool-input-available":
            self._input(chunk)
        elif kind in ANSWERS:
            self._answer(chunk)
        # any other chunk (``finish-step``, ``error``, ``abort``: the stream's frame and how it
        # ended) changes no part

    def _input(self, chunk: Chunk) -> None:
        """A call announced: its part in the current step, made if it has none."""
        dynamic = bool(chunk.get("dynamic"))
        kind = "dynamic-tool" if dynamic else f"tool-{chunk['toolName']}"
        part = next(
            (
                p
                for p in self._step()
                if p["type"] == kind and p.get("toolCallId") == chunk["toolCallId"]
            ),
            None,
        )
        if part is None:
            part = {"type": kind, "toolCallId": chunk["toolCallId"]}
            if dynamic:
                part["toolName"] = chunk["toolName"]
            self.parts.append(part)
        part.pop("output", None)
        part.pop("errorText", None)
        part.update(state="input-available", input=chunk.get("input"))

    def _answer(self, chunk: Chunk) -> None:
        """A chunk that moves a call's part to its next state (the part is found by its call,
        or by its request for an approval's response); one for no part shown is no part's."""
        if chunk["type"] == "tool-approval-response":
            approval_id = chunk["approvalId"]
            asked = (p for p in self.parts if p.get("approval", {}).get("id") == approval_id)
            part = next(asked, None)
        else:
            part = self._call(chunk["toolCallId"])
        if part is not None:
            ANSWERS[chunk["type"]](part, chunk)

    def _call(self, call_id: str) -> Part | None:
        """A call's part: in the current step first, else the newest of the message."""
        for part in [*self._step(), *reversed(self.parts)]:
            if is_tool_part(part) and part.get("toolCallId") == call_id:
                return part
        return None

    def _step(self) -> list[Part]:
        """The parts after the last ``step-start``."""
        starts = [i for i, part in enumerate(self.parts) if part["type"] == "step-start"]
        return self.parts[starts[-1] + 1 :] if starts else self.parts

    def _metadata(self, value: Any) -> None:
        if isinstance(value, dict):
            self.metadata = merged(self.metadata or {}, value)


def is_tool_part(part: Part) -> bool:
    return str(part["type"]).startswith("tool-") or part["type"] == "dynamic-tool"


def _requested(part: Part, chunk: Chunk) -> None:
    part.update(state="approval-requested", approval={"id": chunk["approvalId"]})


def _responded(part: Part, chunk: Chunk) -> None:
    approval = {**part.get("approval", {}), "approved": chunk["approved"]}
    if chunk.get("reason") is not None:
        approval["reason"] = chunk["reason"]
    part.update(state="approval-responded", approval=approval)


def _output(part: Part, chunk: Chunk) -> None:
    part.pop("errorText", None)
    part.update(state="output-available", output=chunk.get("output"))


def _error(part: Part, chunk: Chunk) -> None:
    part.pop("output", None)
    part.update(state="output-error", errorText=chunk["errorText"])


def _denied(part: Part, chunk: Chunk) -> None:
    part["state"] = "output-denied"


#: the chunks that answer a call, and what each does to its part
ANSWERS = {
    "tool-approval-request": _requested,
    "tool-approval-response": _responded,
    "tool-output-available": _output,
    "tool-output-error": _error,
    "tool-output-denied": _denied,
}


def merged(base: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """``more`` over ``base``, objects merged key by key (the AI SDK's ``mergeObjects``)."""
    out = dict(base)
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out
