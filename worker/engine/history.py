"""Rebuild a turn's conversation from its ledger events (pure: no Redis, no clock).

The model sees: the conversation's earlier turns that ``turn_started`` (or the ``context`` written
when the turn was let through its conversation's line) carries (docs/semantics.md), each as the
user's message and the assistant's final answer in plain text (no tool calls of another turn:
neither layer looks across turns, but a fork's own inherited journal); the user's message, after
the note of what an unfinished earlier turn did and, for a fork, the note of what the turns it
replaced did (its ``inherited``); each model response as an assistant message with its text and
tool calls, each call followed by its result; at every resume, a user message with the "continue
from where you left off" nudge and, when the journal was not empty, the journal note after it.
Text an interrupted attempt had streamed is kept (a ``clear`` drops it); a call with no recorded
result gets a marker saying it was interrupted. A call that waited for approval stands where the
model made it (its ``approval_requested``), with the result its approved execution or its denial
recorded later.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ledger.events import (
    ApprovalRequested,
    Clear,
    EarlierTurn,
    Event,
    Inherited,
    ModelDone,
    ModelStart,
    Resumed,
    Text,
    ToolBlocked,
    ToolDone,
    ToolStart,
    TurnContext,
    TurnStarted,
)
from ledger.journal import Journal, JournalEntry
from ledger.note import entry_line
from worker.engine.models.base import (
    AssistantMessage,
    Message,
    RecordedCall,
    ToolResultMessage,
    UserMessage,
)

NUDGE = (
    "Continue from where you left off and finish the user's original request. Do not repeat "
    "work that is already done, and do not mention the interruption."
)
FORK_LEAD = (
    "(Context: this message replaces earlier answers in this conversation (the user asked again, "
    "or edited the request). Their tool calls happened; they are listed below. Do not repeat a "
    "completed one; reuse its result.)"
)
INTERRUPTED_RESULT = (
    "(interrupted before this call returned a result; it may or may not have taken effect)"
)


def unfinished_turn_note(
    status: str, journal: Journal, waiting: Sequence[JournalEntry] = ()
) -> str:
    """What a new turn's prompt says of the conversation's unfinished previous turn
    (docs/semantics.md); ``waiting``: its calls that waited for a person's approval and did not run
    (docs/semantics.md)."""
    lines = [f"(Context: the previous request in this conversation did not finish: it {status}.)"]
    if journal.completed:
        lines.append("Calls it completed (their side effects happened):")
        lines += [entry_line(entry, with_result=True) for entry in journal.completed]
    if journal.interrupted:
        lines.append("Calls it started without a recorded result (outcome unknown; verify first):")
        lines += [entry_line(entry, with_result=False) for entry in journal.interrupted]
    if waiting:
        lines.append("Calls it was waiting to have approved by a person (they did not run):")
        lines += [entry_line(entry, with_result=False) for entry in waiting]
    if not journal and not waiting:
        lines.append("It made no tool calls.")
    return "\n".join(lines)


def earlier_answer(text: str, unfinished: str | None) -> str:
    """What an earlier turn answered: its last response's text; for a turn that did not complete,
    with a line saying so (``unfinished``: how it ended), so no earlier answer is ever blank (a
    provider may refuse a blank message)."""
    if unfinished is None:
        return text if text.strip() else "(no answer text)"
    marker = f"(This request did not finish: it {unfinished}.)"
    return f"{text}\n\n{marker}" if text.strip() else marker


def final_text(events: Iterable[Event]) -> str:
    """The text of the turn's last model response (a ``clear`` drops what was streamed before)."""
    parts: list[str] = []
    for event in events:
        if isinstance(event, ModelStart | Clear):
            parts = []
        elif isinstance(event, Text):
            parts.append(event.text)
    return "".join(parts)


def fit_earlier_turns(turns: Sequence[EarlierTurn], budget: int) -> tuple[EarlierTurn, ...]:
    """The newest of ``turns`` (oldest first) whose messages and answers fit in ``budget``
    characters, the oldest dropped first. The newest turn alone over the budget is cut to it."""
    kept: list[EarlierTurn] = []
    used = 0
    for turn in reversed(turns):
        size = len(turn.message) + len(turn.answer)
        if used + size > budget:
            if not kept and budget > 0:
                kept.append(_cut(turn, budget))
            break
        kept.append(turn)
        used += size
    return tuple(reversed(kept))


