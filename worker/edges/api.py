"""The HTTP API (CONTRACT §10): FastAPI, JSON errors with a ``detail``, live events over SSE.

Writes (enqueue, Continue, Stop) go through the same ``Runtime`` as the CLI and the tasks, in
FastAPI's thread pool; reads and the event stream use ``redis.asyncio``. A request that is
rejected writes nothing to the ledger: every check runs before the first write. Every Redis
client here fails fast, so an unreachable or full store is answered at once with 503 or 507
(``api_faults``) instead of being waited out.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Annotated, Literal

import redis
import redis.asyncio as aioredis
from fastapi import APIRouter, Depends, FastAPI, Header, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ledger import keys
from ledger.approvals import fold_approvals, request_fields
from ledger.codec import text
from ledger.errors import CorruptTurn, UnknownTurn
from ledger.journal import build_journal
from ledger.turn import TurnMeta, continue_refusal
from worker.base.errors import ConfigError
from worker.base.settings import Settings
from worker.edges.api_document import STREAM_ID_PATTERN, install_document, operation_id
from worker.edges.api_faults import add_fault_handlers, healthz
from worker.edges.api_models import admit_model, check_allow_list
from worker.edges.api_schemas import (
    ERRORS,
    HEALTH_ERRORS,
    ID,
    WRITE_ERRORS,
    Accepted,
    ApprovalList,
    ApprovalOut,
    ContinueRequest,
    ConversationDetail,
    ConversationList,
    ConversationOut,
    ConversationTurn,
    DecisionOut,
    DecisionRequest,
    JournalOut,
    TurnCreated,
    TurnRequest,
    TurnStatus,
    journal_call,
)
from worker.edges.client import enqueue
from worker.edges.metrics_http import serve_metrics
from worker.edges.page import router as page_router
from worker.edges.runtime import API_STORE_TIMEOUT_S, Runtime, ledger_reader
from worker.edges.sse import SSE_KEEPALIVE_S, event_stream

#: a stream id as a client may give it (the OpenAPI document's form)
STREAM_ID_FORM = re.compile(STREAM_ID_PATTERN)
#: bytes: the largest request body accepted
MAX_BODY_BYTES = 256 * 1024
#: seconds an Idempotency-Key is remembered beyond DRES_FINISHED_TTL_S: a stopped turn can be
#: continued as long as its keys live, and its call_agent retry must still find the child turn
#: its key made there (CONTRACT §7.9)
IDEMPOTENCY_MARGIN_S = 24 * 3600


def _body_hash(body: TurnRequest) -> str:
    return hashlib.sha256(body.model_dump_json().encode()).hexdigest()


def create_api(settings: Settings, runtime: Runtime | None = None) -> FastAPI:
    api = FastAPI(
        title="dres",
        version="1",
        description="Durable resume for agent turns",
        lifespan=_lifespan,
        generate_unique_id_function=operation_id,
    )
    check_allow_list(settings)  # a bad DRES_MODELS fails at start
    api.state.settings = settings
    api.state.rt = runtime or Runtime.for_api(settings)
    api.state.reader = ledger_reader(settings, socket_timeout=API_STORE_TIMEOUT_S)
    # the event streams' XREAD BLOCK waits up to SSE_KEEPALIVE_S for news
    api.state.tail = ledger_reader(settings, socket_timeout=SSE_KEEPALIVE_S + 30)
    api.add_middleware(BodyLimit)
    api.add_exception_handler(HTTPException, http_error)  # type: ignore[arg-type]
    api.add_exception_handler(RequestValidationError, invalid)  # type: ignore[arg-type]
    api.add_exception_handler(UnknownTurn, unknown)  # type: ignore[arg-type]
    api.add_exception_handler(CorruptTurn, corrupt)  # type: ignore[arg-type]
    api.add_exception_handler(ConfigError, bad_config)  # type: ignore[arg-type]
    add_fault_handlers(api)
    api.include_router(router)
    api.include_router(approvals_router)
    api.include_router(conversations_router)
    api.include_router(page_router)
    api.add_api_route("/healthz", healthz, methods=["GET"], responses=HEALTH_ERRORS)
    install_document(api, settings)
    # behind the token when one is set (Prometheus scrapes with a bearer token); Prometheus text,
    # not JSON, so not in the OpenAPI schema
    api.add_api_route(
        "/metrics",
        serve_metrics,
        methods=["GET"],
        dependencies=[Depends(authorize)],
        include_in_schema=False,
    )

    return api


@asynccontextmanager
async def _lifespan(api: FastAPI) -> AsyncIterator[None]:
    yield
    await api.state.reader.aclose()
    await api.state.tail.aclose()


async def authorize(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> None:
    token = request.app.state.settings.api_token
    if not token:
        return
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), token.encode()):
        raise HTTPException(401, "a valid bearer token is required", {"WWW-Authenticate": "Bearer"})


router = APIRouter(prefix="/v1/turns", dependencies=[Depends(authorize)], responses=ERRORS)
approvals_router = APIRouter(
    prefix="/v1/approvals", dependencies=[Depends(authorize)], responses=ERRORS
)
conversations_router = APIRouter(
    prefix="/v1/conversations", dependencies=[Depends(authorize)], responses=ERRORS
)


def runtime_of(request: Request) -> Runtime:
    rt: Runtime = request.app.state.rt
    return rt


def reader_of(request: Request) -> aioredis.Redis:
    reader: aioredis.Redis = request.app.state.reader
    return reader


RT = Annotated[Runtime, Depends(runtime_of)]
Reader = Annotated[aioredis.Redis, Depends(reader_of)]
TurnId = Annotated[str, Path(pattern=ID, description="the turn's id")]


class BodyLimit:
    """Refuse a body over MAX_BODY_BYTES: by its Content-Length, or as it arrives (chunked)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = f"request body over {MAX_BODY_BYTES} bytes"
        length = Headers(scope=scope).get("content-length")
        if length and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            await JSONResponse({"detail": too_large}, 413)(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > MAX_BODY_BYTES:
                raise HTTPException(413, too_large)  # answered by ``http_error``
            return message

        await self.app(scope, counted, send)


async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
    headers = exc.headers
    if exc.status_code == 405:
        # Starlette's Allow names the methods of the first route of the path only (GET and
        # DELETE of a conversation are two routes): name every route's
        headers = {**(headers or {}), "Allow": ", ".join(_allowed_methods(request))}
    return JSONResponse({"detail": str(exc.detail)}, exc.status_code, headers=headers)


def _allowed_methods(request: Request) -> list[str]:
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return sorted(methods)


async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    first = exc.errors()[0]
    if first.get("type") == "json_invalid":
        return JSONResponse({"detail": f"malformed JSON body: {first.get('msg')}"}, 400)
    where = ".".join(str(p) for p in first.get("loc", ())) or "request"
    return JSONResponse({"detail": f"{where}: {first.get('msg')}"}, 422)


async def bad_config(request: Request, exc: ConfigError) -> JSONResponse:
    """A request naming something unusable, such as a model spec with no script file."""
    return JSONResponse({"detail": str(exc)}, 422)


async def unknown(request: Request, exc: UnknownTurn) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, 404)


