"""The HTTP API's request and response bodies (docs/http-api.md), as the OpenAPI document shows
them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from ledger.ids import ID, TENANT
from ledger.journal import JournalEntry
from worker.lifecycle.service import NOT_BLANK, is_blank

#: characters: the longest user message accepted
MAX_MESSAGE_CHARS = 100_000
#: characters: the longest reason of a decision, from any route or protocol
MAX_REASON_CHARS = 2000
STATUSES = ("queued", "running", "resuming", "waiting", "completed", "stopped")
#: an input signature: hex sha256 of the call's canonical JSON (docs/architecture.md)
SIGNATURE = r"^[0-9a-f]{64}$"


def not_blank(value: str) -> str:
    """A message holds a character that is not a space or a line break: enqueue refuses a blank
    one too, and refusing it here makes it a 422, not a 500."""
    if is_blank(value):
        raise ValueError("message is blank")
    return value


#: a message a request carries: 1 to MAX_MESSAGE_CHARS characters, not blank
Message = Annotated[
    str,
    Field(min_length=1, max_length=MAX_MESSAGE_CHARS, json_schema_extra={"pattern": NOT_BLANK}),
    AfterValidator(not_blank),
]


class TurnRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    #: not blank: the validator below refuses it, the pattern says so in the document
    message: Message
    conversation_id: str | None = Field(None, pattern=ID)
    mode: Literal["foreground", "background"] = "foreground"
    model: str | None = Field(
        None,
        max_length=500,
        description="a model spec (scripted:PATH, anthropic:MODEL, openai:MODEL): the server's "
        "default when absent; any other must be listed in the server's DRES_MODELS (else 422)",
    )
    message_id: str | None = Field(
        None,
        pattern=ID,
        description="the client's id of the message: a repeat of the conversation's newest "
        "message (same id, same text) returns its turn; an earlier turn's id is a 409 (fork it)",
    )
    double_text: Literal["queue", "interrupt", "reject"] | None = Field(
        None,
        description="what this message does while the conversation has a live turn: queue "
        "behind it, interrupt it, or be refused (409); default DRES_DOUBLE_TEXT",
    )
    tenant: str | None = Field(
        None,
        pattern=TENANT,
        description="the turn's tenant, whose limits it runs under (absent: `default`); a "
        "Dres-Tenant header wins over it",
    )
    loop: str | None = Field(
        None,
        max_length=500,
        description="the agent loop the turn runs, one of the server's DRES_LOOP entries by its "
        "text (dres, pydantic_ai:MODULE:ATTR, openai_agents:MODULE:ATTR; else 422); absent: "
        "its first",
    )


class TurnCreated(BaseModel):
    turn_id: str
    conversation_id: str
    events_url: str


class ApprovalOut(BaseModel):
    """An approval request and its decision (docs/semantics.md)."""

    approval_id: str
    turn_id: str
    call_id: str
    tool: str
    #: the call's input in full: what runs if it is approved
    input: Any
    #: what a decision must name: the input's signature (a changed call has another)
    signature: str
    requested_at: float
    expires_at: float
    #: null while pending
    decision: Literal["approve", "deny", "expired", "voided"] | None = None
    reason: str | None = None
    by: str | None = None
    decided_at: float | None = None


class ApprovalList(BaseModel):
    items: list[ApprovalOut]
    #: pass as ``cursor`` for the next page; null on the last
    next_cursor: str | None


class DecisionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    decision: Literal["approve", "deny"]
    signature: str = Field(
        pattern=SIGNATURE,
        description="the request's signature, as listed: a decision for another is refused (409)",
    )
    reason: str = Field("", max_length=MAX_REASON_CHARS)
    by: str | None = Field(None, min_length=1, max_length=200, description="who decides")


class DecisionOut(BaseModel):
    turn_id: str
    approval_id: str
    decision: Literal["approve", "deny"]
    detail: str
    #: the run that resumes the turn (null while other requests of the turn are open)
    run_id: str | None = None


class UsageOut(BaseModel):
    """Tokens the turn's model calls spent so far, as their providers reported them."""

    input_tokens: int = 0
    output_tokens: int = 0


