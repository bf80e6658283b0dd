"""The turn's state machine: its statuses, the steps between them, and its typed metadata.

A turn is ``queued`` (its first run waits for a worker, or, ``held``, for its conversation's
line: an earlier turn of the conversation is live), ``running`` (a run holds its lease),
``resuming`` (a successor run waits: the next chunk, or a resume after a dead run), ``waiting``
(a person's decision on an approval request, a client tool's output or a timer is awaited; no
run holds it), ``completed`` or
``stopped`` (every end short of completion, with a ``StopCode``). Every change of status is
one of the ``Step``s below, allowed only from the statuses ``TABLE`` lists, and is carried out by
one atomic, fenced Lua step (``ledger/lua/transition.lua``, ``claim.lua``) that checks the
from-status and the lease epoch; nothing else writes a turn's status. The table is data: the
scripts are told the allowed from-statuses and the to-status of the step they carry out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ledger.codec import text
from ledger.errors import CorruptTurn
from ledger.events import TokenUsage


class TurnStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    RESUMING = "resuming"
    WAITING = "waiting"
    COMPLETED = "completed"
    STOPPED = "stopped"

    @property
    def ended(self) -> bool:
        return self in (TurnStatus.COMPLETED, TurnStatus.STOPPED)


class StopCode(StrEnum):
    """Why a turn stopped. Every stop may be continued by a person (docs/semantics.md)."""

    CANCELLED = "cancelled"
    RATE_LIMIT = "rate_limit"
    AUTH = "auth"
    INVALID_REQUEST = "invalid_request"
    INTERNAL_ERROR = "internal_error"
    TRANSPORT_ERROR = "transport_error"
    MAX_CHUNKS = "max_chunks"
    CRASHED = "crashed"
    HANDOFF_LOST = "handoff_lost"
    NO_PROGRESS = "no_progress"
    JOURNAL_UNREADABLE = "journal_unreadable"
    LOOP_LIMIT = "loop_limit"
    #: Redis refused a write for memory (maxmemory under noeviction): Continue once it has room
    STORE_FULL = "store_full"
    #: an approval request was not decided within DRES_APPROVAL_TTL_S: Continue asks again
    APPROVAL_EXPIRED = "approval_expired"
    #: a new message in the conversation arrived while the turn waited for approval
    SUPERSEDED = "superseded"
    #: the turn spent its DRES_TURN_TOKEN_BUDGET: a Continue grants it again (never automatic)
    BUDGET = "budget"

    @classmethod
    def of(cls, code: str) -> StopCode:
        """The code of a model error or a run's end; anything unknown is an internal error."""
        try:
            return cls(code)
        except ValueError:
            return cls.INTERNAL_ERROR


#: stops a client may continue on its own (``{"auto": true}``): the turn was cut off by time or
#: a lost worker, never refused by an error or a person
AUTO_CONTINUABLE = frozenset({StopCode.CRASHED, StopCode.HANDOFF_LOST, StopCode.MAX_CHUNKS})


class Step(StrEnum):
    """The events of a turn's life: each moves it from one status to another."""

    CLAIM = "claim"  # the pending run takes the lease
    RENEW = "renew"  # the running run's heartbeat extends its lease
    HAND_OVER = "hand_over"  # the run ends at its soft limit; its successor is pending
    COMPLETE = "complete"  # the run answered: the turn is done
    STOP = "stop"  # the run ends the turn short of completion (error, Stop, chunk limit)
    TAKE_OVER = "take_over"  # the run died: a successor resumes it (background)
    STOP_DEAD = "stop_dead"  # the run died: the turn stops (foreground, Stop, no progress)
    REDISPATCH = "redispatch"  # the pending run's message was lost: it is sent again
    STOP_PENDING = "stop_pending"  # Stop, or a lost hand-over, before the pending run started
    CONTINUE = "continue"  # a stopped turn gets a new run
    WAIT = "wait"  # the run ends waiting for a person's decision on its approval requests
    DECIDE = "decide"  # one of several requests is decided; the turn still waits
    DECIDE_LAST = "decide_last"  # the last open request is decided: a run resumes the turn
    STOP_WAITING = "stop_waiting"  # Stop, expiry or a new message ends a waiting turn
    RELEASE = "release"  # a held turn is let through its conversation's line: its run pending
    ANSWER = "answer"  # a client tool's output for one of several awaited calls; still waits
    ANSWER_LAST = "answer_last"  # the last awaited output (or decision): a run resumes the turn
    # the same two, when the turn's tenant has no free slot: it waits queued for one
    DECIDE_HELD = "decide_held"
    ANSWER_HELD = "answer_held"
    WAKE = "wake"  # a waiting turn's timer fell due: a run resumes the turn
    WAKE_HELD = "wake_held"  # the same, when its tenant has no free slot