async def corrupt(request: Request, exc: CorruptTurn) -> JSONResponse:
    """A turn whose metadata is not a turn's: said as it is, never guessed at."""
    return JSONResponse({"detail": str(exc)}, 500)


async def meta_of(reader: aioredis.Redis, turn_id: str) -> TurnMeta:
    raw = await reader.hgetall(keys.turn_meta(turn_id))
    if not raw:
        raise UnknownTurn(turn_id)
    return TurnMeta.from_hash(turn_id, raw)


@router.post("", status_code=202, response_model=TurnCreated, responses=WRITE_ERRORS)
def create_turn(
    rt: RT,
    body: TurnRequest,
    idempotency_key: Annotated[str | None, Header(pattern=ID)] = None,
) -> TurnCreated:
    """Enqueue a turn; a repeated Idempotency-Key with the same body returns the same turn."""
    admit_model(rt, body.model)  # before anything reads a file the spec names
    if body.conversation_id and rt.lifecycle.store.conversations.erased(body.conversation_id):
        raise HTTPException(
            409, f"conversation {body.conversation_id!r} was deleted: start a new one"
        )
    if not idempotency_key:
        turn = enqueue(
            rt, body.message, conversation_id=body.conversation_id, mode=body.mode, model=body.model
        )
        return _created(turn.turn_id, turn.conversation_id)
    # The record names the turn and its conversation before the turn exists, so a repeat that
    # races the first request answers from the record alone.
    turn_id = rt.ids.new("turn")
    conversation_id = body.conversation_id or rt.ids.new("conv")
    record = {"hash": _body_hash(body), "turn_id": turn_id, "conversation_id": conversation_id}
    key = keys.idempotency(idempotency_key)
    ttl = rt.settings.finished_ttl_s + IDEMPOTENCY_MARGIN_S
    if not rt.redis.set(key, json.dumps(record), nx=True, ex=ttl):
        seen = json.loads(rt.redis.get(key) or "{}")
        if seen.get("hash") != record["hash"]:
            raise HTTPException(409, "Idempotency-Key was used with a different body")
        return _created(seen["turn_id"], seen["conversation_id"])
    try:
        turn = enqueue(
            rt,
            body.message,
            conversation_id=conversation_id,
            mode=body.mode,
            model=body.model,
            turn_id=turn_id,
        )
    except BaseException:
        # No turn was made (or it was taken back): the key must not answer for one. Redis may be
        # gone: then the key stays, and a repeat answers for the turn if it was made after all.
        with suppress(redis.RedisError):
            if not rt.redis.exists(keys.turn_meta(turn_id)):
                rt.redis.delete(key)
        raise
    return _created(turn.turn_id, turn.conversation_id)