class AwaitedCall(BaseModel):
    call_id: str
    tool: str


class ToolOutputRequest(BaseModel):
    """A client's output of a call of a tool it runs (docs/semantics.md, waits)."""

    model_config = ConfigDict(extra="forbid")
    output: Any = Field(description="what the tool returned (JSON); for an error, what went wrong")
    is_error: bool = False


class OutputAccepted(BaseModel):
    turn_id: str
    call_id: str
    detail: str
    #: the run that resumes the turn (null while it still waits on something else)
    run_id: str | None = None


class TurnStatus(BaseModel):
    turn_id: str
    conversation_id: str
    status: Literal["queued", "running", "resuming", "waiting", "completed", "stopped"]
    mode: str
    runs: int
    chunk: int
    auto_continues: int
    can_continue: bool
    #: why the turn stopped or failed, e.g. crashed, journal_unreadable
    code: str = ""
    #: its approval requests, oldest first, each with its decision
    approvals: list[ApprovalOut] = []
    usage: UsageOut = UsageOut()
    #: what a waiting turn waits on first (null unless it waits): a person's decision on an
    #: approval request, a client's output of a client tool's call, or a time (``wait_until``)
    waiting_for: Literal["approval", "client_tool", "timer"] | None = None
    #: when a turn waiting on a timer wakes (seconds since the epoch; null: no timer)
    wake_at: float | None = None
    #: the client tools' calls whose output it waits on
    awaiting: list[AwaitedCall] = []
    #: the tenant whose limits the turn runs under
    tenant: str = "default"


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


class ConversationOut(BaseModel):
    """A conversation as ``GET /v1/conversations`` lists it."""

    conversation_id: str
    #: its first message, whitespace collapsed, cut to 80 characters
    title: str
    #: seconds since the epoch: its newest message or Continue
    updated_at: float
    #: its newest turn and that turn's status now
    turn_id: str
    status: Literal["queued", "running", "resuming", "waiting", "completed", "stopped"]


class ConversationList(BaseModel):
    items: list[ConversationOut]
    #: pass as ``cursor`` for the next page; null on the last
    next_cursor: str | None


class ConversationTurn(BaseModel):
    turn_id: str
    message: str
    #: the client's id of the user message
    message_id: str | None = None
    status: Literal["queued", "running", "resuming", "waiting", "completed", "stopped"]
    code: str = ""
    can_continue: bool
    #: the fork that replaced this turn (its model and every later turn's no longer see it)
    replaced_by: str | None = None


class ForkRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_MESSAGE_CHARS,
        description="the fork's message (an edit); absent: the turn's own (a regenerate)",
        json_schema_extra={"pattern": NOT_BLANK},
    )
    model: str | None = Field(
        None, max_length=500, description="a model spec; absent: the forked turn's"
    )
    conversation: Literal["same", "new"] = Field(
        "same",
        description="same: the fork replaces the turn and every later one of its conversation; "
        "new: a new conversation whose history is the turns before it",
    )

    @field_validator("message")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        return None if value is None else not_blank(value)


class ForkCreated(BaseModel):
    turn_id: str
    conversation_id: str
    #: the turns the fork replaces (for ``new``: whose journal it inherits), oldest first
    replaces: list[str]
    events_url: str


class ConversationDetail(BaseModel):
    conversation_id: str
    title: str
    #: its turns whose keys live, oldest first
    turns: list[ConversationTurn]


class UIMessageOut(BaseModel):
    """A message of the AI SDK's ``UIMessage`` list (docs/chat.md): its ``parts`` as
    ``readUIMessageStream`` builds them (text, ``step-start``, ``tool-NAME`` in its last state)."""

    id: str
    role: Literal["user", "assistant"]
    parts: list[dict[str, Any]] = Field(
        description="the AI SDK's UI message parts, each with its `type`"
    )
    #: the stream's message metadata, when it carries any
    metadata: Any = None


