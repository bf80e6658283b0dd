"""``GET /v1/chat/{id}/messages``: a conversation as the AI SDK's ``UIMessage`` list, for
``useChat``'s initial messages (docs/chat.md); the fold is ``worker.edges.http.uimessages``.

It reads every turn of the conversation whole (its metadata and all its events, one paged read
a turn): what it costs grows with the conversation, as loading a chat's history does.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path
from starlette.exceptions import HTTPException

from ledger.ids import ID
from ledger.turn import TurnStatus
from worker.edges.http.deps import RT, authorize
from worker.edges.http.schemas import ERRORS, UIMessageOut
from worker.edges.http.uimessages import TurnRecord, UIMessage, conversation_messages

router = APIRouter(prefix="/v1/chat", dependencies=[Depends(authorize)], responses=ERRORS)


@router.get(
    "/{chat_id}/messages", response_model=list[UIMessageOut], response_model_exclude_unset=True
)
def chat_messages(
    rt: RT,
    chat_id: Annotated[str, Path(pattern=ID, description="the chat's id: the conversation id")],
) -> list[UIMessage]:
    """The conversation as the AI SDK's ``UIMessage`` list: each user message (its id the
    turn's ``message_id``) and each turn's answer (its id the turn id; turns a fork replaced
    left out), its parts what the turn's stream builds; a live turn as far as it has got."""
    found = rt.lifecycle.store.conversations.get(chat_id)
    if found is None:
        raise HTTPException(404, f"unknown conversation {chat_id!r}")
    return conversation_messages(
        TurnRecord(
            turn_id=meta.turn_id,
            message_id=meta.message_id,
            message=message,
            events=() if meta.replaced_by else rt.ledger.events(meta.turn_id),
            replaced_by=meta.replaced_by,
            waiting=meta.status == TurnStatus.WAITING,
        )
        for meta, message in found.turns
    )