@router.get("/{turn_id}", response_model=TurnStatus)
async def turn_status(request: Request, reader: Reader, turn_id: TurnId) -> TurnStatus:
    meta = await meta_of(reader, turn_id)
    newest = await reader.lindex(keys.conversation_turns(meta.conversation_id or "_"), -1)
    refusal = continue_refusal(
        meta,
        newest_turn=None if newest is None else text(newest),
        auto=False,
        max_auto=runtime_of(request).settings.max_auto_continue,
    )
    approvals: list[ApprovalOut] = []
    if meta.approvals:  # only a turn that waited reads its stream for them
        events = await run_in_threadpool(runtime_of(request).ledger.events, turn_id)
        approvals = [ApprovalOut(**entry.as_dict()) for entry in fold_approvals(events)]
    return TurnStatus(
        turn_id=turn_id,
        conversation_id=meta.conversation_id,
        status=meta.status.value,
        mode=meta.mode,
        runs=meta.runs,
        chunk=meta.chunk,
        auto_continues=meta.auto_continues,
        can_continue=refusal is None,
        code=meta.code,
        approvals=approvals,
    )


@router.get("/{turn_id}/journal", response_model=JournalOut)
def journal(rt: RT, turn_id: TurnId) -> JournalOut:
    rt.ledger.meta(turn_id)
    built = build_journal(rt.ledger.events(turn_id))
    return JournalOut(
        turn_id=turn_id,
        completed=[journal_call(e) for e in built.completed],
        interrupted=[journal_call(e) for e in built.interrupted],
    )


@router.get("/{turn_id}/events", response_class=StreamingResponse)
async def events(
    request: Request,
    reader: Reader,
    turn_id: TurnId,
    after: Annotated[str | None, Query(description="replay after this stream id")] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> StreamingResponse:
    """Server-Sent Events: every ledger event with its stream id as the SSE ``id``."""
    # the header wins over ?after=, but each one given must be a stream id: given but empty is
    # a bad one, not the start (a client that sends it lost its place)
    given = [value for value in (last_event_id, after) if value is not None]
    for value in given:
        # each part of a stream id is a 64-bit number: Redis refuses a larger one mid-stream
        if not STREAM_ID_FORM.match(value):
            raise HTTPException(
                400, f"not a stream id: {value!r} (expected like 3-14, at most 19 digits a part)"
            )
    start = given[0] if given else "0-0"
    if "-" not in start:
        start += "-0"  # as Redis reads an id without its sequence number
    await meta_of(reader, turn_id)
    return StreamingResponse(
        event_stream(request.app.state.tail, request, turn_id, start),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.post(
    "/{turn_id}/continue", status_code=202, response_model=Accepted, responses=WRITE_ERRORS
)
def continue_turn(rt: RT, turn_id: TurnId, body: ContinueRequest) -> Accepted:
    outcome = rt.lifecycle.continue_turn(turn_id, auto=body.auto)
    if not outcome.ok:
        raise HTTPException(409, outcome.reason)
    return Accepted(turn_id=turn_id, detail=outcome.reason, run_id=outcome.run_id)


@router.post("/{turn_id}/stop", status_code=202, response_model=Accepted, responses=WRITE_ERRORS)
def stop_turn(rt: RT, turn_id: TurnId) -> Accepted:
    outcome = rt.lifecycle.stop(turn_id)
    if not outcome.ok:
        raise HTTPException(409, outcome.reason)
    return Accepted(turn_id=turn_id, detail=outcome.reason)


@router.post(
    "/{turn_id}/approvals/{approval_id}",
    status_code=202,
    response_model=DecisionOut,
    responses=WRITE_ERRORS,
)
def decide(
    rt: RT,
    turn_id: TurnId,
    approval_id: Annotated[str, Path(pattern=ID, description="the request's id")],
    body: DecisionRequest,
) -> DecisionOut:
    """A person's decision on an approval request (CONTRACT §7.14): taken once, for the
    requested signature only; 409 when it was decided already (the detail says how), when the
    signature is another call's, or when the turn does not wait on it."""
    decided = rt.lifecycle.decide(
        turn_id, approval_id, body.decision, body.signature, reason=body.reason, by=body.by or "api"
    )
    if not decided.ok:
        raise HTTPException(decided.status, decided.detail)
    return DecisionOut(
        turn_id=turn_id,
        approval_id=approval_id,
        decision=body.decision,
        detail=decided.detail,
        run_id=decided.run_id,
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
        str | None, Query(pattern=r"^\d+:.+$", description="a page's next_cursor")
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


def _created(turn_id: str, conversation_id: str) -> TurnCreated:
    return TurnCreated(
        turn_id=turn_id, conversation_id=conversation_id, events_url=f"/v1/turns/{turn_id}/events"
    )
