"""The HTTP API (CONTRACT §10): FastAPI, JSON errors with a ``detail``, live events over SSE.

Writes (enqueue, Continue, Stop) go through the same ``Runtime`` as the CLI and the tasks, in
FastAPI's thread pool; reads and the event stream use ``redis.asyncio``. A request that is
rejected writes nothing to the ledger: every check runs before the first write.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

import redis
import redis.asyncio as aioredis
from fastapi import APIRouter, Depends, FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from ledger import keys
from ledger.codec import decode_entry
from ledger.errors import EventDecodeError, UnknownTurn
from ledger.journal import JournalEntry, build_journal
from ledger.store import TurnMeta
from worker.client import enqueue
from worker.control import FINISHED
from worker.runtime import Runtime
from worker.settings import Settings

#: bytes: the largest request body accepted
MAX_BODY_BYTES = 256 * 1024
#: characters: the longest user message accepted
MAX_MESSAGE_CHARS = 100_000
#: seconds an Idempotency-Key is remembered
IDEMPOTENCY_TTL_S = 24 * 3600
#: seconds between keepalive comments on an idle event stream
SSE_KEEPALIVE_S = 15.0
STREAM_ID = re.compile(r"^\d+-\d+$")
ID = r"^[A-Za-z0-9_.:-]{1,128}$"
STATUSES = ("queued", "running", "resuming", "completed", "stopped", "failed", "cancelled")


class TurnRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS)
    conversation_id: str | None = Field(None, pattern=ID)
    mode: Literal["foreground", "background"] = "foreground"
    model: str | None = Field(None, max_length=500)


class TurnCreated(BaseModel):
    turn_id: str
    conversation_id: str
    events_url: str


class TurnStatus(BaseModel):
    turn_id: str
    conversation_id: str
    status: Literal["queued", "running", "resuming", "completed", "stopped", "failed", "cancelled"]
    mode: str
    runs: int
    chunk: int
    auto_continues: int
    can_continue: bool
    #: why the turn stopped or failed, e.g. crashed, journal_unreadable
    code: str = ""


class ContinueRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    auto: bool = False


class Accepted(BaseModel):
    turn_id: str
    detail: str
    run_id: str | None = None


class JournalCall(BaseModel):
    tool: str
    call_id: str | None
    input: Any
    signature: str
    result: Any = None


class JournalOut(BaseModel):
    turn_id: str
    completed: list[JournalCall]
    interrupted: list[JournalCall]


class ErrorOut(BaseModel):
    detail: str


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 401, 404, 409, 413, 422)
}


def _call(entry: JournalEntry) -> JournalCall:
    return JournalCall(
        tool=entry.tool,
        call_id=entry.call_id,
        input=entry.input,
        signature=entry.signature,
        result=entry.result,
    )


def _body_hash(body: TurnRequest) -> str:
    return hashlib.sha256(body.model_dump_json().encode()).hexdigest()


def create_api(settings: Settings, runtime: Runtime | None = None) -> FastAPI:
    api = FastAPI(title="dres", version="1", description="Durable resume for agent turns")
    api.state.settings = settings
    api.state.rt = runtime or Runtime.from_settings(settings)
    api.state.reader = aioredis.Redis.from_url(
        settings.redis_url, socket_timeout=SSE_KEEPALIVE_S + 30, socket_connect_timeout=5
    )
    api.middleware("http")(limit_body)
    api.add_exception_handler(HTTPException, http_error)  # type: ignore[arg-type]
    api.add_exception_handler(RequestValidationError, invalid)  # type: ignore[arg-type]
    api.add_exception_handler(UnknownTurn, unknown)  # type: ignore[arg-type]
    api.include_router(router)
    api.add_api_route("/healthz", healthz, methods=["GET"])

    @api.on_event("shutdown")
    async def close() -> None:
        await api.state.reader.aclose()

    return api


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


def runtime_of(request: Request) -> Runtime:
    rt: Runtime = request.app.state.rt
    return rt


def reader_of(request: Request) -> aioredis.Redis:
    reader: aioredis.Redis = request.app.state.reader
    return reader


RT = Annotated[Runtime, Depends(runtime_of)]
Reader = Annotated[aioredis.Redis, Depends(reader_of)]
TurnId = Annotated[str, Path(pattern=ID, description="the turn's id")]


async def limit_body(request: Request, call_next: Any) -> Any:
    length = request.headers.get("content-length")
    if length and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
        return JSONResponse({"detail": f"request body over {MAX_BODY_BYTES} bytes"}, 413)
    return await call_next(request)


async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
    return JSONResponse({"detail": str(exc.detail)}, exc.status_code, headers=exc.headers)


async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    first = exc.errors()[0]
    if first.get("type") == "json_invalid":
        return JSONResponse({"detail": f"malformed JSON body: {first.get('msg')}"}, 400)
    where = ".".join(str(p) for p in first.get("loc", ())) or "request"
    return JSONResponse({"detail": f"{where}: {first.get('msg')}"}, 422)


async def unknown(request: Request, exc: UnknownTurn) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, 404)


async def meta_of(reader: aioredis.Redis, turn_id: str) -> TurnMeta:
    raw = await reader.hgetall(keys.turn_meta(turn_id))
    if not raw:
        raise UnknownTurn(turn_id)
    return TurnMeta.from_hash(turn_id, raw)


@router.post("", status_code=202, response_model=TurnCreated)
def create_turn(
    rt: RT,
    body: TurnRequest,
    idempotency_key: Annotated[str | None, Header(pattern=ID)] = None,
) -> TurnCreated:
    """Enqueue a turn; a repeated Idempotency-Key with the same body returns the same turn."""
    turn_id = None
    if idempotency_key:
        turn_id = rt.ids.new("turn")
        record = json.dumps({"hash": _body_hash(body), "turn_id": turn_id})
        key = keys.idempotency(idempotency_key)
        if not rt.redis.set(key, record, nx=True, ex=IDEMPOTENCY_TTL_S):
            seen = json.loads(rt.redis.get(key) or "{}")
            if seen.get("hash") != _body_hash(body):
                raise HTTPException(409, "Idempotency-Key was used with a different body")
            meta = rt.ledger.meta(seen["turn_id"])
            return _created(seen["turn_id"], meta.extra.get("conversation_id", ""))
    turn = enqueue(
        rt,
        body.message,
        conversation_id=body.conversation_id,
        mode=body.mode,
        model=body.model,
        turn_id=turn_id,
    )
    return _created(turn.turn_id, turn.conversation_id)


@router.get("/{turn_id}", response_model=TurnStatus)
async def turn_status(reader: Reader, turn_id: TurnId) -> TurnStatus:
    meta = await meta_of(reader, turn_id)
    conversation = meta.extra.get("conversation_id", "")
    newest = await reader.lindex(keys.conversation_turns(conversation or "_"), -1)
    is_newest = newest is None or _text(newest) == turn_id
    return TurnStatus(
        turn_id=turn_id,
        conversation_id=conversation,
        status=meta.status if meta.status in STATUSES else "queued",  # type: ignore[arg-type]
        mode=meta.extra.get("mode", "foreground"),
        runs=meta.runs,
        chunk=meta.chunk,
        auto_continues=int(meta.extra.get("auto_continues", 0) or 0),
        can_continue=meta.extra.get("can_continue") == "1" and is_newest,
        code=meta.extra.get("code", ""),
    )


@router.get("/{turn_id}/journal", response_model=JournalOut)
def journal(rt: RT, turn_id: TurnId) -> JournalOut:
    rt.ledger.meta(turn_id)
    built = build_journal(rt.ledger.events(turn_id))
    return JournalOut(
        turn_id=turn_id,
        completed=[_call(e) for e in built.completed],
        interrupted=[_call(e) for e in built.interrupted],
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
    start = last_event_id or after or "0-0"
    if not STREAM_ID.match(start):
        raise HTTPException(400, f"not a stream id: {start!r} (expected like 3-14)")
    await meta_of(reader, turn_id)
    return StreamingResponse(
        _sse(reader, request, turn_id, start),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.post("/{turn_id}/continue", status_code=202, response_model=Accepted)
def continue_turn(rt: RT, turn_id: TurnId, body: ContinueRequest) -> Accepted:
    outcome = rt.control.continue_turn(turn_id, auto=body.auto)
    if not outcome.ok:
        raise HTTPException(409, outcome.reason)
    return Accepted(turn_id=turn_id, detail=outcome.reason, run_id=outcome.run_id)


@router.post("/{turn_id}/stop", status_code=202, response_model=Accepted)
def stop_turn(rt: RT, turn_id: TurnId) -> Accepted:
    outcome = rt.control.stop(turn_id)
    if not outcome.ok:
        raise HTTPException(409, outcome.reason)
    return Accepted(turn_id=turn_id, detail=outcome.reason)


async def healthz(request: Request) -> JSONResponse:
    """Redis and broker reachability."""
    checks = {"redis": "ok", "broker": "ok"}
    try:
        await reader_of(request).ping()
    except redis.RedisError as e:
        checks["redis"] = f"unreachable: {e}"
    try:
        await run_in_threadpool(_broker_ping, runtime_of(request))
    except Exception as e:  # kombu raises many kinds; any of them means unreachable
        checks["broker"] = f"unreachable: {e}"
    ok = all(v == "ok" for v in checks.values())
    return JSONResponse(checks, 200 if ok else 503)


def _created(turn_id: str, conversation_id: str) -> TurnCreated:
    return TurnCreated(
        turn_id=turn_id, conversation_id=conversation_id, events_url=f"/v1/turns/{turn_id}/events"
    )


def _broker_ping(rt: Runtime) -> None:
    with rt.app.connection_for_write() as connection:
        connection.ensure_connection(max_retries=1, timeout=2)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def _sse(
    reader: aioredis.Redis, request: Request, turn_id: str, start: str
) -> AsyncIterator[bytes]:
    """Replay after ``start``, then follow live; close after ``turn_ended``."""
    stream = keys.turn_events(turn_id)
    last = start
    block: int | None = None  # the first read replays without waiting
    while True:
        reply = await reader.xread({stream: last}, count=200, block=block)
        entries = [entry for _, batch in (reply or []) for entry in batch]
        ended = False
        for stream_id, fields in entries:
            last = _text(stream_id)
            try:
                envelope = decode_entry(stream_id, fields)
            except EventDecodeError:
                continue  # malformed entries are skipped by every reader
            data = envelope.event.model_dump_json()
            yield f"id: {last}\nevent: {envelope.event.type}\ndata: {data}\n\n".encode()
            ended = ended or envelope.event.type == "turn_ended"
        if ended:
            return
        if not entries:
            status = await reader.hget(keys.turn_meta(turn_id), "status")
            if status is None or _text(status) in FINISHED | {"stopped"}:
                return
            if block is not None:
                yield b": keepalive\n\n"
        if await request.is_disconnected():
            return
        block = int(SSE_KEEPALIVE_S * 1000)
