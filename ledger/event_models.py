"""The run-ledger events (docs/events.md) as pydantic models, and ``Event``, their discriminated
union.

Events know nothing of stream ids or bytes; ``ledger.codec`` maps them to stream fields. Every
event carries ``v``, the schema version. Nothing here raises the ledger's errors: validating a
dict or JSON as an event (``ledger.events.parse_event``) does, so ``ledger.errors`` may name
``Event`` without an import back.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

#: the schema version every event carries as ``v``
SCHEMA_VERSION = 1

RunEndReason = Literal[
    "completed", "soft_limit", "transport_error", "crashed", "error", "stopped", "waiting"
]
TurnStatus = Literal["completed", "stopped"]
TurnMode = Literal["foreground", "background"]


class _Event(BaseModel):
    # Unknown fields are ignored so that an older reader still folds a newer writer's events of a
    # known type and version; frozen because an event, once recorded, never changes.
    model_config = ConfigDict(frozen=True, extra="ignore")

    v: Literal[1] = 1
    event_id: str = Field(min_length=1)
    turn_id: str = Field(min_length=1)
    run_id: str = Field(min_length=1)
    chunk: int = Field(ge=0)
    #: seconds since the epoch, from the injected clock
    ts: float


class EarlierTurn(BaseModel):
    """An earlier turn of the conversation as a new turn's model sees it (docs/semantics.md)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    turn_id: str
    #: the user's message
    message: str
    #: its final answer: the text of its last model response (for an unfinished turn, with a
    #: line saying how it ended)
    answer: str


class ClientTool(BaseModel):
    """A tool the client runs, declared with the turn's request (an AG-UI request's ``tools``):
    its calls wait for the client's answer (docs/semantics.md, waits)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str = Field(min_length=1, max_length=128)
    description: str = ""
    #: the input's JSON schema
    parameters: dict[str, Any] = Field(default_factory=dict)


class TurnStarted(_Event):
    type: Literal["turn_started"] = "turn_started"
    conversation_id: str
    message: str
    mode: TurnMode = "foreground"
    model: str | None = None
    #: a short account of an unfinished earlier turn of the conversation (docs/semantics.md)
    prior_turn_note: str | None = None
    #: the conversation's earlier turns, oldest first, as read when this turn was created (every
    #: run of the turn sees the same); within the history budget, so the oldest may be missing.
    #: A turn let through its conversation's line later records them then (``context``)
    earlier_turns: tuple[EarlierTurn, ...] = ()
    #: the client's id of the user message (docs/semantics.md, forks): a retried request with the
    #: same id finds this turn
    message_id: str | None = None
    #: a fork's: the turn it was forked at
    fork_of: str | None = None
    #: a fork's: the turns whose journal it inherits, oldest first (the turns it replaces, and
    #: what those inherited in turn); their calls meet both layers from the fork's first run
    inherits: tuple[str, ...] = ()
    #: a fork's: the turns of its conversation it replaces (marked ``replaced_by`` it)
    replaces: tuple[str, ...] = ()
    #: tools the client runs, declared by the turn's request (beside ``@tool(client=True)``)
    client_tools: tuple[ClientTool, ...] = ()
    #: the tenant the turn belongs to (docs/semantics.md, tenants)
    tenant: str = "default"
    #: the agent loop the turn runs, as ``DRES_LOOP`` lists it (``dres``,
    #: ``pydantic_ai:MODULE:ATTR``, ``openai_agents:MODULE:ATTR``; docs/loops.md); None: the
    #: default, ``DRES_LOOP``'s first
    loop: str | None = None
    #: a turn a schedule started (docs/semantics.md, schedules): the schedule's id
    schedule_id: str | None = None
    #: ... and the tick it fired (seconds since the epoch); the turn's id is derived from both
    tick_at: float | None = None


class TurnContext(_Event):
    """What the turn's model sees of its conversation, read when the turn was let through its
    conversation's line (one live turn per conversation): it replaces ``turn_started``'s
    ``earlier_turns`` and ``prior_turn_note``. Written before the turn's first run."""

    type: Literal["context"] = "context"
    earlier_turns: tuple[EarlierTurn, ...] = ()
    prior_turn_note: str | None = None


class Inherited(_Event):
    """A fork's first run: the journal it inherits from the turns it replaces, and the note the
    model is given of it (docs/semantics.md, forks), before its first model call."""

    type: Literal["inherited"] = "inherited"
    #: the turns whose journal the fork inherits
    turns: tuple[str, ...] = ()
    #: the note (None: the inherited journal is empty)
    note: str | None = None


#: why a run exists
RunCause = Literal[
    "first",
    "next_chunk",
    "redelivery",
    "reaper",
    "auto_continue",
    "continue",
    "approval",
    "tool_output",
    "timer",
]
#: every cause a run may have (the claim's script checks the pending run's against them)
RUN_CAUSES: tuple[str, ...] = get_args(RunCause)


