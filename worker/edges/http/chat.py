"""``POST /v1/chat`` and ``GET /v1/chat/{id}/stream``: the AI SDK's chat protocol, as its
``DefaultChatTransport`` sends and reads it (docs/chat.md).

The chat's id is the conversation id. What a request is, in this order (docs/semantics.md, forks):
``trigger: "regenerate-message"`` forks the turn answering the last user message; a last message of
the assistant's answers the waiting turn (tool parts in state ``approval-responded``: the person's
decisions on its requests; a client tool's part in state ``output-available`` or ``output-error``:
the client's output of that call), and one that carries nothing to take is refused; a last user
message is matched to the conversation's turns by its id: the newest turn's own message again (a
retried request, a second tab) starts nothing, an earlier turn's with other text is an edit (a
fork), any other is a new turn. Either way the answer is the turn's events as UI message chunks
(``worker.edges.http.uichunks``), read through the same live streams as ``GET
/v1/turns/{id}/events`` (``worker.edges.http.sse``) and counted in DRES_MAX_STREAMS.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Annotated, Any, Literal, cast

from fastapi import APIRouter, Depends, Header, Path, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from ledger import keys
from ledger.codec import text
from ledger.events import ClientTool, Event, TurnEnded
from ledger.ids import ID
from ledger.turn import TurnStatus
from worker.base.settings import Settings
from worker.edges.http.answers import Begun, answers_of, dicts, id_of, outputs_of, take
from worker.edges.http.deps import RT, authorize, bearer
from worker.edges.http.fanout import Fanout
from worker.edges.http.models import admit_model
from worker.edges.http.schemas import (
    CREATE_ERRORS,
    ERRORS,
    MAX_MESSAGE_CHARS,
    QUEUE_FULL,
    WRITE_ERRORS,
)
from worker.edges.http.sse import KEEPALIVE, LiveStream, admit_stream, event_stream
from worker.edges.http.tenants import TenantHeader
from worker.edges.http.uichunks import DONE, UIChunks, events_of, sse_data
from worker.edges.runtime import Runtime
from worker.lifecycle.service import NOT_BLANK, Sent, is_blank

#: the header that tells the AI SDK the body is its UI message stream
UI_STREAM_HEADERS = {"x-vercel-ai-ui-message-stream": "v1"}
#: characters of a model spec (as ``POST /v1/turns`` takes it)
MAX_MODEL_CHARS = 500
#: the statuses of a turn a reconnect streams: one that goes on, or one that waits (a page
#: reloaded meanwhile is shown what it waits for, its stream ending there)
RECONNECTS = frozenset(
    {TurnStatus.QUEUED, TurnStatus.RUNNING, TurnStatus.RESUMING, TurnStatus.WAITING}
)
#: the statuses of a turn that ended
ENDED = frozenset({TurnStatus.COMPLETED.value, TurnStatus.STOPPED.value})
#: a request with no user message whose text dres takes
NO_TEXT = (
    422,
    f"messages: the last user message's text must be 1 to {MAX_MESSAGE_CHARS} characters, "
    "not blank",
)


def user_message_schema(text: dict[str, Any]) -> dict[str, Any]:
    """A user message with text, in a message schema whose text is ``text``."""
    return {
        "type": "object",
        "required": ["role"],
        "properties": {"role": {"const": "user"}, **text},
    }


#: a text part's text, as ``POST /v1/turns`` takes a message
TEXT = {"type": "string", "pattern": NOT_BLANK, "maxLength": MAX_MESSAGE_CHARS}
#: a UI message of the user's with a text part
USER_TEXT = user_message_schema(
    {
        "parts": {
            "type": "array",
            "contains": {
                "type": "object",
                "required": ["type", "text"],
                "properties": {"type": {"const": "text"}, "text": TEXT},
            },
        }
    }
)
USER_TEXT["required"] = ["role", "parts"]


class ChatRequest(BaseModel):
    """The body ``DefaultChatTransport`` posts: ``{id, messages, trigger, messageId?}``, plus the
    ``model`` a page may add through its ``body`` option."""

    model_config = ConfigDict(extra="ignore")

    id: str = Field(pattern=ID, description="the chat's id: the conversation id")
    messages: list[dict[str, Any]] = Field(
        min_length=1,
        description="UI messages; the last user message with text is the turn's message",
        json_schema_extra={"contains": USER_TEXT},
    )
    trigger: str = "submit-message"
    messageId: str | None = None
    model: str | None = None
    double_text: Literal["queue", "interrupt", "reject"] | None = Field(
        None, description="what a new message does while a turn of the chat is live"
    )


def text_of(message: dict[str, Any]) -> str:
    """A UI message's text: its text parts, joined (``content`` for an older client)."""
    parts = message.get("parts")
    if isinstance(parts, list):
        return "".join(str(p.get("text", "")) for p in dicts(parts) if p.get("type") == "text")
    return str(message.get("content") or "")


