"""One run's view of its turn: who it is (``RunContext``) and its fenced writes (``Recorder``).

The recorder fills in the fields every event carries (ids from the injected ``Ids``, time from the
injected ``Clock``), appends under the run's lease epoch, and keeps the turn's events in memory so
the loop rebuilds its prompt without reading Redis again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ledger.events import Event
from ledger.lease import Lease
from ledger.store import Ledger
from worker.base import metrics
from worker.base.clock import Clock, Ids

E = TypeVar("E", bound=Event)


@dataclass(frozen=True)
class RunContext:
    #: the run's hold on the turn (its epoch, chunk, cause and stream sequence)
    lease: Lease
    mode: str = "foreground"
    model: str | None = None
    #: Stop was requested when the run claimed the turn (read with the claim's metadata)
    stop_requested: bool = False
    #: the turn's events as read in the claim's atomic step (None: the run reads them itself)
    snapshot: list[Event] | None = field(default=None, compare=False, repr=False)
    #: the chunk the turn's chunk budget counts from (a Continue grants a fresh budget)
    chunk_base: int = 0
    conversation_id: str = ""

    @property
    def turn_id(self) -> str:
        return self.lease.turn_id

    @property
    def run_id(self) -> str:
        return self.lease.run_id

    @property
    def chunk(self) -> int:
        return self.lease.chunk

    @property
    def epoch(self) -> int:
        return self.lease.epoch

    @property
    def cause(self) -> str:
        """Why this run exists: first, next_chunk, redelivery, reaper, auto_continue, continue."""
        return self.lease.cause

    @property
    def resumed(self) -> bool:
        """Every run but the first resumes the turn: nudge, note and hard-block apply."""
        return self.cause != "first"


def make_event(
    cls: type[E], clock: Clock, ids: Ids, turn_id: str, run_id: str, chunk: int, **fields: Any
) -> E:
    """The one place an event's header is filled in: a new id, the clock's now, who wrote it."""
    return cls(
        event_id=ids.new("ev"),
        ts=clock.now(),
        turn_id=turn_id,
        run_id=run_id,
        chunk=chunk,
        **fields,
    )


class Recorder:
    def __init__(
        self, ledger: Ledger, run: RunContext, clock: Clock, ids: Ids, events: list[Event]
    ) -> None:
        self.ledger = ledger
        self.run = run
        self.clock = clock
        self.ids = ids
        #: the turn's events: what was read at the start of the run plus what this run recorded
        self.events = events
        #: events made by ``hold``, written together with the next one recorded
        self.held: list[Event] = []

    def make(self, cls: type[E], **fields: Any) -> E:
        run = self.run
        return make_event(cls, self.clock, self.ids, run.turn_id, run.run_id, run.chunk, **fields)

    def record(self, cls: type[E], **fields: Any) -> E:
        event = self.make(cls, **fields)
        self.record_many([event])
        return event

    def hold(self, cls: type[E], **fields: Any) -> E:
        """Make an event that joins ``events`` now and is written with the next record: one
        round trip for both. Nothing must act on it outside this run before then."""
        event = self.make(cls, **fields)
        self.events.append(event)
        self.held.append(event)
        return event

    def take_held(self) -> list[Event]:
        """The held events, no longer held: the caller writes them (first) now."""
        held, self.held = self.held, []
        return held

    def record_many(self, events: Sequence[Event]) -> None:
        # a lone event with nothing held takes append_many's one-XADD path
        batch = [*self.take_held(), *events]
        with metrics.append_timer():
            self.ledger.append_many(batch, lease=self.run.lease)
        self.events.extend(events)