def _cut(turn: EarlierTurn, budget: int) -> EarlierTurn:
    message = _head(turn.message, max(budget // 2, budget - len(turn.answer)))
    return turn.model_copy(
        update={"message": message, "answer": _head(turn.answer, budget - len(message))}
    )


def _head(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with ``…``; a non-empty text never cut to nothing."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def resume_prompt(note: str | None) -> str:
    """The user message that opens a resumed attempt: the nudge, then the note if there is one."""
    return NUDGE if not note else f"{NUDGE}\n\n{note}"


def result_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    return json.dumps(result, ensure_ascii=False, sort_keys=True)


@dataclass(frozen=True)
class _Opening:
    """What opens a turn's conversation: the earlier turns, the note of an unfinished earlier
    turn, the user's message, and a fork's note of the turns it replaced."""

    earlier: tuple[EarlierTurn, ...] = ()
    note: str | None = None
    message: str = ""
    fork_note: str | None = None

    def items(self) -> list[UserMessage | AssistantMessage | _Response]:
        items: list[UserMessage | AssistantMessage | _Response] = []
        for earlier in self.earlier:
            items += [UserMessage(earlier.message), AssistantMessage(earlier.answer)]
        notes = [n for n in (self.note, self.fork_note) if n]
        items.append(UserMessage("\n\n".join([*notes, self.message])))
        return items


@dataclass
class _Response:
    text: str = ""
    calls: list[RecordedCall] = field(default_factory=list)
    #: its message, made once the response is closed (it never changes after that)
    message: AssistantMessage | None = None


class Conversation:
    """The fold behind a model request: the messages so far and the step counters.

    Fed in steps (``feed``) and copied at any point (``copy``), so a turn's next run continues
    from where the last one left it (``ledger.cache.EventCache.fold``). Only the response being
    built is ever changed once made: everything before it is shared by copies.
    """

    __slots__ = (
        "_calls",
        "_current",
        "_items",
        "_opening",
        "_prior",
        "_results",
        "_turn",
        "resume_step",
        "step",
    )

    def __init__(self) -> None:
        self._items: list[UserMessage | AssistantMessage | _Response] = []
        self._results: dict[str, ToolResultMessage] = {}
        #: ids of the calls placed so far: a call asked about first (``approval_requested``)
        #: is placed once, where the model made it
        self._calls: set[str] = set()
        #: the response being built (the last item), None between responses
        self._current: _Response | None = None
        #: model calls that finished, in the turn / since its last resume
        self.step = 0
        self.resume_step = 0
        self._prior: set[tuple[int, int]] = set()
        #: what opens the conversation (earlier turns, notes, the user's message) and how many
        #: of ``_items`` it made: a ``context`` or ``inherited`` event makes them again
        self._turn = _Opening()
        self._opening = 0

    @property
    def prior_attempts(self) -> frozenset[tuple[int, int]]:
        """(step, resume_step) of every model call started so far."""
        return frozenset(self._prior)

    def feed(self, events: Iterable[Event]) -> Conversation:
        for event in events:
            handler = _HANDLERS.get(type(event))
            if handler is not None:
                handler(self, event)
        return self

    def copy(self) -> Conversation:
        twin = Conversation()
        twin._items = list(self._items)
        twin._results = dict(self._results)
        twin._calls = set(self._calls)
        if self._current is not None:
            twin._current = _Response(self._current.text, list(self._current.calls))
            twin._items[-1] = twin._current
        twin.step, twin.resume_step = self.step, self.resume_step
        twin._prior = set(self._prior)
        twin._turn, twin._opening = self._turn, self._opening
        return twin

    def messages(self) -> list[Message]:
        out: list[Message] = []
        results = self._results
        for item in self._items:
            if not isinstance(item, _Response):
                out.append(item)
                continue
            if not item.text and not item.calls:
                continue
            message = item.message
            if message is None:
                message = AssistantMessage(item.text, tuple(item.calls))
                if item is not self._current:
                    item.message = message
            out.append(message)
            for call in item.calls:
                result = results.get(call.call_id)
                if result is None:
                    result = ToolResultMessage(call.call_id, call.name, INTERRUPTED_RESULT, True)
                out.append(result)
        return out

    # -- one handler per kind of event that shapes the conversation ---------------------------

    def _open(self) -> _Response:
        if self._current is None:
            self._current = _Response()
            self._items.append(self._current)
        return self._current

    def _call(self, call_id: str, tool: str, data: Any) -> None:
        if call_id in self._calls:
            return  # run or denied after its approval request: it stands where it was asked
        self._calls.add(call_id)
        self._open().calls.append(RecordedCall(tool, data, call_id))

    def _result(self, call_id: str, tool: str, result: Any, is_error: bool) -> None:
        if call_id not in self._results:
            self._results[call_id] = ToolResultMessage(call_id, tool, result_text(result), is_error)

    def _turn_started(self, event: TurnStarted) -> None:
        self._open_with(_Opening(event.earlier_turns, event.prior_turn_note, event.message))

    def _context(self, event: TurnContext) -> None:
        opening = self._turn
        self._open_with(_Opening(event.earlier_turns, event.prior_turn_note, opening.message))

    def _inherited(self, event: Inherited) -> None:
        opening = self._turn
        fork_note = FORK_LEAD if not event.note else f"{FORK_LEAD}\n\n{event.note}"
        self._open_with(_Opening(opening.earlier, opening.note, opening.message, fork_note))

    def _open_with(self, opening: _Opening) -> None:
        """The conversation's opening made (again): it replaces the one made before, which
        nothing followed yet (these events come before the turn's first model call)."""
        items = opening.items()
        self._items[: self._opening] = items
        self._turn, self._opening = opening, len(items)
        self._current = None

    def _resumed(self, event: Resumed) -> None:
        self._items.append(UserMessage(resume_prompt(event.note)))
        self._current = None
        self.resume_step = 0

    def _model_start(self, event: ModelStart) -> None:
        self._current = None
        self._prior.add((event.step, event.resume_step))

    def _model_done(self, event: ModelDone) -> None:
        self.step += 1
        self.resume_step += 1

    def _text(self, event: Text) -> None:
        self._open().text += event.text

    def _clear(self, event: Clear) -> None:
        if self._current is not None:
            self._current.text = ""

    def _tool_start(self, event: ToolStart) -> None:
        if event.call_id:
            self._call(event.call_id, event.tool, event.input)

    def _tool_blocked(self, event: ToolBlocked) -> None:
        if event.call_id:
            self._call(event.call_id, event.tool, event.input)
            self._result(event.call_id, event.tool, event.result, event.is_error)

    def _approval_requested(self, event: ApprovalRequested) -> None:
        self._call(event.call_id, event.tool, event.input)

    def _tool_done(self, event: ToolDone) -> None:
        if event.call_id:
            self._result(event.call_id, event.tool, event.result, event.is_error)


#: a dict lookup on the exact class: cheaper than a chain of checks (or isinstance, which goes
#: through ABCMeta for pydantic models) for every event of a long turn
_HANDLERS: dict[type[Any], Callable[[Conversation, Any], None]] = {
    TurnStarted: Conversation._turn_started,
    TurnContext: Conversation._context,
    Inherited: Conversation._inherited,
    Resumed: Conversation._resumed,
    ModelStart: Conversation._model_start,
    ModelDone: Conversation._model_done,
    Text: Conversation._text,
    Clear: Conversation._clear,
    ToolStart: Conversation._tool_start,
    ToolBlocked: Conversation._tool_blocked,
    ToolDone: Conversation._tool_done,
    ApprovalRequested: Conversation._approval_requested,
}


def build_messages(events: Iterable[Event]) -> list[Message]:
    """The turn's conversation so far, in the provider-neutral message form."""
    return Conversation().feed(events).messages()
