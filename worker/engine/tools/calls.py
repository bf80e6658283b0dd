"""The values the executor deals in: a call as the model asked for it, its outcome, an attempt.

Also the texts a model gets instead of running a call that layer 2 stops.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ledger.journal import Journal

ALREADY_COMPLETED = (
    "This exact call already completed in an earlier, interrupted attempt of this turn and was "
    "not run again, because that would repeat its side effect. Its recorded result is below."
)
REWORDED_REFUSAL = (
    "Refused: a {tool} call with the same {fields} already completed in this turn. This call "
    "differs only in its other fields and would repeat the side effect. Reuse the completed "
    "call's result below instead."
)
INTERRUPTED_REFUSAL = (
    "Refused: this {tool} call started in an earlier attempt of this turn and was interrupted "
    "before its result was recorded, so it may already have taken effect. Verify the current "
    "state with a read tool ({reads}) before deciding what to do next; this exact call will not "
    "be run again blind."
)


@dataclass(frozen=True)
class ToolOutcome:
    call_id: str
    tool: str
    result: Any
    is_error: bool
    #: the call was not run (layer 2)
    blocked: bool = False


@dataclass
class Attempt:
    """The executor's state for one attempt: the journal snapshot and what it has claimed."""

    #: None on a turn's first run: there is nothing to block
    journal: Journal | None
    consumed: set[int] = field(default_factory=set)
    settled: set[int] = field(default_factory=set)
    #: completed calls per (tool, signature): the "occurrence" in an idempotency key
    completed: Counter[tuple[str, str]] = field(default_factory=Counter)

    @classmethod
    def begin(cls, journal: Journal | None) -> Attempt:
        attempt = cls(journal)
        for entry in journal.completed if journal else ():
            attempt.completed[(entry.tool, entry.signature)] += 1
        return attempt


def error_result(message: str, **details: Any) -> dict[str, Any]:
    return {"error": message, **details}
