"""What a chat protocol's request answers of its conversation's waiting turn (docs/chat.md): a
person's decisions on approval requests and a client's outputs of its tools' calls, taken once
each, and where the resumed turn's stream then starts.

The AI SDK carries both in its last assistant message's tool parts (``approval-responded``;
``output-available`` / ``output-error``), AG-UI in ``resume`` entries and ``tool`` messages; the
routes (``chat``, ``agui``) read them and this module takes them, as ``POST
/v1/turns/{id}/approvals/...`` and ``/tool-outputs/...`` do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.exceptions import HTTPException

from ledger.event_models import ApprovalRequested, RunEnded, ToolStart
from ledger.ids import ID_RULE, is_id
from ledger.turn import PENDING
from ledger.usage import UsageFold
from worker.base.settings import Settings
from worker.edges.http.decisions import DECIDED_STATUS
from worker.edges.http.schemas import MAX_REASON_CHARS
from worker.edges.runtime import Runtime
from worker.lifecycle.approvals import DecidedKind
from worker.lifecycle.outputs import AnsweredKind

#: why a request that answers nothing the turn waits on starts nothing
NOTHING_TO_TAKE = (
    "the last message is the assistant's and carries nothing to take (no approval decision, no "
    "output of a call the turn waits on): send a user message, or regenerate"
)
#: an output's answer refused: the turn does not (or no longer) wait on the call
OUTPUT_STATUS = {AnsweredKind.NOT_WAITING: 409, AnsweredKind.CONTENDED: 409}


@dataclass(frozen=True)
class Answer:
    """A person's answer to one approval request, as the client's tool part carries it."""

    approval_id: str
    approved: bool
    reason: str


@dataclass(frozen=True)
class Output:
    """A client's output of one call of a tool it runs."""

    call_id: str
    output: Any
    is_error: bool = False


@dataclass(frozen=True)
class Begun:
    """Where a chat protocol's answer streams its turn from: after ``start`` (a stream id), the
    client already showing the calls ``announced`` (and having given the results of
    ``answered`` itself), the turn having spent ``spent`` before."""

    turn_id: str
    start: str = "0-0"
    announced: tuple[str, ...] = ()
    answered: tuple[str, ...] = ()
    #: the model calls' spend before ``start`` (None: nothing comes before it)
    spent: UsageFold | None = None
    #: the run whose end ``start`` is, which waited: while the turn still waits on it (the
    #: answer left calls or requests open), the stream ends at once, as that run's did
    waited_run: str | None = None
    #: the approval requests still open after the answer (AG-UI's interrupts of such a run)
    asking: tuple[ApprovalRequested, ...] = ()


def dicts(values: Any) -> list[dict[str, Any]]:
    """The objects of a list a client sent (anything else in it is no part of ours)."""
    return [v for v in values if isinstance(v, dict)] if isinstance(values, list) else []


def reason_of(value: Any, where: str) -> str:
    """A decision's reason as a client sent it (absent: none): a string of at most
    ``MAX_REASON_CHARS``, from any route or protocol, else a 422 naming ``where``."""
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > MAX_REASON_CHARS:
        raise HTTPException(
            422,
            f"{where}: a decision's reason is a string of at most {MAX_REASON_CHARS} characters",
        )
    return value


def id_of(value: Any, where: str) -> str:
    """An id a client sent in a body (an approval's, a call's): else a 422 naming ``where``."""
    if not is_id(value):
        raise HTTPException(422, f"{where}: {ID_RULE}, not {value!r}"[:300])
    return value


def _tool_parts(message: dict[str, Any], where: str) -> list[tuple[str, dict[str, Any]]]:
    """The tool parts of a UI message, each with where it is (``messages[N].parts[I]``)."""
    parts = message.get("parts")
    return [
        (f"{where}.parts[{i}]", part)
        for i, part in enumerate(parts if isinstance(parts, list) else [])
        if isinstance(part, dict)
        and (str(part.get("type", "")).startswith("tool-") or part.get("type") == "dynamic-tool")
    ]


def answers_of(message: dict[str, Any], where: str) -> list[Answer]:
    """The ``approval-responded`` tool parts of an AI SDK assistant message (``where``: the
    message's place in the request, which an error names)."""
    found: list[Answer] = []
    for at, part in _tool_parts(message, where):
        approval = part.get("approval")
        if part.get("state") != "approval-responded" or not isinstance(approval, dict):
            continue
        found.append(
            Answer(
                id_of(approval.get("id"), f"{at}.approval.id"),
                approval.get("approved") is True,
                reason_of(approval.get("reason"), f"{at}.approval.reason"),
            )
        )
    return found


