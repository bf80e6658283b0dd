"""``POST /v1/ag-ui``: the AG-UI protocol (docs/chat.md). A ``RunAgentInput`` whose thread is the
conversation: its ``resume`` entries are the person's decisions on the waiting turn's requests,
and the ``tool`` messages that end it the client's outputs of the frontend tools' calls the turn
waits on (its ``tools``: the client tools of the turn the input starts); else its last message,
the user's, is matched to the thread's turns by its id as the AI SDK's is
(``worker.edges.http.chat``): a re-run of the newest (same id, same text) starts nothing and
streams that turn, an earlier turn's id with other text is an edit (a fork), ``forwardedProps``
``regenerate: true`` forks the turn answering it, any other is a new turn; a last message that is
not the user's (and no ``resume``) is refused. The answer is the turn as AG-UI events over SSE
(``worker.edges.http.aguievents``), read as ``worker.edges.http.chat`` reads it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Annotated, Any, Literal, cast

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response, StreamingResponse
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.exceptions import HTTPException

from ledger.events import ClientTool
from ledger.ids import ID
from worker.edges.http.aguievents import AguiEvents
from worker.edges.http.answers import Answer, Begun, Output, id_of, reason_of, take
from worker.edges.http.chat import (
    TEXT,
    Said,
    caller,
    last_user,
    last_user_text,
    message_id_of,
    replayed_ends,
    send_message,
    turn_waits,
    user_message_schema,
)
from worker.edges.http.deps import RT
from worker.edges.http.fanout import Fanout
from worker.edges.http.schemas import CREATE_ERRORS, ERRORS, QUEUE_FULL, WRITE_ERRORS
from worker.edges.http.sse import KEEPALIVE, LiveStream, admit_stream, event_stream
from worker.edges.http.tenants import TenantHeader
from worker.edges.http.uichunks import events_of, sse_data
from worker.edges.runtime import Runtime
from worker.lifecycle.service import DOUBLE_TEXT

#: why a run whose last message is not the user's (and that resumes nothing) starts nothing
NOTHING_TO_TAKE = (
    "the last message is not the user's and the input resumes nothing: send a user message, "
    "resume the interrupts, or answer a call the turn waits on with a tool message"
)
#: a tool's name, as a model provider takes it
TOOL_NAME = r"^[A-Za-z0-9_-]{1,64}$"


class FrontendTool(BaseModel):
    """An AG-UI ``Tool``: the client runs it (CopilotKit's ``useCopilotAction``)."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(pattern=TOOL_NAME)
    description: str = Field("", max_length=4000)
    parameters: dict[str, Any] = Field(default_factory=dict)

    @field_validator("parameters")
    @classmethod
    def _a_schema(cls, parameters: dict[str, Any]) -> dict[str, Any]:
        try:
            Draft202012Validator.check_schema(parameters)
        except SchemaError as e:
            raise ValueError(f"not a JSON schema: {e.message}") from None
        return parameters


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
    tools: list[FrontendTool] | None = Field(
        None,
        description="the page's own tools (frontend tools): a new turn's client tools, whose "
        "calls the client runs and answers with a ``tool`` message",
    )

    @field_validator("tools")
    @classmethod
    def _distinct(cls, tools: list[FrontendTool] | None) -> list[FrontendTool] | None:
        names = [tool.name for tool in tools or ()]
        if len(set(names)) < len(names):
            raise ValueError("two tools have one name")
        return tools


def answer_of(entry: ResumeEntry, where: str) -> Answer:
    """``resolved`` with ``payload.approved`` true approves; anything else denies (``where``:
    the entry's place in the input, which an error names)."""
    payload = entry.payload if isinstance(entry.payload, dict) else {}
    approved = entry.status == "resolved" and payload.get("approved") is True
    reason = reason_of(payload.get("reason"), f"{where}.payload.reason")
    if not reason and entry.status == "cancelled":
        reason = "cancelled"
    return Answer(entry.interruptId, approved, reason)


def message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        parts = [p for p in content if isinstance(p, dict)]
        return "".join(str(p.get("text", "")) for p in parts if p.get("type") == "text")
    return str(content or "")


router = APIRouter(prefix="/v1/ag-ui", responses=ERRORS)


@router.post(
    "",
    response_class=StreamingResponse,
    responses={**WRITE_ERRORS, **CREATE_ERRORS, **QUEUE_FULL},
)
async def run_agent(
    request: Request,
    rt: RT,
    body: RunAgentInput,
    approver: Annotated[str | None, Depends(caller)],
    dres_tenant: TenantHeader = None,
) -> Response:
    """A run of the AG-UI protocol: a new turn of the thread (of the ``Dres-Tenant`` header's
    tenant), or the answers to its interrupts; the turn streamed as AG-UI events."""
    streams = admit_stream(request)
    try:
        trace_parent = request.headers.get("traceparent")
        begun = await _begin(rt, body, approver, trace_parent, dres_tenant)
    except BaseException:
        streams.release()
        raise
    events = AguiEvents(
        body.threadId,
        body.runId,
        turn_id=begun.turn_id,
        announced=begun.announced,
        answered=begun.answered,
        spent=begun.spent,
        waited_run=begun.waited_run,
        asking=begun.asking,
    )
    return LiveStream(agui_stream(streams, request, begun, events), streams.release)


def outputs_of(messages: list[dict[str, Any]]) -> list[Output]:
    """The ``tool`` messages that end the input: a client's outputs of its tools' calls
    (``content`` as JSON when it is, else its text; an ``error`` makes it an error result, that
    text)."""
    found: list[Output] = []
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if message.get("role") != "tool" or message.get("toolCallId") is None:
            break
        call_id = id_of(message.get("toolCallId"), f"messages[{i}].toolCallId")
        content = message.get("content")
        try:
            value = json.loads(content) if isinstance(content, str) else content
        except ValueError:
            value = content
        error = message.get("error")
        found.append(Output(call_id, str(error), True) if error else Output(call_id, value))
    return found[::-1]


async def _begin(
    rt: Runtime,
    body: RunAgentInput,
    approver: str | None,
    trace_parent: str | None,
    tenant: str | None = None,
) -> Begun:
    outputs = outputs_of(body.messages)
    if body.resume or outputs:
        answers = [answer_of(entry, f"resume[{i}]") for i, entry in enumerate(body.resume or ())]
        return await run_in_threadpool(
            take, rt, rt.settings, body.threadId, answers, outputs, approver, NOTHING_TO_TAKE
        )
    if approver is not None:
        raise HTTPException(
            403, "an approver's token decides approvals only: a message wants the API token"
        )
    props = body.forwardedProps or {}
    model = props.get("model")
    if model is not None and not isinstance(model, str):
        raise HTTPException(422, "forwardedProps.model: a model spec is a string")
    double_text = props.get("double_text")
    if double_text is not None and double_text not in DOUBLE_TEXT:
        raise HTTPException(422, "forwardedProps.double_text: queue, interrupt or reject")
    if body.messages and body.messages[-1].get("role") != "user":
        raise HTTPException(409, NOTHING_TO_TAKE)
    said = Said(
        conversation_id=body.threadId,
        message=last_user_text(body.messages, message_text),
        message_id=message_id_of(last_user(body.messages), "messages"),
        model=model,
        trace_parent=trace_parent,
        regenerate=props.get("regenerate") is True,
        double_text=double_text,
        client_tools=tuple(
            ClientTool(name=t.name, description=t.description, parameters=t.parameters)
            for t in body.tools or ()
        ),
        tenant=tenant,
    )
    sent = await run_in_threadpool(send_message, rt, said)
    return Begun(sent.turn_id)


async def agui_stream(
    streams: Fanout, request: Request, begun: Begun, events: AguiEvents
) -> AsyncIterator[bytes]:
    """The turn after ``begun.start`` as AG-UI events, until the run finishes or fails."""
    turn_id = begun.turn_id
    yield sse_data(events.opening())
    follow = cast(AsyncGenerator[bytes], event_stream(streams, request, turn_id, begun.start))
    async with aclosing(follow):
        async for message in follow:
            said = events_of(message)
            replayed = await replayed_ends(streams, turn_id, said)
            out = [
                m for i, event in enumerate(said) if i not in replayed for m in events.map(event)
            ]
            if events.paused and await turn_waits(streams, turn_id, events.waited_run):
                out += events.finish_waiting()
            if out:
                yield sse_data(out)
            elif message == KEEPALIVE:
                yield KEEPALIVE
            if events.done:
                break
