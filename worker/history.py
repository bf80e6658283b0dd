"""Rebuild a turn's conversation from its ledger events (pure: no Redis, no clock).

The model sees: the user's message; each model response as an assistant message with its text
and tool calls, each call followed by its result; at every resume, a user message with the
"continue from where you left off" nudge and, when the journal was not empty, the journal note
after it. Text an interrupted attempt had streamed is kept (a ``clear`` drops it); a call with no
recorded result gets a marker saying it was interrupted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ledger.events import (
    Clear,
    Event,
    ModelStart,
    Resumed,
    Text,
    ToolBlocked,
    ToolDone,
    ToolStart,
    TurnStarted,
)
from ledger.journal import Journal
from ledger.note import entry_line
from worker.models.base import AssistantMessage, Message, ToolResultMessage, UserMessage
from worker.tools.calls import ToolCall

NUDGE = (
    "Continue from where you left off and finish the user's original request. Do not repeat "
    "work that is already done, and do not mention the interruption."
)
INTERRUPTED_RESULT = (
    "(interrupted before this call returned a result; it may or may not have taken effect)"
)


def unfinished_turn_note(status: str, journal: Journal) -> str:
    """What a new turn's prompt says of the conversation's unfinished previous turn (§7.7)."""
    lines = [f"(Context: the previous request in this conversation did not finish: it {status}.)"]
    if journal.completed:
        lines.append("Calls it completed (their side effects happened):")
        lines += [entry_line(entry, with_result=True) for entry in journal.completed]
    if journal.interrupted:
        lines.append("Calls it started without a recorded result (outcome unknown; verify first):")
        lines += [entry_line(entry, with_result=False) for entry in journal.interrupted]
    if not journal:
        lines.append("It made no tool calls.")
    return "\n".join(lines)


def resume_prompt(note: str | None) -> str:
    """The user message that opens a resumed attempt: the nudge, then the note if there is one."""
    return NUDGE if not note else f"{NUDGE}\n\n{note}"


def result_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    return json.dumps(result, ensure_ascii=False, sort_keys=True)


@dataclass
class _Response:
    text: str = ""
    calls: list[ToolCall] = field(default_factory=list)


class _Builder:
    def __init__(self) -> None:
        self.items: list[UserMessage | _Response] = []
        self.results: dict[str, ToolResultMessage] = {}
        self.current: _Response | None = None

    def open(self) -> _Response:
        if self.current is None:
            self.current = _Response()
            self.items.append(self.current)
        return self.current

    def call(self, call_id: str, tool: str, data: Any) -> None:
        self.open().calls.append(ToolCall(tool, data, id=call_id))

    def result(self, call_id: str, tool: str, result: Any, is_error: bool) -> None:
        if call_id not in self.results:
            self.results[call_id] = ToolResultMessage(call_id, tool, result_text(result), is_error)

    def messages(self) -> list[Message]:
        out: list[Message] = []
        for item in self.items:
            if isinstance(item, UserMessage):
                out.append(item)
                continue
            if not item.text and not item.calls:
                continue
            out.append(AssistantMessage(item.text, tuple(item.calls)))
            for call in item.calls:
                assert call.id is not None
                missing = ToolResultMessage(call.id, call.name, INTERRUPTED_RESULT, True)
                out.append(self.results.get(call.id, missing))
        return out


def build_messages(events: Iterable[Event]) -> list[Message]:
    """The turn's conversation so far, in the provider-neutral message form."""
    b = _Builder()
    for event in events:  # type(...) is: see ledger.journal.build_journal
        if type(event) is TurnStarted:
            text = event.message
            if event.prior_turn_note:
                text = f"{event.prior_turn_note}\n\n{text}"
            b.items.append(UserMessage(text))
            b.current = None
        elif type(event) is Resumed:
            b.items.append(UserMessage(resume_prompt(event.note)))
            b.current = None
        elif type(event) is ModelStart:
            b.current = None
        elif type(event) is Text:
            b.open().text += event.text
        elif type(event) is Clear:
            if b.current is not None:
                b.current.text = ""
        elif type(event) is ToolStart and event.call_id:
            b.call(event.call_id, event.tool, event.input)
        elif type(event) is ToolBlocked and event.call_id:
            b.call(event.call_id, event.tool, event.input)
            b.result(event.call_id, event.tool, event.result, event.is_error)
        elif type(event) is ToolDone and event.call_id:
            b.result(event.call_id, event.tool, event.result, event.is_error)
    return b.messages()