class TenantLimits(BaseModel):
    """The limits a tenant's turns run under (DRES_TENANT_*); null: no limit."""

    #: turns running or resuming at once, across all workers
    concurrency: int | None
    #: turns started: ``N/s``, ``N/m`` or ``N/h``
    rate: str | None
    #: turns queued; one more is refused (429)
    max_queued: int | None


class TenantView(BaseModel):
    """A tenant now: its turns running (or resuming) and queued, and its limits."""

    tenant: str
    running: int
    queued: int
    limits: TenantLimits


class Error(BaseModel):
    """Every error's body (4xx, 5xx): what is wrong, in one sentence."""

    detail: str


RETRY_AFTER = {
    "Retry-After": {
        "description": "seconds to wait before trying again",
        "schema": {"type": "integer"},
    }
}
#: with no DRES_API_TOKEN, a request whose Host is not a loopback name (docs/http-api.md)
MISDIRECTED: dict[int | str, dict[str, Any]] = {
    421: {
        "model": Error,
        "description": "No DRES_API_TOKEN is set and the request's `Host` is not a loopback name",
    },
}
#: every route's errors; 503: the ledger's Redis or the broker is unreachable (docs/faults.md)
ERRORS: dict[int | str, dict[str, Any]] = {
    **{code: {"model": Error} for code in (400, 401, 404, 409, 413, 422)},
    **MISDIRECTED,
    503: {
        "model": Error,
        "description": "The ledger's Redis or the broker is unreachable; `detail` names which",
        "headers": RETRY_AFTER,
    },
}
#: /healthz's: its 503 body is its checks (``redis``, ``broker``) and a ``detail``
HEALTH_ERRORS: dict[int | str, dict[str, Any]] = {
    **MISDIRECTED,
    503: {
        "description": "`redis` (the ledger's) or `broker` is `unreachable: …`; `detail` names "
        "which",
        "headers": RETRY_AFTER,
    },
}
#: a turn's routes' errors besides ``ERRORS``: its stored metadata is not a turn's
#: (``CorruptTurn``), said as it is, never guessed at
TURN_ERRORS: dict[int | str, dict[str, Any]] = {
    500: {
        "model": Error,
        "description": "The turn's stored metadata is not a turn's; `detail` says what is wrong",
    },
}
#: ``POST /v1/turns``'s 500: that, or the server's own default model cannot be loaded
CREATE_ERRORS: dict[int | str, dict[str, Any]] = {
    500: {
        "model": Error,
        "description": "The server's default model cannot be loaded, or an earlier turn of the "
        "conversation has stored metadata that is not a turn's; `detail` says which",
    },
}
#: a route that starts a turn: its tenant has DRES_TENANT_MAX_QUEUED turns queued already
QUEUE_FULL: dict[int | str, dict[str, Any]] = {
    429: {
        "model": Error,
        "description": "The turn's tenant has `DRES_TENANT_MAX_QUEUED` turns queued: nothing is "
        "recorded; try again after `Retry-After` seconds",
        "headers": RETRY_AFTER,
    },
}
#: the writes' errors besides ``ERRORS``
WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    403: {
        "model": Error,
        "description": "The request's `Origin` is another site's, or its token may not do this "
        "(an approver's token on a write other than a decision; the API token on a decision "
        "when approvers are set)",
    },
    507: {
        "model": Error,
        "description": "The ledger's Redis or the broker is out of memory (`maxmemory` under "
        "`noeviction`) and refuses writes; `detail` names which",
    },
}


def journal_call(entry: JournalEntry) -> JournalCall:
    return JournalCall(
        tool=entry.tool,
        call_id=entry.call_id,
        input=entry.input,
        signature=entry.signature,
        result=entry.result,
    )
