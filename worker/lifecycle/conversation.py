"""What a new turn knows of its conversation, read once, when the turn is let through its
conversation's line (docs/semantics.md).

The earlier turns (each one's message and final answer, within ``DRES_HISTORY_CHARS``) and, when
the newest of them did not complete, the note of what it did (docs/semantics.md) are stored in the
turn's ledger (its ``context``; a turn made with ``Lifecycle.create``, its ``turn_started``): every
run of the turn, on any worker, sees the same context, and no tool call of an earlier turn reaches
the journal or either layer (a fork's inherited journal is the fork's own, ``loop``). A turn a fork
replaced is no earlier turn of any later one.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledger.approvals import fold_approvals
from ledger.conversations import Conversations
from ledger.errors import UnknownTurn
from ledger.events import EarlierTurn, Event, TurnStarted
from ledger.journal import JournalEntry, build_journal
from ledger.store import Ledger
from ledger.turn import TurnMeta
from worker.engine.history import (
    earlier_answer,
    final_text,
    fit_earlier_turns,
    unfinished_turn_note,
)

#: earlier turns read back at most, however short they are
MAX_EARLIER_TURNS = 50


@dataclass(frozen=True)
class Context:
    earlier_turns: tuple[EarlierTurn, ...] = ()
    #: what the newest earlier turn did, if it did not complete (docs/semantics.md)
    prior_turn_note: str | None = None


def conversation_context(
    ledger: Ledger, conversation_id: str, budget: int, *, before: str | None = None
) -> Context:
    """The conversation's earlier turns (those before ``before``; None: all), newest read first
    until ``budget`` characters of history (``DRES_HISTORY_CHARS``) are spent; turns a fork
    replaced are left out."""
    listed = Conversations(ledger).history(conversation_id, before)[::-1]
    turns: list[EarlierTurn] = []
    note: str | None = None
    used = 0
    for turn_id in listed:
        if used > budget or len(turns) >= MAX_EARLIER_TURNS:
            break  # the older turns would be dropped
        try:
            meta = ledger.meta(turn_id)
        except UnknownTurn:
            continue  # expired with its keys
        if meta.replaced_by:
            continue
        unfinished = None if meta.status == "completed" else _how_it_ended(meta)
        if not turns and unfinished is not None:
            # the note of the newest earlier turn that did not complete needs its journal
            events = ledger.events(turn_id)
            note = unfinished_turn_note(unfinished, build_journal(events), _not_run(events))
            started = next((e for e in events if isinstance(e, TurnStarted)), None)
        else:
            # its message and final answer only: its first entry and its last response
            (started,) = ledger.started([turn_id])
            events = ledger.last_response(turn_id)
        if started is None:
            continue
        turns.append(_earlier(turn_id, started, events, unfinished))
        used += len(turns[-1].message) + len(turns[-1].answer)
    return Context(fit_earlier_turns(turns[::-1], budget), note)


def _earlier(
    turn_id: str, started: TurnStarted, events: list[Event], unfinished: str | None
) -> EarlierTurn:
    answer = earlier_answer(final_text(events), unfinished)
    return EarlierTurn(turn_id=turn_id, message=started.message, answer=answer)


def _not_run(events: list[Event]) -> list[JournalEntry]:
    """The turn's calls that waited for approval and never ran: asked, not approved and run."""
    return [
        JournalEntry(e.request.tool, e.request.call_id, e.request.input, e.request.signature)
        for e in fold_approvals(events)
        if e.actionable and (e.decision is None or e.decision.decision != "deny")
    ]


def _how_it_ended(meta: TurnMeta) -> str:
    return {
        "running": "is still running",
        "resuming": "is still running",
        "waiting": WAITING_FOR.get(meta.waiting_for or "", "is waiting"),
        "queued": "has not started yet",
    }.get(meta.status, f"ended as {meta.status} ({meta.code})")


#: a waiting turn's note for the next turn, by what it waits on
WAITING_FOR = {
    "approval": "is waiting for a person's approval",
    "client_tool": "is waiting for a client tool's output",
    "timer": "is waiting for its timer",
}