class RunStarted(_Event):
    type: Literal["run_started"] = "run_started"
    cause: RunCause = "first"
    epoch: int = 0


class Resumed(_Event):
    """The turn goes on after an interruption; the resume prompt (nudge, note) stands here."""

    type: Literal["resumed"] = "resumed"
    #: next_chunk, redelivery, transport_error, reaper, auto_continue, continue
    cause: str
    #: the journal note the model was given (None: an empty journal, or the note was unavailable)
    note: str | None = None


class ModelStart(_Event):
    type: Literal["model_start"] = "model_start"
    #: completed model calls of the turn before this one (the scripted model's step in ``continue``)
    step: int = Field(ge=0)
    #: completed model calls since the turn last resumed (the step in ``restart`` mode)
    resume_step: int = Field(ge=0, default=0)


class TokenUsage(BaseModel):
    """Tokens one model call spent, as its provider reported them."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    input_tokens: int = Field(ge=0, default=0)
    output_tokens: int = Field(ge=0, default=0)

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


class ModelDone(_Event):
    """A model response arrived whole; its text and tool calls are the events since model_start."""

    type: Literal["model_done"] = "model_done"
    tool_calls: int = Field(ge=0, default=0)
    #: what the call spent (None: the provider did not say)
    usage: TokenUsage | None = None


class Text(_Event):
    type: Literal["text"] = "text"
    text: str


class _ToolCall(_Event):
    """A call the model asked for, as the journal matches it: its tool, input and signature."""

    #: each event's own ``Literal``, declared here so that it stays the first field after the
    #: envelope's (the JSON of every event reads the same)
    type: str
    call_id: str | None = None
    tool: str
    input: Any = None
    signature: str


class ToolStart(_ToolCall):
    type: Literal["tool_start"] = "tool_start"
    read_only: bool = False
    #: the approval this execution uses (docs/semantics.md): recorded with the call's start, in one
    #: fenced append, so an approval is used by one execution only
    approval_id: str | None = None


class ToolDone(_Event):
    type: Literal["tool_done"] = "tool_done"
    call_id: str | None = None
    tool: str
    result: Any = None
    is_error: bool = False
    #: the call's tool returned ``wait_until``: the turn waits until then (seconds since the
    #: epoch) before its next model call, held by no worker (docs/semantics.md, timers)
    wake_at: float | None = None


class ToolBlocked(_ToolCall):
    """A call the executor did not run; ``result`` is what the model was given instead."""

    type: Literal["tool_blocked"] = "tool_blocked"
    #: completed (exact repeat), identity (reworded retry), interrupted (unknown outcome),
    #: reconciled (the reconcile hook found the interrupted call's effect), denied (a person
    #: refused the call's approval)
    reason: str
    #: the call_id of the journal entry the call was matched against
    matched_call_id: str | None = None
    #: the turn that entry was recorded in, when it is not this one (a fork's inherited journal)
    inherited_from: str | None = None
    result: Any = None
    is_error: bool = False


#: what became of an approval request (docs/semantics.md)
ApprovalDecision = Literal["approve", "deny", "expired", "voided"]


class ApprovalRequested(_Event):
    """A call waits for a person's decision; nothing of it has run."""

    type: Literal["approval_requested"] = "approval_requested"
    approval_id: str = Field(min_length=1)
    #: the ledger's id for the call: its later ``tool_start`` or ``tool_blocked`` carries it too
    call_id: str = Field(min_length=1)
    tool: str
    input: Any = None
    signature: str
    #: seconds since the epoch: undecided by then, the turn stops (``approval_expired``)
    expires_at: float


class ApprovalDecided(_Event):
    """The one decision on an approval request: a person's, or its expiry, or its voiding."""

    type: Literal["approval_decided"] = "approval_decided"
    approval_id: str = Field(min_length=1)
    call_id: str | None = None
    decision: ApprovalDecision
    reason: str = ""
    #: who decided: the decision's ``by``, else ``api`` or ``cli``; ``dres`` for an expiry or a
    #: voiding
    by: str = ""


class Clear(_Event):
    type: Literal["clear"] = "clear"
    reason: str = ""


class RunEnded(_Event):
    type: Literal["run_ended"] = "run_ended"
    reason: RunEndReason
    detail: str = ""


class TurnEnded(_Event):
    type: Literal["turn_ended"] = "turn_ended"
    status: TurnStatus
    #: machine-readable cause of a stop or failure, e.g. ``journal_unreadable``
    code: str = ""
    detail: str = ""
    can_continue: bool = False


Event = Annotated[
    TurnStarted
    | TurnContext
    | Inherited
    | RunStarted
    | Resumed
    | ModelStart
    | ModelDone
    | Text
    | ToolStart
    | ToolDone
    | ToolBlocked
    | ApprovalRequested
    | ApprovalDecided
    | Clear
    | RunEnded
    | TurnEnded,
    Field(discriminator="type"),
]
