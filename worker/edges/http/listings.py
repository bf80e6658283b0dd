"""``/v1/approvals`` and ``/v1/conversations``: the listings across turns, paged newest first,
a conversation's turns, and erasing a conversation."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Query, Response
from starlette.exceptions import HTTPException

from ledger.approvals import request_fields
from ledger.ids import ID
from ledger.paging import CURSOR_PATTERN, encode_cursor
from ledger.turn import continue_refusal
from worker.edges.http.deps import RT, authorize
from worker.edges.http.schemas import (
    ERRORS,
    WRITE_ERRORS,
    ApprovalList,
    ApprovalOut,
    ConversationDetail,
    ConversationList,
    ConversationOut,
    ConversationTurn,
)

approvals_router = APIRouter(
    prefix="/v1/approvals", dependencies=[Depends(authorize)], responses=ERRORS
)
conversations_router = APIRouter(
    prefix="/v1/conversations", dependencies=[Depends(authorize)], responses=ERRORS
)
#: a page's ``next_cursor``: the ledger's own form (a score of at most 20 digits, a member), so a
#: malformed one is a 422 before anything reads it (the ledger refuses one too: ``BadCursor``)
Cursor = Annotated[str | None, Query(pattern=CURSOR_PATTERN, description="a page's next_cursor")]


@approvals_router.get("", response_model=ApprovalList)
def list_approvals(
    rt: RT,
    status: Annotated[
        Literal["pending"], Query(description="which requests: pending (not yet decided)")
    ] = "pending",
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Cursor = None,
) -> ApprovalList:
    """Open approval requests across turns, newest first, paged."""
    found, nxt = rt.lifecycle.store.approvals.page(limit=limit, cursor=cursor)
    return ApprovalList(
        items=[ApprovalOut(**request_fields(r)) for r in found],
        next_cursor=None if nxt is None else encode_cursor(nxt),
    )


ConversationId = Annotated[str, Path(pattern=ID, description="the conversation's id")]


@conversations_router.get("", response_model=ConversationList)
def list_conversations(
    rt: RT,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Cursor = None,
) -> ConversationList:
    """Conversations, most recently updated first (newest message or Continue), paged; each
    with its newest turn's status now. One whose newest turn's keys expired is gone."""
    found, nxt = rt.lifecycle.store.conversations.page(limit=limit, cursor=cursor)
    items = [
        ConversationOut(
            conversation_id=c.conversation_id,
            title=c.title,
            updated_at=c.updated_at,
            turn_id=c.newest.turn_id,
            status=c.newest.status.value,
        )
        for c in found
    ]
    return ConversationList(items=items, next_cursor=None if nxt is None else encode_cursor(nxt))


@conversations_router.get("/{conversation_id}", response_model=ConversationDetail)
def conversation(rt: RT, conversation_id: ConversationId) -> ConversationDetail:
    """The conversation's turns in order, each with its message, status and whether Continue
    is allowed now."""
    found = rt.lifecycle.store.conversations.get(conversation_id)
    if found is None:
        raise HTTPException(404, f"unknown conversation {conversation_id!r}")
    max_auto = rt.settings.max_auto_continue
    turns = [
        ConversationTurn(
            turn_id=meta.turn_id,
            message=message,
            message_id=meta.message_id or None,
            replaced_by=meta.replaced_by or None,
            status=meta.status.value,
            code=meta.code,
            can_continue=continue_refusal(
                meta, newest_turn=found.newest_turn, auto=False, max_auto=max_auto
            )
            is None,
        )
        for meta, message in found.turns
    ]
    return ConversationDetail(conversation_id=conversation_id, title=found.title, turns=turns)


@conversations_router.delete("/{conversation_id}", status_code=204, responses=WRITE_ERRORS)
def delete_conversation(rt: RT, conversation_id: ConversationId) -> Response:
    """Erase the conversation for good (a user's request to delete it): every turn's ledger,
    metadata and index entries, its list and its place in the listing. 409 while a turn of it
    is queued, running, resuming or waiting (stop it first)."""
    erased = rt.lifecycle.store.conversations.erase(conversation_id)
    if not erased.known:
        raise HTTPException(404, f"unknown conversation {conversation_id!r}")
    if not erased.ok:
        raise HTTPException(
            409,
            f"turn {erased.blocking} of the conversation is {erased.status}: stop it or let it "
            "end before deleting the conversation",
        )
    return Response(status_code=204)