def last_user_text(messages: list[dict[str, Any]], text: Callable[[dict[str, Any]], str]) -> str:
    """The text of the last user message that has any (empty when none has)."""
    said = (text(m) for m in reversed(messages) if m.get("role") == "user")
    return next((t for t in said if not is_blank(t)), "")


async def caller(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> str | None:
    """The token checks before the body is read: an approver's token (who may only decide: its
    NAME), else what every other write wants (the API token when one is set; with none, no
    token, approvers or not: docs/http-api.md, "Who may call"). Which one the request needs is
    known once its messages are: a decision without an approver's token is refused then."""
    settings: Settings = request.app.state.settings
    given = bearer(authorization)
    name = settings.approver_named(given) if settings.approvers and given else None
    if name is not None:
        return name
    await authorize(request, authorization)
    return None


router = APIRouter(prefix="/v1/chat", responses=ERRORS)


@router.post(
    "",
    response_class=StreamingResponse,
    responses={**WRITE_ERRORS, **CREATE_ERRORS, **QUEUE_FULL},
)
async def chat(
    request: Request,
    rt: RT,
    body: ChatRequest,
    approver: Annotated[str | None, Depends(caller)],
    dres_tenant: TenantHeader = None,
) -> Response:
    """A message (a new turn of the conversation ``id``, of the ``Dres-Tenant`` header's
    tenant), or decisions on the waiting turn's requests and outputs of the client calls it
    waits on; the turn streamed as UI message chunks."""
    streams = admit_stream(request)
    try:
        begun = await _begin(request, rt, body, approver, dres_tenant)
    except BaseException:
        streams.release()
        raise
    response = LiveStream(ui_stream(streams, request, begun), streams.release)
    response.headers.update(UI_STREAM_HEADERS)
    return response


async def _begin(
    request: Request, rt: Runtime, body: ChatRequest, approver: str | None, tenant: str | None
) -> Begun:
    last = body.messages[-1]
    regenerate = body.trigger == "regenerate-message"
    message = last_user_text(body.messages, text_of)
    if not regenerate and last.get("role") == "assistant":
        where = f"messages[{len(body.messages) - 1}]"
        answers, outputs = answers_of(last, where), outputs_of(last, where)
        if not answers and not outputs and not message:
            raise HTTPException(*NO_TEXT)
        settings = request.app.state.settings
        return await run_in_threadpool(take, rt, settings, body.id, answers, outputs, approver)
    if approver is not None:
        raise HTTPException(
            403, "an approver's token decides approvals only: a message wants the API token"
        )
    said = Said(
        conversation_id=body.id,
        message=message,
        message_id=message_id_of(last_user(body.messages), "messages"),
        model=body.model,
        trace_parent=request.headers.get("traceparent"),
        regenerate=(body.messageId or True) if regenerate else False,
        double_text=body.double_text,
        tenant=tenant,
    )
    sent = await run_in_threadpool(send_message, rt, said)
    return Begun(sent.turn_id)


@router.get(
    "/{chat_id}/stream",
    response_class=StreamingResponse,
    responses={
        204: {"description": "No turn of the conversation is queued, running, resuming or waiting"}
    },
    dependencies=[Depends(authorize)],
)
async def reconnect(
    request: Request,
    rt: RT,
    chat_id: Annotated[str, Path(pattern=ID, description="the chat's id: the conversation id")],
) -> Response:
    """The conversation's live or waiting turn from its start (the AI SDK's reconnect); 204: no
    turn of it is queued, running, resuming or waiting."""
    turn_id = await run_in_threadpool(_reconnect_turn, rt, chat_id)
    if turn_id is None:
        return Response(status_code=204)
    streams = admit_stream(request)
    response = LiveStream(ui_stream(streams, request, Begun(turn_id)), streams.release)
    response.headers.update(UI_STREAM_HEADERS)
    return response


@dataclass(frozen=True)
class Said:
    """A chat protocol's user message, as its request says it (``send_message``)."""

    conversation_id: str
    message: str
    message_id: str | None
    model: str | None = None
    #: the request's ``traceparent``: the parent of a new turn's trace
    trace_parent: str | None = None
    #: a regenerate: True, or the id of the answer to regenerate
    regenerate: str | bool = False
    double_text: str | None = None
    #: tools the client runs, declared by the request (AG-UI's ``tools``)
    client_tools: tuple[ClientTool, ...] = ()
    #: the ``Dres-Tenant`` header's tenant (None: ``default``; a fork: its source turn's)
    tenant: str | None = None


def send_message(rt: Runtime, said: Said) -> Sent:
    """The message matched to the conversation's turns (``Lifecycle.send``: a new turn, a fork,
    or a repeat of the newest); its checks (as ``POST /v1/turns``' body has) come first."""
    message, model = said.message, said.model
    if is_blank(message) or len(message) > MAX_MESSAGE_CHARS:
        raise HTTPException(*NO_TEXT)
    if model is not None and len(model) > MAX_MODEL_CHARS:
        raise HTTPException(422, f"model: at most {MAX_MODEL_CHARS} characters")
    admit_model(rt, model)
    if rt.lifecycle.store.conversations.erased(said.conversation_id):
        raise HTTPException(
            409, f"conversation {said.conversation_id!r} was deleted: start a new one"
        )
    return rt.lifecycle.send(
        said.conversation_id,
        message,
        message_id=said.message_id,
        regenerate=said.regenerate,
        model=model,
        trace_parent=said.trace_parent,
        double_text=said.double_text,
        client_tools=said.client_tools,
        tenant=said.tenant,
    )


def last_user(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The last message of the user's (an empty one when there is none)."""
    return next((m for m in reversed(messages) if m.get("role") == "user"), {})


def message_id_of(message: dict[str, Any], where: str) -> str | None:
    """A message's client id, when it has one; one that is no id dres takes is a 422."""
    found = message.get("id")
    if found is None or found == "":
        return None
    return id_of(found, where)


def _reconnect_turn(rt: Runtime, conversation_id: str) -> str | None:
    newest = rt.lifecycle.store.conversations.newest_turns(conversation_id, 1)
    if not newest:
        return None
    meta = rt.ledger.meta(newest[0])
    return meta.turn_id if meta.status in RECONNECTS else None


async def turn_waits(streams: Fanout, turn_id: str, run_id: str | None) -> bool:
    """The turn waits now on the end of run ``run_id``: not a wait a replay passes through (it
    was answered since, and the turn went on or waits again on a later run), nor one a partial
    answer left (it waits on the rest)."""
    async with streams.reads:
        status, current = await streams.reader.hmget(keys.turn_meta(turn_id), ["status", "run_id"])
    return (
        status is not None
        and text(status) == TurnStatus.WAITING.value
        and current is not None
        and text(current) == run_id
    )


async def replayed_ends(streams: Fanout, turn_id: str, events: list[Event]) -> set[int]:
    """The positions in ``events`` of the ``turn_ended`` events the turn has gone on from since
    (a Continue): one a later one follows, or one that is not the turn's end now (it is live
    again, or ended otherwise). A stream replaying a continued turn passes through them to the
    runs after, as the ledger does."""
    ends = [i for i, event in enumerate(events) if isinstance(event, TurnEnded)]
    if not ends:
        return set()
    async with streams.reads:
        status, code = await streams.reader.hmget(keys.turn_meta(turn_id), ["status", "code"])
    now = (text(status) if status else "", text(code) if code else "")
    last = events[ends[-1]]
    assert isinstance(last, TurnEnded)
    gone_on = now[0] not in ENDED or now != (last.status, last.code)
    return set(ends if gone_on else ends[:-1])


async def ui_stream(streams: Fanout, request: Request, begun: Begun) -> AsyncIterator[bytes]:
    """The turn after ``begun.start`` as UI message chunks, ``[DONE]`` once it has said all."""
    turn_id = begun.turn_id
    chunks = UIChunks(
        turn_id, announced=begun.announced, spent=begun.spent, waited_run=begun.waited_run
    )
    yield sse_data(chunks.opening())
    # an async generator: closed here, so that the reader is left at once
    follow = cast(AsyncGenerator[bytes], event_stream(streams, request, turn_id, begun.start))
    async with aclosing(follow):
        async for message in follow:
            out = []
            events = events_of(message)
            replayed = await replayed_ends(streams, turn_id, events)
            for i, event in enumerate(events):
                if i not in replayed:
                    out += chunks.map(event)
            if chunks.paused and await turn_waits(streams, turn_id, chunks.waited_run):
                out += chunks.finish_waiting()
            if out:
                yield sse_data(out)
            elif message == KEEPALIVE:
                yield KEEPALIVE
            if chunks.done:
                break
    if chunks.done:
        yield DONE
