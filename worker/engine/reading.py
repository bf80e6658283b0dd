"""How a run reads its turn: the events, and on a resumed run (or a fork's) the journal and note.

A run reads its turn's ledger once (with a process's ``EventCache``, only what is new since that
process last read it) and folds it into its journal (with the cache, again only what is new). On a
resumed run that read is also the hard-block snapshot (layer 2), re-tried with backoff; if it
still fails the run stops with ``journal_unreadable`` rather than run writes blind. The journal
note (layer 1) is best-effort.

A fork (docs/semantics.md) inherits the journal of the turns it replaced (its ``turn_started``'s
``inherits``): every run of it, its first included, reads those turns too, and its journal is
theirs followed by its own. They are read as layer 2's snapshot is: with backoff, else
``journal_unreadable``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import redis
import structlog

from ledger.cache import EventCache, F
from ledger.errors import LedgerError
from ledger.events import Event, TurnStarted
from ledger.journal import Journal, build_journal
from ledger.note import NoteFold
from ledger.store import Ledger
from worker.base.clock import Clock
from worker.base.errors import JournalUnreadable
from worker.base.settings import Settings
from worker.engine.recorder import RunContext

log = structlog.get_logger("dres.loop")

READ_ERRORS = (LedgerError, redis.RedisError)


@dataclass(frozen=True)
class Read:
    """What a run read of its turn before its first step."""

    events: list[Event]
    #: None on a turn's first run (not a fork's): there is nothing to block
    journal: Journal | None = None
    #: the journal note (None: an empty journal, unavailable, or DRES_JOURNAL_NOTE off)
    note: str | None = None
    #: a fork's: the turns it inherits the journal of, and their events
    inherits: tuple[str, ...] = ()
    inherited: list[Event] = field(default_factory=list)


def inherits_of(events: Sequence[Event]) -> tuple[str, ...]:
    """The turns whose journal the turn inherits (its ``turn_started``'s; a fork's)."""
    first = events[0] if events else None
    return first.inherits if isinstance(first, TurnStarted) else ()


class TurnReader:
    def __init__(
        self, ledger: Ledger, cache: EventCache | None, settings: Settings, clock: Clock
    ) -> None:
        self.ledger = ledger
        self.cache = cache
        self.settings = settings
        self.clock = clock
        #: how a run reads a turn: through the process's cache when there is one
        self.events = cache.events if cache is not None else ledger.events

    def read(self, run: RunContext) -> Read:
        """The turn's events; on a resumed run or a fork's, also its journal and note.

        A snapshot the run's claim read is used as it is: it cannot have missed anything.
        """
        if not run.resumed or self.settings.naive:
            # ``naive`` (chaos only): resume with neither layer, as a plain retry would
            events = run.snapshot or self.events(run.turn_id)
            inherits = () if self.settings.naive else inherits_of(events)
            return self._inheriting(run, events, inherits) if inherits else Read(events)
        try:
            events = run.snapshot or self.events(run.turn_id)
        except READ_ERRORS as e:
            # Layer 1 is best-effort: the resume goes on without the note.
            log.warning("journal note unavailable; resuming without it", error=repr(e))
            events = self._snapshot(run.turn_id)
            inherits = inherits_of(events)
            read = self._inheriting(run, events, inherits) if inherits else None
            journal = read.journal if read else build_journal(events)
            return Read(events, journal, None, inherits, read.inherited if read else [])
        inherits = inherits_of(events)
        if inherits:
            return self._inheriting(run, events, inherits)
        fold = self.fold(run.turn_id, events, NoteFold)
        return Read(events, fold.journal(), self._note(fold))

    def _inheriting(self, run: RunContext, events: list[Event], inherits: Sequence[str]) -> Read:
        """A fork's read: the inherited turns' events (with backoff), its journal over them and
        its own events, and that journal's note."""
        inherited = [event for turn_id in inherits for event in self._snapshot(turn_id)]
        fold = NoteFold().feed(inherited).feed(events)
        return Read(events, fold.journal(), self._note(fold), tuple(inherits), inherited)

    def _note(self, fold: NoteFold) -> str | None:
        return fold.note() if self.settings.journal_note else None

    def _snapshot(self, turn_id: str) -> list[Event]:
        """Layer 2 needs the journal: re-read with backoff, else refuse to run writes blind."""
        attempts = self.settings.journal_read_attempts
        for attempt in range(attempts):
            if attempt:
                self.clock.sleep(self.settings.journal_read_backoff_s * 2 ** (attempt - 1))
            try:
                return self.events(turn_id)
            except READ_ERRORS as e:
                error = e
        raise JournalUnreadable(f"turn {turn_id}: {attempts} reads failed: {error!r}")

    def fold(self, turn_id: str, events: list[Event], kind: Callable[[], F]) -> F:
        """``kind()`` fed with the turn's ``events``: with the process's cache, only the events
        it has not folded for this turn before."""
        if self.cache is None:
            return kind().feed(events)
        return self.cache.fold(turn_id, events, kind)


__all__ = ["READ_ERRORS", "Read", "TurnReader", "inherits_of"]
