"""The journal note of a resume prompt (docs/semantics.md, layer 1).

The structure is fixed by the contract: a lead line, then the completed calls (tool, input,
result) to reuse and not re-run, then the interrupted calls whose outcome must be verified.
Inputs are cut to about 120 characters and results to about 400, whitespace collapsed. An empty
journal has no note.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ledger.events import Event
from ledger.journal import Journal, JournalBuilder, JournalEntry

#: characters of a call's input shown in the note
INPUT_CHARS = 120
#: characters of a call's result shown in the note
RESULT_CHARS = 400

LEAD = "Tool calls already recorded for this turn (from the durable run ledger):"
COMPLETED_HEADER = (
    "Completed - these side effects already happened. Reuse the results; do not call them again:"
)
INTERRUPTED_HEADER = (
    "Interrupted - these started but no result was recorded, so they may or may not have taken "
    "effect. Check the current state with a read tool before doing any of them again:"
)
NO_RESULT = "(no result recorded)"

_compact = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode


def shorten(text: str, limit: int) -> str:
    """Collapse whitespace runs to one space, trim, and cut to ``limit`` characters with ``…``."""
    collapsed = " ".join(text.split())
    if len(collapsed) <= limit:
        return collapsed
    return collapsed[:limit].rstrip() + "…"


def shown(value: Any, limit: int) -> str:
    """A value as a person reads it in one line: its text, or its compact JSON, shortened."""
    return shorten(_show(value), limit)


def _show(value: Any) -> str:
    """A value as the note shows it: compact JSON with sorted keys. For reading, not matching
    (that is the signature's canonical form), so the C encoder does it; a value it cannot sort
    or encode is shown as well as it can be."""
    if isinstance(value, str):
        return value
    try:
        return _compact(value)
    except (TypeError, ValueError):
        return json.dumps(value, default=str, ensure_ascii=False)


def entry_line(entry: JournalEntry, with_result: bool) -> str:
    """One call as the note lists it: ``- tool input: … → result``."""
    text = f"- {entry.tool}"
    if entry.input not in (None, {}, []):
        text += f" input: {shorten(_show(entry.input), INPUT_CHARS)}"
    if with_result:
        result = NO_RESULT if entry.result is None else shorten(_show(entry.result), RESULT_CHARS)
        text += f" → {result or '(empty result)'}"
    return text


#: lines of completed entries made before, by entry identity (the entry is kept beside its line,
#: so an identity reused by a later object is told apart)
Lines = dict[int, tuple[JournalEntry, str]]


def _completed_line(entry: JournalEntry, made: Lines | None) -> str:
    if made is None:
        return entry_line(entry, with_result=True)
    kept = made.get(id(entry))
    if kept is None or kept[0] is not entry:
        kept = made[id(entry)] = (entry, entry_line(entry, with_result=True))
    return kept[1]


def journal_note(journal: Journal) -> str | None:
    """The note for a resume prompt, or None when the journal is empty."""
    return _note(journal, None)


class NoteFold:
    """The note as a fold over a turn's events: the journal's fold, and the line of each
    completed call made once, so a long turn's note is made of mostly ready lines. ``copy()``
    continues independently and shares the lines (a line depends on its entry only); a process's
    ``EventCache`` keeps this fold per turn beside the conversation's.
    """

    __slots__ = ("_journal", "_lines")

    def __init__(self) -> None:
        self._journal = JournalBuilder()
        self._lines: Lines = {}

    def feed(self, events: Iterable[Event]) -> NoteFold:
        self._journal.feed(events)
        return self

    def copy(self) -> NoteFold:
        twin = NoteFold()
        twin._journal = self._journal.copy()
        twin._lines = self._lines
        return twin

    def journal(self) -> Journal:
        return self._journal.journal()

    def note(self) -> str | None:
        return _note(self.journal(), self._lines)

    def kept_lines(self) -> list[tuple[JournalEntry, str]]:
        """The completed calls' lines made so far (for tests and diagnostics)."""
        return list(self._lines.values())


def _note(journal: Journal, made: Lines | None) -> str | None:
    if not journal:
        return None
    lines = [LEAD]
    if journal.completed:
        lines += ["", COMPLETED_HEADER]
        lines += [_completed_line(entry, made) for entry in journal.completed]
    if journal.interrupted:
        lines += ["", INTERRUPTED_HEADER]
        lines += [entry_line(entry, with_result=False) for entry in journal.interrupted]
    return "\n".join(lines)