_Q, _RUN, _RES = TurnStatus.QUEUED, TurnStatus.RUNNING, TurnStatus.RESUMING
_DONE, _STOP, _WAIT = TurnStatus.COMPLETED, TurnStatus.STOPPED, TurnStatus.WAITING

#: status x step -> status; a pair not listed is refused
TABLE: Mapping[tuple[TurnStatus, Step], TurnStatus] = {
    (_Q, Step.CLAIM): _RUN,
    (_RES, Step.CLAIM): _RUN,
    (_RUN, Step.RENEW): _RUN,
    (_RUN, Step.HAND_OVER): _RES,
    (_RUN, Step.COMPLETE): _DONE,
    (_RUN, Step.STOP): _STOP,
    (_RUN, Step.TAKE_OVER): _RES,
    (_RUN, Step.STOP_DEAD): _STOP,
    (_Q, Step.REDISPATCH): _Q,
    (_RES, Step.REDISPATCH): _RES,
    (_Q, Step.STOP_PENDING): _STOP,
    (_RES, Step.STOP_PENDING): _STOP,
    (_STOP, Step.CONTINUE): _Q,
    (_RUN, Step.WAIT): _WAIT,
    (_WAIT, Step.DECIDE): _WAIT,
    (_WAIT, Step.DECIDE_LAST): _RES,
    (_WAIT, Step.STOP_WAITING): _STOP,
    (_Q, Step.RELEASE): _Q,
    (_WAIT, Step.ANSWER): _WAIT,
    (_WAIT, Step.ANSWER_LAST): _RES,
    (_WAIT, Step.DECIDE_HELD): _Q,
    (_WAIT, Step.ANSWER_HELD): _Q,
    (_WAIT, Step.WAKE): _RES,
    (_WAIT, Step.WAKE_HELD): _Q,
}

#: the prefix of a turn's metadata fields that hold its approval requests' states
APPROVAL_FIELD = "ap:"
#: the prefix of a turn's metadata fields that hold its awaited client calls' states
CLIENT_FIELD = "cl:"
#: the state of an approval request not yet decided (of a client call not yet answered)
PENDING = "pending"
#: a client call's state once its output is recorded, or once its wait ended without one
ANSWERED, VOIDED = "answered", "voided"


def approval_field(approval_id: str) -> str:
    return APPROVAL_FIELD + approval_id


def approval_state(state: str, signature: str) -> str:
    """An approval request's metadata value: its state (``pending`` or its decision) and the
    signature it was requested for, so one condition of a step checks both."""
    return f"{state}|{signature}"


def client_field(call_id: str) -> str:
    return CLIENT_FIELD + call_id


def allowed_from(step: Step) -> tuple[TurnStatus, ...]:
    return tuple(status for status, s in TABLE if s == step)


def target(step: Step) -> TurnStatus | None:
    """The status ``step`` leads to; None for a step that leaves every status as it is."""
    pairs = [(status, to) for (status, s), to in TABLE.items() if s == step]
    if all(status == to for status, to in pairs):
        return None
    (to,) = {to for _, to in pairs}
    return to


