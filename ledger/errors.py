"""Errors of the ledger package. One root, shallow, picklable (plain args only).

``DresBaseError`` is the one base of both packages' roots (``LedgerError`` here, ``DresError``
in ``worker.base.errors``): a caller that handles any error dres raises on purpose catches it.
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger.event_models import Event


class DresBaseError(Exception):
    """The base of every error dres raises on purpose, the ledger's and the worker's."""


class LedgerError(DresBaseError):
    """Root of every error the ledger raises."""


class InvalidId(LedgerError, ValueError):
    """An id that cannot name a Redis key of dres (empty, or with a brace of the hash tag)."""


class EventDecodeError(LedgerError):
    """A stream entry or dict is not a valid event of a known type and schema version."""


class SignatureError(LedgerError):
    """A value cannot be put in canonical JSON form (NaN, infinity, an unsupported type)."""


class FencedOut(LedgerError):
    """An append presented a lease epoch that is no longer the turn's: another run owns it.

    ``args``: ``(turn_id, presented_epoch, current_epoch)``.
    """

    def __init__(self, turn_id: str, presented: int, current: int | None) -> None:
        super().__init__(turn_id, presented, current)
        self.turn_id = turn_id
        self.presented = presented
        self.current = current

    def __str__(self) -> str:
        return (
            f"turn {self.turn_id}: append with lease epoch {self.presented} rejected, "
            f"the turn's epoch is {self.current}"
        )


class UnknownTurn(LedgerError):
    """The turn has no metadata in Redis (never created, or expired)."""

    def __init__(self, turn_id: str) -> None:
        super().__init__(turn_id)
        self.turn_id = turn_id

    def __str__(self) -> str:
        return f"unknown turn {self.turn_id!r}"


class LedgerUnavailable(LedgerError):
    """Redis could not be reached after the configured retries."""


class BadCursor(LedgerError, ValueError):
    """A listing's cursor that is no page's ``next_cursor``: not ``<score>:<member>``, or a score
    of more digits than any the ledger gives (refused before it reaches ``int()`` or Redis)."""

    def __init__(self, cursor: str) -> None:
        super().__init__(cursor)
        self.cursor = cursor

    def __str__(self) -> str:
        shown = self.cursor if len(self.cursor) <= 40 else self.cursor[:40] + "..."
        return f"cursor {shown!r} is not a page's next_cursor"


class StoreFull(LedgerError):
    """Redis refused a write for memory (``maxmemory`` reached under ``noeviction``): nothing of
    it was written. ``unrecorded`` holds the events of a refused append, which the run's stop
    records with its end (a step that may write under OOM), so none is lost silently."""

    def __init__(self, what: str, unrecorded: Sequence[Event] = ()) -> None:
        super().__init__(what)
        self.what = what
        self.unrecorded = list(unrecorded)

    def __str__(self) -> str:
        return f"redis is out of memory: {self.what}"


class CorruptTurn(LedgerError):
    """A turn's metadata cannot be read as a turn (no status, an unknown one, a bad number)."""

    def __init__(self, turn_id: str, what: str) -> None:
        super().__init__(turn_id, what)
        self.turn_id = turn_id
        self.what = what

    def __str__(self) -> str:
        return f"turn {self.turn_id}: unreadable metadata: {self.what}"


class TransitionRefused(LedgerError):
    """A step of the turn's state machine was refused: the turn's status does not allow it
    (``why`` = ``REFUSED``, ``found`` = the status), or the turn changed since the caller read it
    (``why`` = ``CHANGED``, ``found`` = the field and its value now).
    """

    def __init__(self, turn_id: str, step: str, why: str, found: str) -> None:
        super().__init__(turn_id, step, why, found)
        self.turn_id = turn_id
        self.step = step
        self.why = why
        self.found = found

    def __str__(self) -> str:
        if self.why == "REFUSED":
            return f"turn {self.turn_id}: {self.step} is not allowed from status {self.found!r}"
        return f"turn {self.turn_id}: {self.step} refused, the turn changed ({self.found})"


class StopRequested(LedgerError):
    """An append that may only land while the turn's Stop flag is unset (a write's
    ``tool_start``) found it set: nothing was written. ``code`` is the flag's stop code
    (``cancelled``, ``superseded``)."""

    def __init__(self, turn_id: str, code: str) -> None:
        super().__init__(turn_id, code)
        self.turn_id = turn_id
        self.code = code

    def __str__(self) -> str:
        return f"turn {self.turn_id}: Stop requested ({self.code}); nothing was appended"
