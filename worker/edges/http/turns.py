"""``/v1/turns``: enqueue a turn, read its status, journal and live events, Continue and Stop it.
Deciding one of its approval requests is ``decisions``' (another token may do that).

Writes go through the same lifecycle service as the CLI and the tasks, in FastAPI's thread pool;
reads and the event stream use ``redis.asyncio``. A request that is rejected writes nothing to
the ledger: every check runs before the first write.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import suppress
from typing import Annotated

import redis
from fastapi import APIRouter, Depends, Header, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from starlette.exceptions import HTTPException

from ledger import keys
from ledger.approvals import fold_approvals
from ledger.codec import text
from ledger.events import Event
from ledger.ids import ID, STREAM_ID_RULE, is_stream_id
from ledger.journal import build_journal
from ledger.turn import continue_refusal
from ledger.usage import UsageFold
from worker.edges.http.deps import RT, Reader, TurnId, authorize, meta_of, runtime_of
from worker.edges.http.models import admit_model
from worker.edges.http.schemas import (
    CREATE_ERRORS,
    ERRORS,
    QUEUE_FULL,
    TURN_ERRORS,
    WRITE_ERRORS,
    Accepted,
    ApprovalOut,
    AwaitedCall,
    ContinueRequest,
    ForkCreated,
    ForkRequest,
    JournalOut,
    OutputAccepted,
    ToolOutputRequest,
    TurnCreated,
    TurnRequest,
    TurnStatus,
    UsageOut,
    journal_call,
)
from worker.edges.http.sse import LiveStream, admit_stream, event_stream
from worker.edges.http.tenants import TenantHeader, tenant_of

#: a stream id as a client may give it (the OpenAPI document's form)
#: bytes: the largest request body accepted
MAX_BODY_BYTES = 256 * 1024
#: seconds an Idempotency-Key is remembered beyond DRES_FINISHED_TTL_S: a stopped turn can be
#: continued as long as its keys live, and its call_agent retry must still find the child turn
#: its key made there (docs/semantics.md)
IDEMPOTENCY_MARGIN_S = 24 * 3600


def _body_hash(body: TurnRequest) -> str:
    return hashlib.sha256(body.model_dump_json().encode()).hexdigest()


router = APIRouter(
    prefix="/v1/turns", dependencies=[Depends(authorize)], responses={**ERRORS, **TURN_ERRORS}
)


@router.post(
    "",
    status_code=202,
    response_model=TurnCreated,
    responses={**WRITE_ERRORS, **CREATE_ERRORS, **QUEUE_FULL},
)
def create_turn(
    rt: RT,
    body: TurnRequest,
    idempotency_key: Annotated[str | None, Header(pattern=ID)] = None,
    # the caller's trace context (W3C): the turn's trace is its child; a malformed one is ignored
    traceparent: Annotated[str | None, Header()] = None,
    dres_tenant: TenantHeader = None,
) -> TurnCreated:
    """Enqueue a turn; a repeated Idempotency-Key with the same body returns the same turn.
    429 (``Retry-After``) when its tenant has DRES_TENANT_MAX_QUEUED turns queued."""
    # the tenant is the body's, as if the header's had been written there: a repeat naming it
    # either way is the same request (docs/http-api.md, "Tenants": the header wins)
    body = body.model_copy(update={"tenant": tenant_of(body.tenant, dres_tenant)})
    admit_model(rt, body.model)  # before anything reads a file the spec names
    if body.conversation_id and rt.lifecycle.store.conversations.erased(body.conversation_id):
        raise HTTPException(
            409, f"conversation {body.conversation_id!r} was deleted: start a new one"
        )
    if not idempotency_key:
        turn = rt.lifecycle.enqueue(
            body.message,
            conversation_id=body.conversation_id,
            mode=body.mode,
            model=body.model,
            trace_parent=traceparent,
            message_id=body.message_id,
            double_text=body.double_text,
            tenant=body.tenant,
            loop=body.loop,
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
        turn = rt.lifecycle.enqueue(
            body.message,
            conversation_id=conversation_id,
            mode=body.mode,
            model=body.model,
            turn_id=turn_id,
            trace_parent=traceparent,
            message_id=body.message_id,
            double_text=body.double_text,
            tenant=body.tenant,
            loop=body.loop,
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
    # The turn's usage is kept in its metadata as its model_done events are appended; only a
    # turn recorded before that, or one with approvals (folded from their events), reads its stream.
    events: list[Event] = []
    if meta.approvals or meta.usage is None:
        events = await run_in_threadpool(runtime_of(request).ledger.events, turn_id)
    approvals: list[ApprovalOut] = []
    if meta.approvals:
        approvals = [ApprovalOut(**entry.as_dict()) for entry in fold_approvals(events)]
    usage = meta.usage if meta.usage is not None else UsageFold().feed(events).spent()
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
        usage=UsageOut(**usage.model_dump()),
        waiting_for=meta.waiting_for,
        wake_at=meta.wake_at if meta.waiting_for == "timer" else None,
        awaiting=[AwaitedCall(call_id=c, tool=t) for c, t in meta.pending_calls],
        tenant=meta.tenant,
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
    # a bad one, not the start (a client that sends it lost its place); exactly N-N, each part a
    # 64-bit number, or Redis refuses it mid-stream
    named = ((last_event_id, "Last-Event-ID"), (after, "after"))
    given = [(value, name) for value, name in named if value is not None]
    for value, name in given:
        if not is_stream_id(value):
            raise HTTPException(422, f"{name}: not a stream id: {value!r} ({STREAM_ID_RULE})")
    start = given[0][0] if given else "0-0"
    streams = admit_stream(request)
    try:
        async with streams.reads:
            await meta_of(reader, turn_id)
    except BaseException:
        streams.release()
        raise
    return LiveStream(event_stream(streams, request, turn_id, start), streams.release)


@router.post(
    "/{turn_id}/continue", status_code=202, response_model=Accepted, responses=WRITE_ERRORS
)
def continue_turn(rt: RT, turn_id: TurnId, body: ContinueRequest) -> Accepted:
    outcome = rt.lifecycle.continue_turn(turn_id, auto=body.auto)
    if not outcome.ok:
        raise HTTPException(409, outcome.reason)
    return Accepted(turn_id=turn_id, detail=outcome.reason, run_id=outcome.run_id)


@router.post(
    "/{turn_id}/fork",
    status_code=202,
    response_model=ForkCreated,
    responses={**WRITE_ERRORS, **QUEUE_FULL},
)
def fork_turn(
    rt: RT,
    turn_id: TurnId,
    body: ForkRequest,
    traceparent: Annotated[str | None, Header()] = None,
    dres_tenant: TenantHeader = None,
) -> ForkCreated:
    """A new turn at this one (regenerate, or edit with ``message``): it replaces this turn and
    every later one of its conversation and inherits their journal, so a write they completed
    is not done again (docs/semantics.md). Its tenant is the ``Dres-Tenant`` header's, else the
    source turn's."""
    admit_model(rt, body.model)
    forked = rt.lifecycle.fork(
        turn_id,
        message=body.message,
        model=body.model,
        conversation=body.conversation,
        trace_parent=traceparent,
        tenant=dres_tenant,
    )
    return ForkCreated(
        turn_id=forked.turn_id,
        conversation_id=forked.conversation_id,
        replaces=list(forked.replaces),
        events_url=f"/v1/turns/{forked.turn_id}/events",
    )