@dataclass(frozen=True, slots=True)
class TurnMeta:
    """The metadata hash beside a turn's stream, typed. Written only by the ledger's scripts."""

    turn_id: str
    status: TurnStatus
    #: lease epoch: bumped by every change of holder; a run's stream ids start with it
    epoch: int = 0
    #: runs that claimed the turn so far
    runs: int = 0
    #: the chunk of the current (or last) run
    chunk: int = 0
    #: the run holding (or that last held) the lease
    run_id: str = ""
    #: the pending run, its chunk and why it exists (first, next_chunk, reaper, continue, …)
    next_run: str = ""
    next_chunk: int = 0
    next_cause: str = "first"
    conversation_id: str = ""
    mode: str = "foreground"
    model: str = ""
    created: float = 0.0
    #: when the pending run's message was (last) sent, and how often it was sent again
    dispatched: float = 0.0
    redispatches: int = 0
    #: ms since the epoch: the lease holds until then unless its heartbeat renews it
    lease_until: int = 0
    #: why the turn stopped ("" unless stopped)
    code: str = ""
    auto_continues: int = 0
    #: takeovers of dead runs in a row without a newly completed tool call
    takeovers: int = 0
    #: the chunk the current chunk budget (``DRES_MAX_CHUNKS``) counts from
    chunk_base: int = 0
    #: the turn is in its conversation's list (else the reaper repairs that)
    listed: bool = False
    #: the turn's Stop flag was set when this was read (a claim reads it; ``meta`` does not)
    stop_requested: bool = False
    #: approval requests not yet decided, and when the earliest of them expires (seconds)
    approvals_pending: int = 0
    approval_expires: float = 0.0
    #: every approval request of the turn: (approval_id, state, signature), state ``pending`` or
    #: its decision
    approvals: tuple[tuple[str, str, str], ...] = ()
    #: client calls awaited (not yet answered), and every client call the turn waited on:
    #: (call_id, state, tool), state ``pending``, ``answered`` or ``voided``
    clients_pending: int = 0
    client_calls: tuple[tuple[str, str, str], ...] = ()
    #: when a turn waiting on a timer (``wait_until``) wakes, seconds since the epoch (0: none)
    wake_at: float = 0.0
    #: the turn's trace context (a W3C ``traceparent``) when it was recorded traced, else ""
    trace: str = ""
    #: queued behind its conversation's line: no run pending, no message sent (docs/semantics.md)
    held: bool = False
    #: the client's id of the turn's user message
    message_id: str = ""
    #: the fork that replaced this turn ("": none)
    replaced_by: str = ""
    #: a fork's: the turn it was forked at ("": not a fork)
    fork_of: str = ""
    #: the tenant the turn belongs to (docs/semantics.md, tenants)
    tenant: str = "default"
    #: what the turn's model calls spent, the sum of its ``model_done`` usage, kept as they are
    #: appended; None for a turn recorded before the totals were kept (its stream has the sum)
    usage: TokenUsage | None = None

    @classmethod
    def from_hash(
        cls, turn_id: str, raw: Mapping[Any, Any], stop_requested: bool = False
    ) -> TurnMeta:
        """Parse the hash; a missing or unknown status or a field of the wrong type is named."""
        fields = {text(k): text(v) for k, v in raw.items()}
        try:
            status = TurnStatus(fields.get("status", ""))
        except ValueError:
            raise CorruptTurn(turn_id, f"status {fields.get('status')!r}") from None
        try:
            return cls(
                turn_id=turn_id,
                status=status,
                epoch=int(fields.get("epoch", 0)),
                runs=int(fields.get("runs", 0)),
                chunk=int(fields.get("chunk", 0)),
                run_id=fields.get("run_id", ""),
                next_run=fields.get("next_run", ""),
                next_chunk=int(fields.get("next_chunk", 0)),
                next_cause=fields.get("next_cause", "first"),
                conversation_id=fields.get("conversation_id", ""),
                mode=fields.get("mode", "foreground"),
                model=fields.get("model", ""),
                created=float(fields.get("created", 0) or 0),
                dispatched=float(fields.get("dispatched", 0) or 0),
                redispatches=int(fields.get("redispatches", 0) or 0),
                lease_until=int(fields.get("lease_until", 0) or 0),
                code=fields.get("code", ""),
                auto_continues=int(fields.get("auto_continues", 0) or 0),
                takeovers=int(fields.get("takeovers", 0) or 0),
                chunk_base=int(fields.get("chunk_base", 0) or 0),
                listed=fields.get("listed") == "1",
                stop_requested=stop_requested,
                approvals_pending=int(fields.get("approvals_pending", 0) or 0),
                approval_expires=float(fields.get("approval_expires", 0) or 0),
                approvals=_states(fields, APPROVAL_FIELD),
                clients_pending=int(fields.get("clients_pending", 0) or 0),
                client_calls=_states(fields, CLIENT_FIELD),
                wake_at=float(fields.get("wake_at", 0) or 0),
                trace=fields.get("trace", ""),
                held=fields.get("held") == "1",
                message_id=fields.get("message_id", ""),
                replaced_by=fields.get("replaced_by", ""),
                fork_of=fields.get("fork_of", ""),
                tenant=fields.get("tenant", "") or "default",
                usage=_usage(fields),
            )
        except ValueError as e:
            raise CorruptTurn(turn_id, str(e)) from None

    @property
    def ended(self) -> bool:
        return self.status.ended

    def approval(self, approval_id: str) -> tuple[str, str] | None:
        """(state, signature) of one of the turn's approval requests; None: not one of them."""
        for aid, state, signature in self.approvals:
            if aid == approval_id:
                return state, signature
        return None

    @property
    def pending_approvals(self) -> list[str]:
        return [aid for aid, state, _ in self.approvals if state == PENDING]

    @property
    def pending_calls(self) -> list[tuple[str, str]]:
        """The client calls the turn waits on: (call_id, tool)."""
        return [(cid, tool) for cid, state, tool in self.client_calls if state == PENDING]

    def client_call(self, call_id: str) -> tuple[str, str] | None:
        """(state, tool) of one of the turn's client calls; None: not one it waited on."""
        for cid, state, tool in self.client_calls:
            if cid == call_id:
                return state, tool
        return None

    @property
    def waiting_for(self) -> str | None:
        """What a waiting turn waits on first: ``approval``, ``client_tool`` or ``timer`` (None:
        it does not wait)."""
        if self.status != TurnStatus.WAITING:
            return None
        if self.approvals_pending:
            return "approval"
        return "timer" if self.wake_at and not self.clients_pending else "client_tool"


