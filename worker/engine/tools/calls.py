"""The values the executor deals in, and layer 2's decision over them (pure: no I/O, no clock).

A call the model made is validated once (``prepare``) into a ``PreparedCall``; ``decide`` then
says what to do with it on this attempt — ``Run``, ``Block``, ``Refuse`` or ``Reconcile`` — from
the call and the attempt's journal snapshot alone. Recording and running what was decided is the
executor's (``worker.engine.tools.executor``). Also the texts a model gets instead of running a
call that layer 2 stops.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from ledger.events import ApprovalRequested
from ledger.journal import Journal, JournalEntry
from ledger.signature import input_signature
from worker.engine.models.base import ToolCall
from worker.engine.tools.registry import Registry
from worker.engine.tools.spec import ToolSpec

DENIED = "denied by a person: {reason}"
#: where a journal entry was recorded, as the texts below say it: this turn's earlier attempt,
#: or an earlier answer this turn replaces (a fork's inherited journal)
HERE = "an earlier, interrupted attempt of this turn"
INHERITED = "an earlier answer in this conversation that this request replaces"
ALREADY_COMPLETED = (
    "This exact call already completed in {where} and was not run again, because that would "
    "repeat its side effect. Its recorded result is below."
)
REWORDED_REFUSAL = (
    "Refused: a {tool} call with the same {fields} already completed in {where}. This call "
    "differs only in its other fields and would repeat the side effect. Reuse the completed "
    "call's result below instead."
)
INTERRUPTED_REFUSAL = (
    "Refused: this {tool} call started in {where} and was interrupted before its result was "
    "recorded, so it may already have taken effect. Verify the current state with a read tool "
    "({reads}) before deciding what to do next; this exact call will not be run again blind."
)


@dataclass(frozen=True)
class ToolOutcome:
    call_id: str
    tool: str
    result: Any
    is_error: bool
    #: the call was not run (layer 2)
    blocked: bool = False
    #: why not (the ``tool_blocked`` reason), when it was not run
    blocked_reason: str | None = None
    #: the call waits for a person's decision: its request (docs/semantics.md)
    request: ApprovalRequested | None = None
    #: the call waits for the client's answer (a client tool): its ``tool_start`` is recorded
    awaited: bool = False
    #: the call's tool returned ``wait_until``: the turn waits until then (seconds since the epoch)
    wake_at: float | None = None


@dataclass
class Attempt:
    """The executor's state for one attempt: the journal snapshot and what it has claimed.

    Only the executor's acting step changes it, as a decision says (``Block.consumes``,
    ``Run.settles``, ``Reconcile.settles``): ``decide`` reads it and nothing more.
    """

    #: None on a turn's first run: there is nothing to block
    journal: Journal | None
    #: indices into ``journal.completed`` already answering a repeat: each answers one only
    consumed: set[int] = field(default_factory=set)
    #: indices into ``journal.interrupted`` settled by a retry or a reconcile hook
    settled: set[int] = field(default_factory=set)
    #: completed calls per (tool, signature): the "occurrence" in an idempotency key
    completed: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: the attempt's turn: an entry of another was inherited (a fork's), and is said so
    turn_id: str = ""

    @classmethod
    def begin(cls, journal: Journal | None, turn_id: str = "") -> Attempt:
        attempt = cls(journal, turn_id=turn_id)
        for entry in journal.completed if journal else ():
            attempt.completed[(entry.tool, entry.signature)] += 1
        return attempt


@dataclass(frozen=True)
class PreparedCall:
    """A call the model made, validated against its tool; made once per call."""

    spec: ToolSpec
    #: the ledger's id for the call (its ``tool_start``'s or ``tool_blocked``'s ``call_id``)
    call_id: str
    #: the provider's id for the call, as the model streamed it (None when it gave none)
    provider_id: str | None
    #: the validated input, as the tool is invoked with it (a pydantic model, or a tool from
    #: elsewhere's JSON object)
    arguments: Any
    #: the same input in its JSON form: what is recorded and signed
    data: Any
    signature: str
    #: signatures of the tool's ``identity`` fields, in their order (empty when it names none)
    identity: tuple[str, ...]
    #: the registry's read-only tools: a refused interrupted call asks the model to verify first
    read_tools: tuple[str, ...] = ()

    @property
    def tool(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class Run:
    """Run the call. An idempotent retry of an interrupted write names the entries it supersedes
    (every unsettled identical one: earlier retries cut off in turn ran under the same key, so
    they are the same one effect): once the retry succeeds they are closed and settled."""

    supersedes: tuple[JournalEntry, ...] = ()
    #: the superseded entries' indices in ``journal.interrupted``
    settles: tuple[int, ...] = ()


@dataclass(frozen=True)
class Block:
    """Do not run: the matched entry's effect already happened; ``result`` is returned instead."""

    entry: JournalEntry
    result: Any
    #: ``reconciled`` is the executor's, after a reconcile hook found the effect had landed
    reason: Literal["completed", "reconciled"] = "completed"
    #: the index in ``journal.completed`` this block uses up (one repeat per completed entry)
    consumes: int | None = None


