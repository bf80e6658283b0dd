"""Forks (docs/semantics.md): regenerate, edit, retry — a conversation is one line, and a write done
before a fork point is never done again after it.

A fork starts a new turn at a turn of a conversation and replaces it and every later one: they
stay in the ledger, marked ``replaced_by``, and no later turn's model sees them. The fork inherits
their journal (the turns it names in its ``turn_started``'s ``inherits``, read by its runs,
``worker.engine.loop``): its first run meets layer 2 and the interrupted-write guard as a resumed
run does. A replaced turn that is still live is stopped first (``superseded``), and the fork waits
behind it on the conversation's line (``Line``) until it has ended, so what it recorded until then
counts. A fork copies no stream: it reads the conversation's list and each later turn's metadata
and first entry, whatever their length.

A chat protocol's request names its user message by id: ``turn_of_message`` finds the turn that
answers it, and the edges decide from that whether the request is a retry, an edit or a
regenerate (``Lifecycle.send``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from ledger.errors import UnknownTurn
from ledger.events import TurnStarted
from ledger.turn import StopCode, TurnMeta
from worker.base.errors import InvalidInput, Refused
from worker.lifecycle.base import LifecycleBase, NewTurn

#: where a fork goes: the conversation of the turn it forks, or a new one
FORK_INTO = ("same", "new")
#: forks of forks followed from a replaced answer to the one that replaced it last
REPLACED_HOPS = 50


@dataclass(frozen=True)
class ForkPlan:
    """What makes a new turn a fork: where it was forked, the turns whose journal it inherits
    (oldest first) and the turns of its conversation it replaces."""

    fork_of: str
    inherits: tuple[str, ...] = ()
    replaces: tuple[str, ...] = ()


@dataclass(frozen=True)
class Forked:
    """A fork made: its turn, its conversation, the turns it replaces (for a fork into a new
    conversation, those whose journal it inherits there), and its first run ("": it waits
    behind its conversation's line)."""

    turn_id: str
    conversation_id: str
    replaces: tuple[str, ...]
    run_id: str


@dataclass(frozen=True)
class Sent:
    """What a chat protocol's user message became (``Lifecycle.send``): a ``new`` turn, a
    ``repeat`` of the newest one (nothing recorded), or a ``fork``."""

    turn_id: str
    conversation_id: str
    kind: Literal["new", "repeat", "fork"]
    replaces: tuple[str, ...] = ()


@dataclass(frozen=True)
class Source:
    """The turn a fork starts at, read once: its metadata and ``turn_started``, the turns of its
    conversation from it on, and those of them not replaced before."""

    meta: TurnMeta
    started: TurnStarted
    #: the turn and every later one of its conversation's list, oldest first
    later: tuple[str, ...]
    #: the metadata of each of ``later`` (None: gone)
    metas: tuple[TurnMeta | None, ...]
    #: the journals a fork at the turn inherits: each of ``later`` and what it inherited
    inherits: tuple[str, ...]

    @property
    def current(self) -> tuple[str, ...]:
        """Those of ``later`` no fork replaced before: what a fork in the same conversation
        replaces."""
        return tuple(
            t for t, m in zip(self.later, self.metas, strict=True) if m and not m.replaced_by
        )

    @property
    def live(self) -> list[TurnMeta]:
        return [m for m in self.metas if m is not None and not m.ended]


def inherited(later: Iterable[str], started: Iterable[TurnStarted | None]) -> tuple[str, ...]:
    """The turns a fork at ``later[0]`` inherits the journal of, oldest first: each later turn,
    after what it inherited itself (a fork of a fork inherits both), each once."""
    found: dict[str, None] = {}
    for turn_id, event in zip(later, started, strict=True):
        for earlier in event.inherits if event is not None else ():
            found.setdefault(earlier)
        found.setdefault(turn_id)
    return tuple(found)


class Forks(LifecycleBase):
    def fork_source(self, turn_id: str) -> Source:
        """Read what a fork at ``turn_id`` starts from (``UnknownTurn``: no such turn)."""
        meta = self.store.meta(turn_id)
        listed = self.store.lines.turn_ids(meta.conversation_id)
        later = tuple(listed[listed.index(turn_id) :] if turn_id in listed else [turn_id])
        metas = tuple(self.store.lines.metas(later))
        started = self.ledger.started(later)
        first = started[0]
        if first is None:
            raise UnknownTurn(turn_id)  # its first entry is gone: nothing to fork from
        return Source(meta, first, later, metas, inherited(later, started))

    def plan_fork(self, source: Source, into: str) -> ForkPlan:
        """What a fork at ``source`` inherits and replaces; in the same conversation, the live
        turns it replaces are stopped first (``superseded``). A fork into a new conversation
        leaves the source alone: one of its turns still live refuses it (``Refused``)."""
        if into not in FORK_INTO:
            raise InvalidInput(f"conversation must be same or new, not {into!r}")
        if into == "new":
            if source.live:
                meta = source.live[0]
                raise Refused(
                    f"turn {meta.turn_id} is {meta.status.value}: a fork into a new "
                    "conversation inherits its journal, so it must have ended (stop it first)"
                )
            return ForkPlan(source.meta.turn_id, source.inherits)
        for meta in source.live:
            self.stop(meta.turn_id, StopCode.SUPERSEDED)
        return ForkPlan(source.meta.turn_id, source.inherits, source.current)

    def fork_history(self, source: Source) -> list[str]:
        """A fork into a new conversation: the source's turns before the fork point (not
        replaced), which the new conversation's turns see as earlier turns."""
        earlier = self.store.conversations.history(
            source.meta.conversation_id, before=source.meta.turn_id
        )
        metas = self.store.lines.metas(earlier)
        return [t for t, m in zip(earlier, metas, strict=True) if m and not m.replaced_by]

    def turn_of_message(
        self, conversation_id: str, message_id: str
    ) -> tuple[TurnMeta, TurnStarted, bool] | None:
        """The newest turn of the conversation not replaced whose user message has the client's
        id ``message_id``, with its ``turn_started`` and whether it is the conversation's newest
        turn (not replaced); None when no turn has it."""
        current = self.current_turns(conversation_id)
        for position in range(len(current) - 1, -1, -1):
            meta = current[position]
            if meta.message_id == message_id:
                (started,) = self.ledger.started([meta.turn_id])
                if started is None:
                    return None
                return meta, started, position == len(current) - 1
        return None

    def repeated(
        self, conversation_id: str, message_id: str | None, message: str
    ) -> NewTurn | None:
        """The conversation's newest turn when ``message_id`` and ``message`` are its own (a
        retried request, a second tab); ``Refused`` when the id is another turn's message."""
        if not message_id:
            return None
        match = self.turn_of_message(conversation_id, message_id)
        if match is None:
            return None
        meta, started, newest = match
        if newest and started.message == message:
            return NewTurn(meta.turn_id, conversation_id, "")
        raise Refused(
            f"message_id {message_id!r} is turn {meta.turn_id}'s message: fork that turn "
            "(POST /v1/turns/{turn_id}/fork) to edit or regenerate it"
        )

    def regenerated(self, conversation_id: str, answer: str | bool) -> str | None:
        """The current turn that replaced the answer ``answer`` names, following ``replaced_by``
        (a regenerate of it sent again after its fork was made); None when ``answer`` names no
        replaced turn of the conversation."""
        if not isinstance(answer, str):
            return None
        found = self.store.lines.metas([answer])[0]
        seen = 0
        while found is not None and found.replaced_by and seen < REPLACED_HOPS:
            found, seen = self.store.lines.metas([found.replaced_by])[0], seen + 1
        if found is None or found.turn_id == answer or found.replaced_by:
            return None
        return found.turn_id if found.conversation_id == conversation_id else None

    def regenerate_target(
        self, conversation_id: str, answer: str | bool, message_id: str | None
    ) -> str | None:
        """The turn a regenerate forks: the answer it names (a turn of the conversation, not
        replaced), else the newest turn answering ``message_id``, else the newest turn."""
        current = self.current_turns(conversation_id)
        named = [m for m in current if m.turn_id == answer]
        by_id = [m for m in current if message_id and m.message_id == message_id]
        found = named or by_id or current
        return found[-1].turn_id if found else None

    def current_turns(self, conversation_id: str) -> list[TurnMeta]:
        """The conversation's turns no fork replaced, oldest first (those whose keys live)."""
        listed = self.store.lines.turn_ids(conversation_id)
        metas = self.store.lines.metas(listed)
        return [m for m in metas if m is not None and not m.replaced_by]


__all__ = ["FORK_INTO", "ForkPlan", "Forked", "Forks", "Sent", "Source", "inherited"]
