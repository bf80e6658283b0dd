"""A turn's approval requests (docs/semantics.md): a pure fold over its events.

Each ``approval_requested`` is paired with its ``approval_decided`` (by ``approval_id``) and with
what became of its call afterwards: the execution it authorised (a ``tool_start`` carrying its
``approval_id``) or the ``tool_blocked`` of a denial (by ``call_id``). A call asked about again
(its request expired or was voided, and a Continue asked again) has a newer request with the same
``call_id``; only the newest request of a call can still be acted on. No Redis, no clock here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

from ledger.events import ApprovalDecided, ApprovalRequested, Event, ToolBlocked, ToolStart


@dataclass(frozen=True, slots=True)
class ApprovalEntry:
    request: ApprovalRequested
    #: its decision; None while it is open
    decision: ApprovalDecided | None = None
    #: its call was acted on after the request: the approved execution started, or the denial
    #: was recorded
    used: bool = False
    #: a newer request for the same call replaced it (asked again after an expiry or a voiding)
    replaced: bool = False

    @property
    def actionable(self) -> bool:
        """Still to be acted on by the turn's next run: the newest request of its call, and
        nothing of the call recorded after it."""
        return not self.used and not self.replaced

    def as_dict(self) -> dict[str, Any]:
        """The request with its decision, in the form the API lists (docs/http-api.md)."""
        decided = self.decision
        return {
            **request_fields(self.request),
            "decision": decided.decision if decided else None,
            "reason": decided.reason if decided else None,
            "by": decided.by if decided else None,
            "decided_at": decided.ts if decided else None,
        }


def request_fields(request: ApprovalRequested) -> dict[str, Any]:
    """An approval request as a person (the API, a webhook) reads it."""
    return {
        "approval_id": request.approval_id,
        "turn_id": request.turn_id,
        "call_id": request.call_id,
        "tool": request.tool,
        "input": request.input,
        "signature": request.signature,
        "requested_at": request.ts,
        "expires_at": request.expires_at,
    }


class ApprovalFold:
    """The fold in steps (``feed``; ``copy`` for a cache that continues it), like the journal's."""

    __slots__ = ("_by_call", "_entries")

    def __init__(self) -> None:
        self._entries: dict[str, ApprovalEntry] = {}
        #: call_id -> the approval_id of its newest request
        self._by_call: dict[str, str] = {}

    def feed(self, events: Iterable[Event]) -> ApprovalFold:
        entries, by_call = self._entries, self._by_call
        for event in events:
            # ``type(...) is`` and ``cast``: a pydantic model's isinstance goes through ABCMeta
            kind = type(event)
            if kind is ApprovalRequested:
                event = cast(ApprovalRequested, event)
                older = by_call.get(event.call_id)
                if older is not None:
                    entries[older] = _with(entries[older], replaced=True)
                entries[event.approval_id] = ApprovalEntry(event)
                by_call[event.call_id] = event.approval_id
            elif kind is ApprovalDecided:
                event = cast(ApprovalDecided, event)
                entry = entries.get(event.approval_id)
                if entry is not None and entry.decision is None:
                    entries[event.approval_id] = _with(entry, decision=event)
            elif kind is ToolStart or kind is ToolBlocked:
                event = cast(ToolStart | ToolBlocked, event)
                approval_id = by_call.get(event.call_id or "")
                if approval_id is not None:
                    entries[approval_id] = _with(entries[approval_id], used=True)
        return self

    def entries(self) -> list[ApprovalEntry]:
        """Every request, in the order they were made."""
        return list(self._entries.values())

    def actionable(self) -> list[ApprovalEntry]:
        return [entry for entry in self._entries.values() if entry.actionable]

    def copy(self) -> ApprovalFold:
        twin = ApprovalFold()
        twin._entries = dict(self._entries)
        twin._by_call = dict(self._by_call)
        return twin


def _with(entry: ApprovalEntry, **changes: Any) -> ApprovalEntry:
    fields = {
        "request": entry.request,
        "decision": entry.decision,
        "used": entry.used,
        "replaced": entry.replaced,
    }
    return ApprovalEntry(**{**fields, **changes})


def fold_approvals(events: Iterable[Event]) -> list[ApprovalEntry]:
    """A turn's approval requests, in the order they were made, each with what became of it."""
    return ApprovalFold().feed(events).entries()