@dataclass(frozen=True)
class Refuse:
    """Do not run: it might repeat a side effect; ``result`` is the error the model gets."""

    entry: JournalEntry
    result: dict[str, Any]
    reason: Literal["identity", "interrupted"]


@dataclass(frozen=True)
class Reconcile:
    """Ask the tool's reconcile hook whether the interrupted ``entry`` took effect; refuse with
    ``otherwise`` when it cannot tell."""

    entry: JournalEntry
    #: the entry's index in ``journal.interrupted``
    settles: int
    otherwise: Refuse


Decision = Run | Block | Refuse | Reconcile


def prepare(registry: Registry, call: ToolCall, call_id: str) -> PreparedCall | str:
    """The call validated against its tool's schema, or the error that names what is wrong."""
    spec = registry.get(call.name)
    if spec is None:
        known = ", ".join(registry.names())
        return f"unknown tool {call.name!r}; known tools: {known}"
    checked = spec.check_input(call.input)
    if isinstance(checked, str):
        return f"invalid input for {spec.name}: {checked}"
    arguments, data = checked
    return PreparedCall(
        spec=spec,
        call_id=call_id,
        provider_id=call.provider_id,
        arguments=arguments,
        data=data,
        signature=input_signature(data),
        identity=identity_of(spec, data),
        read_tools=tuple(registry.read_only_names()),
    )


def decide(call: PreparedCall, attempt: Attempt) -> Decision:
    """What layer 2 does with ``call`` on this attempt (docs/semantics.md).

    Read-only tools and a turn's first run are never stopped. Otherwise, in order: an exact
    repeat of a completed call not yet used up is blocked with its result; an identical retry
    of an unsettled interrupted call is reconciled, retried (idempotent tools) or refused; a
    reworded repeat of a completed or interrupted call with ``identity`` fields is refused.
    """
    journal = attempt.journal
    if call.spec.read_only or journal is None:
        return Run()
    for i, entry in enumerate(journal.completed):
        if i not in attempt.consumed and _same(call, entry):
            result = {
                "status": "already_completed",
                "note": ALREADY_COMPLETED.format(where=_where(entry, attempt)),
                "result": entry.result,
            }
            return Block(entry, result, consumes=i)
    for i, entry in enumerate(journal.interrupted):
        if i not in attempt.settled and _same(call, entry):
            return _retry(call, attempt, i, entry)
    return _reworded(call, attempt, journal) or Run()


def _same(call: PreparedCall, entry: JournalEntry) -> bool:
    return entry.tool == call.tool and entry.signature == call.signature


def _retry(call: PreparedCall, attempt: Attempt, index: int, entry: JournalEntry) -> Decision:
    """An identical retry of an interrupted write, by what the tool declares."""
    if call.spec.reconcile is not None:
        return Reconcile(entry, index, otherwise=_refuse_interrupted(call, entry, attempt))
    if call.spec.idempotent:
        assert attempt.journal is not None  # a retry needs a journal
        same = [
            (i, e)
            for i, e in enumerate(attempt.journal.interrupted)
            if i >= index and i not in attempt.settled and _same(call, e)
        ]
        return Run(supersedes=tuple(e for _, e in same), settles=tuple(i for i, _ in same))
    return _refuse_interrupted(call, entry, attempt)


def _reworded(call: PreparedCall, attempt: Attempt, journal: Journal) -> Refuse | None:
    if not call.spec.identity:
        return None
    for entry in journal.completed:
        # Used-up entries count too: their effect happened whichever repeat they answered.
        if (
            entry.tool == call.tool
            and entry.signature != call.signature
            and identity_of(call.spec, entry.input) == call.identity
        ):
            fields = " and ".join(call.spec.identity)
            where = _where(entry, attempt)
            message = REWORDED_REFUSAL.format(tool=call.tool, fields=fields, where=where)
            completed = {"input": entry.input, "result": entry.result}
            return Refuse(entry, error_result(message, completed_call=completed), "identity")
    for i, entry in enumerate(journal.interrupted):
        if (
            i not in attempt.settled
            and entry.tool == call.tool
            and identity_of(call.spec, entry.input) == call.identity
        ):
            return _refuse_interrupted(call, entry, attempt)
    return None


def _where(entry: JournalEntry, attempt: Attempt) -> str:
    inherited = entry.turn_id and attempt.turn_id and entry.turn_id != attempt.turn_id
    return INHERITED if inherited else HERE


def _refuse_interrupted(call: PreparedCall, entry: JournalEntry, attempt: Attempt) -> Refuse:
    reads = ", ".join(call.read_tools) or "none registered"
    where = _where(entry, attempt)
    message = INTERRUPTED_REFUSAL.format(tool=call.tool, reads=reads, where=where)
    result = error_result(message, interrupted_call={"input": entry.input})
    return Refuse(entry, result, "interrupted")


def identity_of(spec: ToolSpec, data: Any) -> tuple[str, ...]:
    """Signatures of ``spec.identity``'s fields of an input (a missing field signs as null)."""
    source = data if isinstance(data, dict) else {}
    return tuple(input_signature(source.get(name)) for name in spec.identity)


def error_result(message: str, **details: Any) -> dict[str, Any]:
    return {"error": message, **details}
