"""Errors of the ledger package. One root, shallow, picklable (plain args only)."""

from __future__ import annotations


class LedgerError(Exception):
    """Root of every error the ledger raises."""


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