def _usage(fields: Mapping[str, str]) -> TokenUsage | None:
    if "input_tokens" not in fields:
        return None
    return TokenUsage(
        input_tokens=int(fields["input_tokens"]), output_tokens=int(fields.get("output_tokens", 0))
    )


def _states(fields: Mapping[str, str], prefix: str) -> tuple[tuple[str, str, str], ...]:
    """The turn's waits of one kind: (id, state, what follows the state's ``|``)."""
    found = []
    for name, value in fields.items():
        if name.startswith(prefix):
            state, _, rest = value.partition("|")
            found.append((name[len(prefix) :], state, rest))
    return tuple(sorted(found))


def continue_refusal(
    meta: TurnMeta, *, newest_turn: str | None, auto: bool, max_auto: int
) -> str | None:
    """Why Continue would be refused now, or None: the one rule for Continue and can_continue.

    ``newest_turn``: the newest turn of the turn's conversation (None: unknown, taken as this).
    """
    if meta.status != TurnStatus.STOPPED:
        return f"the turn is not stopped (status {meta.status})"
    if newest_turn is not None and newest_turn != meta.turn_id:
        return "only the conversation's newest stop can be continued"
    if auto:
        if StopCode.of(meta.code) not in AUTO_CONTINUABLE:
            return f"no automatic continuation after {meta.code or 'this stop'}"
        if meta.auto_continues >= max_auto:
            return f"automatic continuation limit reached ({meta.auto_continues} of {max_auto})"
    return None