@router.post(
    "/{turn_id}/tool-outputs/{call_id}",
    status_code=202,
    response_model=OutputAccepted,
    responses=WRITE_ERRORS,
)
def tool_output(
    rt: RT,
    turn_id: TurnId,
    call_id: Annotated[str, Path(pattern=ID, description="the call's id (its tool_start's)")],
    body: ToolOutputRequest,
) -> OutputAccepted:
    """A client's output of a call of a tool it runs, which the turn waits on: recorded once
    as the call's result, and the turn resumes once nothing else is awaited. 409 (naming what
    the turn waits on) when it does not wait on that call, or its output was recorded before."""
    answered = rt.lifecycle.answer(turn_id, call_id, body.output, is_error=body.is_error)
    if not answered.ok:
        raise HTTPException(409, answered.detail)
    return OutputAccepted(
        turn_id=turn_id, call_id=call_id, detail=answered.detail, run_id=answered.run_id
    )


@router.post("/{turn_id}/stop", status_code=202, response_model=Accepted, responses=WRITE_ERRORS)
def stop_turn(rt: RT, turn_id: TurnId) -> Accepted:
    outcome = rt.lifecycle.stop(turn_id)
    if not outcome.ok:
        raise HTTPException(409, outcome.reason)
    return Accepted(turn_id=turn_id, detail=outcome.reason)


def _created(turn_id: str, conversation_id: str) -> TurnCreated:
    return TurnCreated(
        turn_id=turn_id, conversation_id=conversation_id, events_url=f"/v1/turns/{turn_id}/events"
    )
