"""``POST /v1/ag-ui``: the AG-UI protocol (docs/chat.md). A ``RunAgentInput`` whose thread is the
conversation: its last user message is a new turn, or its ``resume`` entries are the person's
decisions on the waiting turn's requests; the answer is the turn as AG-UI events over SSE
(``worker.edges.http.aguievents``), read as ``worker.edges.http.chat`` reads it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Annotated, Any, Literal, cast

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from worker.edges.http.aguievents import AguiEvents
from worker.edges.http.chat import (
    TEXT,
    Answer,
    caller,
    decide_answers,
    enqueue_message,
    last_user_text,
    user_message_schema,
)
from worker.edges.http.deps import RT
from worker.edges.http.fanout import Fanout
from worker.edges.http.schemas import CREATE_ERRORS, ERRORS, ID, WRITE_ERRORS
from worker.edges.http.sse import KEEPALIVE, LiveStream, admit_stream, event_stream
from worker.edges.http.uichunks import events_of, sse_data
from worker.edges.runtime import Runtime


class ResumeEntry(BaseModel):
    model_config = ConfigDict(extra="ignore")

    interruptId: str = Field(pattern=ID)
    status: Literal["resolved", "cancelled"]
    payload: Any = None


class RunAgentInput(BaseModel):
    """The body an AG-UI client posts (``HttpAgent``); what dres does not use is ignored."""

    model_config = ConfigDict(extra="ignore")

    threadId: str = Field(pattern=ID, description="the thread's id: the conversation id")
    runId: str = Field(min_length=1, max_length=128)
    messages: list[dict[str, Any]] = Field(
        description="the thread's messages; the last user message with text is the turn's",
        json_schema_extra={
            "contains": user_message_schema({"content": TEXT}) | {"required": ["role", "content"]}
        },
    )
    forwardedProps: dict[str, Any] | None = Field(
        None, description="``model``: a model spec (as ``POST /v1/turns`` takes it)"
    )
    resume: list[ResumeEntry] | None = None


def answer_of(entry: ResumeEntry) -> Answer:
    """``resolved`` with ``payload.approved`` true approves; anything else denies."""
    payload = entry.payload if isinstance(entry.payload, dict) else {}
    approved = entry.status == "resolved" and payload.get("approved") is True
    reason = payload.get("reason") or ("cancelled" if entry.status == "cancelled" else "")
    return Answer(entry.interruptId, approved, str(reason))


def message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        parts = [p for p in content if isinstance(p, dict)]
        return "".join(str(p.get("text", "")) for p in parts if p.get("type") == "text")
    return str(content or "")


router = APIRouter(prefix="/v1/ag-ui", responses=ERRORS)


@router.post("", response_class=StreamingResponse, responses={**WRITE_ERRORS, **CREATE_ERRORS})
async def run_agent(
    request: Request,
    rt: RT,
    body: RunAgentInput,
    approver: Annotated[str | None, Depends(caller)],
) -> Response:
    """A run of the AG-UI protocol: a new turn of the thread, or the answers to its interrupts;
    the turn streamed as AG-UI events."""
    streams = admit_stream(request)
    try:
        turn_id, start, announced = await _begin(
            rt, body, approver, request.headers.get("traceparent")
        )
    except BaseException:
        streams.release()
        raise
    events = AguiEvents(body.threadId, body.runId, announced=announced)
    return LiveStream(agui_stream(streams, request, turn_id, start, events), streams.release)


async def _begin(
    rt: Runtime, body: RunAgentInput, approver: str | None, trace_parent: str | None
) -> tuple[str, str, list[str]]:
    if body.resume:
        answers = [answer_of(entry) for entry in body.resume]
        return await run_in_threadpool(
            decide_answers, rt, rt.settings, body.threadId, answers, approver
        )
    if approver is not None:
        raise HTTPException(
            403, "an approver's token decides approvals only: a message wants the API token"
        )
    model = (body.forwardedProps or {}).get("model")
    if model is not None and not isinstance(model, str):
        raise HTTPException(422, "forwardedProps.model: a model spec is a string")
    message = last_user_text(body.messages, message_text)
    turn_id = await run_in_threadpool(
        enqueue_message, rt, body.threadId, message, model, trace_parent
    )
    return turn_id, "0-0", []


async def agui_stream(
    streams: Fanout, request: Request, turn_id: str, start: str, events: AguiEvents
) -> AsyncIterator[bytes]:
    """The turn after ``start`` as AG-UI events, until the run finishes or fails."""
    yield sse_data(events.opening())
    follow = cast(AsyncGenerator[bytes], event_stream(streams, request, turn_id, start))
    async with aclosing(follow):
        async for message in follow:
            out = [m for event in events_of(message) for m in events.map(event)]
            if out:
                yield sse_data(out)
            elif message == KEEPALIVE:
                yield KEEPALIVE
            if events.done:
                break
