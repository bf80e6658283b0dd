"""Open approval requests across turns (docs/http-api.md ``GET /v1/approvals``): where a person
finds what waits for them.

The index is the sorted set ``keys.approvals_pending`` (members ``turn_id/approval_id``, scored
by when they were requested) and the hash ``keys.approval_requests`` beside it (each member's
``approval_requested``, so a page of requests is read in one command). Both are written beside
the turn scripts with single-key commands: listed before the step that opens the requests, taken
off after the step that decides them. A crash between the two leaves an entry whose request is
not open, which a reader drops on the way; never a request nobody can find.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress
from typing import Any

from ledger import keys
from ledger.codec import encode, text
from ledger.errors import EventDecodeError
from ledger.events import ApprovalRequested, parse_event_json
from ledger.paging import Cursor, Row, read_page
from ledger.store import Ledger
from ledger.turn import PENDING, TurnStatus, approval_field


class ApprovalIndex:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.client = ledger.client

    def add(self, requests: Sequence[ApprovalRequested]) -> None:
        """List open requests for a person to find; before the step that opens them.
        Idempotent."""
        if not requests:
            return

        def write() -> Any:
            pipe = self.client.pipeline(transaction=False)
            for request in requests:
                member = approval_member(request.turn_id, request.approval_id)
                pipe.hset(keys.approval_requests(), member, encode(request))
                pipe.zadd(keys.approvals_pending(), {member: int(request.ts * 1000)})
            return pipe.execute()

        self.ledger.retry(write)

    def remove(self, turn_id: str, approval_ids: Sequence[str]) -> None:
        """Take decided (or erased) requests off the list."""
        members = [approval_member(turn_id, aid) for aid in approval_ids]
        if members:
            self.ledger.retry(lambda: self._drop(members))

    def open_request(self, turn_id: str, approval_id: str) -> ApprovalRequested | None:
        """The listed request (None: not listed, or its record unreadable)."""
        raw = self.client.hget(keys.approval_requests(), approval_member(turn_id, approval_id))
        return None if raw is None else _request(raw)

    def page(
        self, *, limit: int, cursor: Cursor | str | None = None
    ) -> tuple[list[ApprovalRequested], Cursor | None]:
        """Open requests across turns, newest first, a page of at most ``limit`` after
        ``cursor`` (``ledger.paging``); the next page's cursor or None.

        Each listed request is checked against its turn (still waiting on it); an entry whose
        request is not open (decided, its turn expired, or never opened) is dropped.
        """
        return read_page(
            self.client, keys.approvals_pending(), self._open, limit=limit, cursor=cursor
        )

    def _open(self, rows: list[Row]) -> list[tuple[str, int, ApprovalRequested]]:
        """The open requests of ``rows``; the entries listed for nothing are dropped."""
        pipe = self.client.pipeline(transaction=False)
        for member, _ in rows:
            turn_id, _, approval_id = member.rpartition("/")
            pipe.hget(keys.turn_meta(turn_id or "_"), approval_field(approval_id))
            pipe.hget(keys.turn_meta(turn_id or "_"), "status")
            pipe.hget(keys.approval_requests(), member)
        replies = pipe.execute()
        open_rows: list[tuple[str, int, ApprovalRequested]] = []
        stale: list[str] = []
        for i, (member, score) in enumerate(rows):
            state, status, raw = replies[3 * i : 3 * i + 3]
            request = None if raw is None else _request(raw)
            state_word = None if state is None else text(state).partition("|")[0]
            turn_status = None if status is None else text(status)
            if state_word == PENDING and turn_status == TurnStatus.WAITING.value:
                if request is not None:
                    open_rows.append((member, score, request))
            elif _listed_for_nothing(state_word, turn_status):
                stale.append(member)
            # else: listed just before its run's wait (a run, not yet waiting): listed later
        if stale:
            self._drop(stale)
        return open_rows

    def _drop(self, members: list[str]) -> Any:
        pipe = self.client.pipeline(transaction=False)
        pipe.zrem(keys.approvals_pending(), *members)
        pipe.hdel(keys.approval_requests(), *members)
        return pipe.execute()


def _request(raw: Any) -> ApprovalRequested | None:
    with suppress(EventDecodeError):
        event = parse_event_json(raw)
        return event if isinstance(event, ApprovalRequested) else None
    return None


def _listed_for_nothing(state: str | None, status: str | None) -> bool:
    """Is a listed request one that no longer waits, nor will? Its turn is gone; it was decided;
    or it never opened: the turn ended, or waits on other requests (no run can open one while
    the turn waits). A request listed by a run that is still ending (its turn running) is not:
    the list is written before the step that opens it."""
    if status is None or (state is not None and state != PENDING):
        return True
    return state is None and status in (
        TurnStatus.WAITING.value,
        TurnStatus.COMPLETED.value,
        TurnStatus.STOPPED.value,
    )


def approval_member(turn_id: str, approval_id: str) -> str:
    """The member of the approval lists: ``turn_id/approval_id`` (an approval id holds no
    ``/``, so the last one splits it)."""
    return f"{turn_id}/{approval_id}"
