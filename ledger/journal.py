"""The tool-call journal (docs/events.md): a pure fold over a turn's events.

Completed calls are ``tool_start``s with a successful ``tool_done``; interrupted calls are
``tool_start``s with none. No Redis, no clock, no logging here: the same events always give the
same journal.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ledger.events import Clear, Event, ToolDone, ToolStart
from ledger.gcpause import gc_paused


@dataclass(frozen=True, slots=True)
class JournalEntry:
    tool: str
    call_id: str | None
    input: Any
    signature: str
    #: the recorded result; None for an interrupted call
    result: Any = None
    read_only: bool = False
    #: the turn the call was recorded in (a fork's journal holds the turns it inherits); where
    #: it was recorded, not what it is: entries compare without it
    turn_id: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class Journal:
    #: completed and interrupted calls, each in the order their ``tool_start``s were recorded
    completed: list[JournalEntry] = field(default_factory=list)
    interrupted: list[JournalEntry] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.completed or self.interrupted)


@dataclass(slots=True)
class _Open:
    order: int
    start: ToolStart


def _entry(start: ToolStart, result: Any = None) -> JournalEntry:
    return JournalEntry(
        start.tool,
        start.call_id,
        start.input,
        start.signature,
        result,
        start.read_only,
        start.turn_id,
    )


def _take(open_calls: list[_Open], done: ToolDone) -> _Open | None:
    """Pair a ``tool_done`` with its start: by call_id when both carry one, else FIFO per tool."""
    if done.call_id is not None:
        for i, call in enumerate(open_calls):
            if call.start.call_id == done.call_id:
                return open_calls.pop(i)
    for i, call in enumerate(open_calls):
        if call.start.tool != done.tool:
            continue
        if done.call_id is None or call.start.call_id is None:
            return open_calls.pop(i)
    return None


class JournalBuilder:
    """The journal's fold in steps: ``feed`` events as they come, read ``journal()`` at any point.

    ``copy()`` is an independent builder at the same point, so a fold kept for a turn's ledger
    (``ledger.cache.EventCache.fold``) can be continued by a run without changing it.
    """

    __slots__ = ("_completed", "_open", "_order")

    def __init__(self) -> None:
        self._open: list[_Open] = []
        #: (order of the start, entry), kept sorted by the order of the starts
        self._completed: list[tuple[int, JournalEntry]] = []
        self._order = 0

    def feed(self, events: Iterable[Event]) -> JournalBuilder:
        with gc_paused():  # the fold makes no cycles: see ledger.gcpause
            self._fold(events)
        return self

    def _fold(self, events: Iterable[Event]) -> None:
        open_calls, completed, order = self._open, self._completed, self._order
        for event in events:
            # ``type(...) is``, not isinstance: events are final classes, and a pydantic model's
            # isinstance goes through ABCMeta (a turn's rebuild does this for every event).
            if type(event) is ToolStart:
                open_calls.append(_Open(order, event))
                order += 1
            elif type(event) is ToolDone:
                call = _take(open_calls, event)
                # An error result closes the call without counting it: nothing happened, a retry
                # may.
                if call is not None and not event.is_error:
                    pair = (call.order, _entry(call.start, event.result))
                    if completed and completed[-1][0] > call.order:
                        insort(completed, pair, key=_first)  # calls finished out of order
                    else:
                        completed.append(pair)
            elif type(event) is Clear:
                open_calls.clear()
        self._order = order

    def journal(self) -> Journal:
        return Journal(
            completed=[entry for _, entry in self._completed],
            interrupted=[_entry(call.start) for call in self._open],
        )

    def copy(self) -> JournalBuilder:
        twin = JournalBuilder()
        twin._open = list(self._open)  # an _Open is never changed once made
        twin._completed = list(self._completed)
        twin._order = self._order
        return twin


def _first(pair: tuple[int, JournalEntry]) -> int:
    return pair[0]


def build_journal(events: Iterable[Event]) -> Journal:
    """Fold a turn's events, in ledger order, into its journal."""
    return JournalBuilder().feed(events).journal()
