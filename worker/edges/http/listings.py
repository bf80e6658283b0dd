"""``/v1/approvals`` and ``/v1/conversations``: the listings across turns, paged newest first,
a conversation's turns, and erasing a conversation."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Query, Response
from starlette.exceptions import HTTPException

from ledger.approvals import request_fields
from ledger.turn import continue_refusal
from worker.edges.http.deps import RT, authorize
from worker.edges.http.schemas import (
    ERRORS,
    ID,
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


@approvals_router.get("", response_model=ApprovalList)
def list_approvals(
    rt: RT,
    status: Annotated[
        Literal["pending"], Query(description="which requests: pending (not yet decided)")
    ] = "pending",
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[
        # a request's score (ms) and member (turn_id/approval_id): bounded, so no digits
        # beyond what int() reads and Redis keeps
        str | None, Query(pattern=r"^\d{1,18}:.{1,300}$", description="a page's next_cursor")
    ] = None,
) -> ApprovalList:
    """Open approval requests across turns, newest first, paged."""
    after = None
    if cursor is not None:
        score, _, member = cursor.partition(":")
        after = (int(score), member)
    found, nxt = rt.lifecycle.store.open_approvals(limit=limit, cursor=after)
    return ApprovalList(
        items=[ApprovalOut(**request_fields(r)) for r in found],
        next_cursor=None if nxt is None else f"{nxt[0]}:{nxt[1]}",
    )


ConversationId = Annotated[str, Path(pattern=ID, description="the conversation's id")]


@conversations_router.get("", response_model=ConversationList)
def list_conversations(
    rt: RT,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[
        # a conversation's score (ms) and id: bounded as the approvals' cursor, so a long run
        # of digits is a 422, not an int() that Python refuses (a 500)
        str | None, Query(pattern=r"^\d{1,18}:.{1,300}$", description="a page's next_cursor")
    ] = None,
) -> ConversationList:
    """Conversations, most recently updated first (newest message or Continue), paged; each
    with its newest turn's status now. One whose newest turn's keys expired is gone."""
    after = None
    if cursor is not None:
        score, _, conversation_id = cursor.partition(":")
        after = (int(score), conversation_id)
    found, nxt = rt.lifecycle.store.conversations.page(limit=limit, cursor=after)
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
    return ConversationList(items=items, next_cursor=None if nxt is None else f"{nxt[0]}:{nxt[1]}")


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
