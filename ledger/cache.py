"""A process's memory of the turns it has read, so a turn's next run reads only what is new.

A turn's stream is append-only while the turn lives: entries are never changed or removed, and a
new entry always has a larger id than every entry before it. So the events read up to stream id
``last``, followed by the entries after ``last``, are the whole turn. Each lookup reads from
``last`` inclusive: finding that very event again (its stream id and the event itself: stream
ids are ``epoch-n`` and repeat in a turn created again under the same id) shows the stream still
holds what was remembered; when it is gone the turn is read whole.

A chunk's claim does that read in its own atomic step (``read_point``, then ``absorb`` the
claim's entries): nothing can be appended between the claim and the read, and a resumed run
starts with its snapshot in hand, without a round trip of its own.

Only what was read from Redis is remembered, never what a run wrote: an append cut off by a time
limit may have landed without its writer knowing, and a read is the only record that cannot miss
it. A prefork child keeps one cache and runs one task at a time: no locking.

What a run derives from the events (its journal, its conversation) is a fold; ``fold`` keeps each
fold of a remembered turn at the point it last reached, so a turn's next run folds only the new
events, however long the turn has grown.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, Self, TypeVar, cast

from ledger.codec import Envelope
from ledger.events import Event
from ledger.lease import Claim
from ledger.store import Ledger

#: turns remembered per process, least recently read dropped first
DEFAULT_MAX_TURNS = 32


class Fold(Protocol):
    """A fold over a turn's events that can be fed in steps and copied at any point."""

    def feed(self, events: Iterable[Event]) -> Self: ...

    def copy(self) -> Self: ...


F = TypeVar("F", bound=Fold)


@dataclass
class _Known:
    #: the stream id of the last event read
    last: str
    events: list[Event]
    #: per kind of fold: how many of ``events`` it has folded, and the fold
    folds: dict[Callable[[], Any], tuple[int, Any]] = field(default_factory=dict)


class EventCache:
    def __init__(self, ledger: Ledger, *, max_turns: int = DEFAULT_MAX_TURNS) -> None:
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.ledger = ledger
        self.max_turns = max_turns
        self._turns: OrderedDict[str, _Known] = OrderedDict()
        #: lookups answered by reading only the new entries / by reading the whole turn
        self.hits = 0
        self.misses = 0

    def events(self, turn_id: str) -> list[Event]:
        """Every decodable event of the turn, in order: a new list the caller may extend."""
        start = self.read_point(turn_id)
        if start != "-":
            merged = self._merge(turn_id, start, self.ledger.read_from(turn_id, start))
            if merged is not None:
                return merged
        return self._merge(turn_id, "-", self.ledger.read_turn(turn_id)) or []

    def read_point(self, turn_id: str) -> str:
        """Where a claim should read the turn from: the last remembered entry (inclusive), or
        ``-`` (the start) for a turn not remembered."""
        known = self._turns.get(turn_id)
        return known.last if known is not None else "-"

    def absorb(self, claim: Claim) -> list[Event] | None:
        """The whole turn from what a claim read (``read_point``) in its own atomic step, or
        None when that read does not complete it (the caller then reads through ``events``)."""
        if claim.lease is None or claim.entries is None or not claim.read_from:
            return None
        merged = self._merge(claim.lease.turn_id, claim.read_from, claim.entries)
        return merged if claim.read_all else None

    def _merge(self, turn_id: str, start: str, entries: list[Envelope]) -> list[Event] | None:
        """The turn as remembered, continued by ``entries`` read from ``start`` (``-``: the
        whole turn), now remembered in its place; None when they do not continue it (the turn
        was forgotten, or its stream is no longer the one remembered)."""
        known = self._turns.pop(turn_id, None)
        if start == "-":
            self.misses += 1
            events = [e.event for e in entries]
            folds: dict[Callable[[], Any], tuple[int, Any]] = {}
        elif known is not None and entries and self._same(entries[0], known):
            self.hits += 1
            events = known.events + [e.event for e in entries[1:]]
            folds = known.folds  # they folded a prefix of ``events``: still true
        else:
            return None
        if not entries:
            return events
        self._turns[turn_id] = _Known(entries[-1].stream_id, events, folds)
        while len(self._turns) > self.max_turns:
            self._turns.popitem(last=False)
        return list(events)

    def fold(self, turn_id: str, events: Sequence[Event], kind: Callable[[], F]) -> F:
        """``kind()`` fed with ``events``, a list of the turn's events in order.

        When ``events`` begins with the turn as remembered (a list this cache returned, perhaps
        extended since by its caller), the fold kept for the remembered events is brought up to
        date and a copy of it is fed the rest: only events not folded before are folded.
        """
        known = self._turns.get(turn_id)
        n = len(known.events) if known is not None else 0
        if known is None or not n or len(events) < n or events[n - 1] is not known.events[n - 1]:
            return kind().feed(events)
        done, kept = known.folds.get(kind, (0, None))
        if kept is None:
            kept = kind()
        if done < n:
            kept.feed(known.events[done:])
            known.folds[kind] = (n, kept)
        return cast(F, kept.copy().feed(events[n:]))

    @staticmethod
    def _same(entry: Envelope, known: _Known) -> bool:
        # The whole event, not its id alone: a compact text's id is derived from its place
        # (``ledger.codec``), and the place repeats in a turn created again under the same id.
        return entry.stream_id == known.last and entry.event == known.events[-1]

    def forget(self, turn_id: str) -> None:
        self._turns.pop(turn_id, None)

    def __len__(self) -> int:
        return len(self._turns)
