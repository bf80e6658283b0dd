"""The one service of a turn's lifecycle (docs/semantics.md): every step a turn takes, decided here.

Each step is a transition of the ledger's state machine (``ledger.turn.TABLE``) carried out
atomically by ``TurnStore``; a step whose turn moved on in between (another client, another
reaper, the run itself) is refused there, so two actors racing for a turn get one winner and the
others a clear refusal. The chunk task, the API, the CLI, the reaper and the test harness all call
this service; the chunk path (``run_chunk``) is the same for all of them. Its parts:
``ChunkPath`` (a run's own steps), ``Control`` (Stop, Continue, takeovers) and ``Approvals``
(waiting for a person, decisions, expiry), over ``LifecycleBase``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypedDict, Unpack

import redis
import structlog

from ledger.errors import LedgerError
from ledger.events import TurnStarted
from worker.base.errors import InvalidInput
from worker.engine.models import make_model
from worker.engine.recorder import make_event
from worker.lifecycle.approvals import Approvals, Decided
from worker.lifecycle.base import Outcome
from worker.lifecycle.chunks import ChunkPath
from worker.lifecycle.control import Control
from worker.lifecycle.conversation import Context, conversation_context

log = structlog.get_logger("dres.lifecycle")

MODES = ("foreground", "background")
#: a character that is not a space, a tab or a line break: a message holds one. Spelled out, not
#: ``\S``, so Python and a JSON Schema (ECMA-262) validator read the pattern alike.
NOT_BLANK = r"[^ \t\n\r\x0b\x0c]"


def is_blank(message: str) -> bool:
    return re.search(NOT_BLANK, message) is None


class TurnOptions(TypedDict, total=False):
    """What a caller may say of a new turn besides its message (``enqueue``, ``create``)."""

    conversation_id: str | None
    #: ``foreground`` (the default) or ``background``
    mode: str
    #: a model spec; None: ``DRES_MODEL``
    model: str | None
    turn_id: str | None
    #: the caller's ``traceparent``: the parent of the turn's trace
    trace_parent: str | None


@dataclass(frozen=True)
class NewTurn:
    turn_id: str
    conversation_id: str
    run_id: str


class Lifecycle(ChunkPath, Control, Approvals):
    def enqueue(self, message: str, **options: Unpack[TurnOptions]) -> NewTurn:
        """Record the turn (status queued, first run pending) and dispatch its first chunk.

        All or nothing, as far as Redis lets it be: when a step fails after the turn may have
        been recorded (Redis out of memory or gone part way, the broker unreachable), the turn is
        taken back before the error is raised, so the caller's failure leaves no turn that runs
        later. If even that cannot reach Redis, the turn stays queued and the reaper sends its
        chunk, as after a crash between the two steps; a repeat with the API's Idempotency-Key
        finds it.
        """
        mode, model = options.get("mode", "foreground"), options.get("model")
        conversation_id = options.get("conversation_id")
        if mode not in MODES:
            raise InvalidInput(f"mode must be foreground or background, not {mode!r}")
        if is_blank(message):
            raise InvalidInput("message is empty")
        make_model(model or self.settings.model, self.clock)  # a bad spec fails here, not later
        context = Context()
        if conversation_id:
            # A new message supersedes a turn of the conversation that waits for approval: it
            # stops, its requests void, and the new turn's note says what was waiting.
            self.supersede(conversation_id)
            context = conversation_context(
                self.ledger, conversation_id, self.settings.history_chars
            )
        turn_id = options.get("turn_id") or self.ids.new("turn")
        conversation_id = conversation_id or self.ids.new("conv")
        named: TurnOptions = {**options, "turn_id": turn_id, "conversation_id": conversation_id}
        try:
            turn = self.create(message, context, **named)
            self.launch(turn.turn_id, turn.run_id, mode)
        except Exception as e:
            self._take_back(turn_id, conversation_id, e)
            raise
        return turn

    def _take_back(self, turn_id: str, conversation_id: str, error: Exception) -> None:
        try:
            withdrawn = self.withdraw(turn_id, conversation_id)
        except (redis.RedisError, LedgerError) as e:
            log.warning(
                "could not take back what a failed creation may have recorded; a turn recorded "
                "is dispatched by the reaper",
                turn_id=turn_id,
                error=repr(error),
                withdraw_error=repr(e),
            )
            return
        if not withdrawn:
            log.warning("a turn whose creation failed went on", turn_id=turn_id, error=repr(error))

    def create(
        self, message: str, context: Context | None = None, **options: Unpack[TurnOptions]
    ) -> NewTurn:
        """Record a new turn (``turn_started``, queued, its first run pending); no dispatch.
        ``context``: what it knows of its conversation (none: nothing)."""
        context = context or Context()
        turn_id = options.get("turn_id") or self.ids.new("turn")
        conversation_id = options.get("conversation_id") or self.ids.new("conv")
        mode, model = options.get("mode", "foreground"), options.get("model")
        run_id = self.ids.new("run")
        event = make_event(
            TurnStarted,
            self.clock,
            self.ids,
            turn_id,
            run_id,
            0,
            conversation_id=conversation_id,
            message=message,
            mode=mode,
            model=model,
            prior_turn_note=context.prior_turn_note,
            earlier_turns=context.earlier_turns,
        )
        fields = {"model": model or ""}
        look_at = self.ms(self.settings.handoff_grace_s)
        recorded = self.tracer.turn(
            turn_id=turn_id,
            conversation_id=conversation_id,
            mode=mode,
            parent=options.get("trace_parent"),
        )
        with recorded as trace:
            if trace:
                fields["trace"] = trace
            self.store.create(event, first_run=run_id, look_at_ms=look_at, fields=fields)
        return NewTurn(turn_id, conversation_id, run_id)

    def withdraw(self, turn_id: str, conversation_id: str) -> bool:
        """Take back a turn whose creation failed part way (its first chunk could not be sent,
        or Redis refused a write after the turn was recorded), so that a failed request leaves
        no turn that runs later; False when the turn went on (claimed, stopped) and stays."""
        return self.store.withdraw(turn_id, conversation_id)


__all__ = ["Decided", "Lifecycle", "NewTurn", "Outcome"]