def outputs_of(message: dict[str, Any], where: str) -> list[Output]:
    """The tool parts of an AI SDK assistant message that carry an output (``addToolOutput``:
    ``output-available``, ``output-error``). Server calls' parts are among them: ``take`` keeps
    only the calls the turn waits on. An error's result is its ``errorText`` as it is, so that the
    streams and the history give the client back the text it sent."""
    found = []
    for at, part in _tool_parts(message, where):
        state = part.get("state")
        if state not in ("output-available", "output-error"):
            continue
        call_id = id_of(part.get("toolCallId"), f"{at}.toolCallId")
        if state == "output-available":
            found.append(Output(call_id, part.get("output")))
        else:
            found.append(Output(call_id, str(part.get("errorText") or ""), True))
    return found


def take(
    rt: Runtime,
    settings: Settings,
    conversation_id: str,
    answers: list[Answer],
    outputs: list[Output],
    approver: str | None,
    nothing: str = NOTHING_TO_TAKE,
) -> Begun:
    """Take each decision and each output of a call the newest turn waited on, once (a repeat
    takes nothing again), and say where the resumed turn's stream starts: after the run that
    ended waiting on them, whose calls the client already shows, with what the turn spent
    before (from the same read: the resumed stream's usage is the turn's sum). Nothing of the
    newest turn's among them: 409 (``nothing`` says why), nothing taken."""
    if answers and settings.approvers and approver is None:
        raise HTTPException(
            403, "only an approver's token (DRES_APPROVER_TOKENS) decides approvals"
        )
    newest = rt.lifecycle.store.conversations.newest_turns(conversation_id, 1)
    if not newest:
        raise HTTPException(404, f"conversation {conversation_id!r} has no turn")
    turn_id = newest[0]
    envelopes = rt.ledger.read_turn(turn_id)
    asked = {
        e.event.approval_id: e.event for e in envelopes if isinstance(e.event, ApprovalRequested)
    }
    meta = rt.ledger.meta(turn_id)
    mine = [o for o in outputs if meta.client_call(o.call_id) is not None]
    if mine and approver is not None:
        raise HTTPException(403, "a client's tool output wants the API token, not an approver's")
    if not answers and not mine:
        raise HTTPException(409, nothing)
    for answer in answers:
        _decide(rt, turn_id, asked, answer, approver)
    for output in mine:
        answered = rt.lifecycle.answer(
            turn_id, output.call_id, output.output, is_error=output.is_error
        )
        if answered.kind in OUTPUT_STATUS:
            raise HTTPException(OUTPUT_STATUS[answered.kind], answered.detail)
    taken = {a.approval_id for a in answers} | {o.call_id for o in mine}
    first = next(
        i
        for i, e in enumerate(envelopes)
        if (isinstance(e.event, ApprovalRequested) and e.event.approval_id in taken)
        or (isinstance(e.event, ToolStart) and e.event.call_id in taken)
    )
    waited = next(
        (i for i in range(first, len(envelopes)) if isinstance(envelopes[i].event, RunEnded)),
        len(envelopes) - 1,
    )
    before = envelopes[: waited + 1]
    ended = before[-1].event
    client_calls = [call_id for call_id, _, _ in meta.client_calls]
    open_ = {aid for aid, state, _ in meta.approvals if state == PENDING} - taken
    return Begun(
        turn_id,
        before[-1].stream_id,
        tuple([r.call_id for r in asked.values()] + client_calls),
        tuple(o.call_id for o in mine),
        UsageFold().feed(e.event for e in before),
        ended.run_id if isinstance(ended, RunEnded) and ended.reason == "waiting" else None,
        tuple(r for r in asked.values() if r.approval_id in open_),
    )


def _decide(
    rt: Runtime,
    turn_id: str,
    asked: dict[str, ApprovalRequested],
    answer: Answer,
    approver: str | None,
) -> None:
    request = asked.get(answer.approval_id)
    if request is None:
        # a decision dres cannot take (an answer replaced or superseded since, a stale tab):
        # refused, starting nothing (docs/semantics.md, forks)
        raise HTTPException(
            409,
            f"the conversation's newest turn {turn_id} has no approval request "
            f"{answer.approval_id}: nothing to take",
        )
    decided = rt.lifecycle.decide(
        turn_id,
        answer.approval_id,
        "approve" if answer.approved else "deny",
        request.signature,
        reason=answer.reason,
        by=approver or "chat",
    )
    if not decided.ok and decided.kind != DecidedKind.ALREADY:
        raise HTTPException(DECIDED_STATUS[decided.kind], decided.detail)


__all__ = [
    "NOTHING_TO_TAKE",
    "Answer",
    "Begun",
    "Output",
    "answers_of",
    "dicts",
    "id_of",
    "outputs_of",
    "reason_of",
    "take",
]
