"""The one service of a turn's lifecycle (CONTRACT §7.7): every step a turn takes, decided here.

Each step is a transition of the ledger's state machine (``ledger.turn.TABLE``) carried out
atomically by ``TurnStore``; a step whose turn moved on in between (another client, another
reaper, the run itself) is refused there, so two actors racing for a turn get one winner and the
others a clear refusal. The chunk task, the API, the CLI, the reaper and the test harness all call
this service; the chunk path (``run_chunk``) is the same for all of them. Its parts:
``ChunkPath`` (a run's own steps), ``Control`` (Stop, Continue, takeovers) and ``Approvals``
(waiting for a person, decisions, expiry), over ``LifecycleBase``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledger.events import EarlierTurn, TurnStarted
from worker.engine.recorder import make_event
from worker.lifecycle.approvals import Approvals, Decided
from worker.lifecycle.base import Outcome
from worker.lifecycle.chunks import ChunkPath
from worker.lifecycle.control import Control


@dataclass(frozen=True)
class NewTurn:
    turn_id: str
    conversation_id: str
    run_id: str


class Lifecycle(ChunkPath, Control, Approvals):
    def create(
        self,
        message: str,
        *,
        conversation_id: str | None = None,
        mode: str = "foreground",
        model: str | None = None,
        turn_id: str | None = None,
        prior_turn_note: str | None = None,
        earlier_turns: tuple[EarlierTurn, ...] = (),
    ) -> NewTurn:
        """Record a new turn (``turn_started``, queued, its first run pending); no dispatch."""
        turn_id = turn_id or self.ids.new("turn")
        conversation_id = conversation_id or self.ids.new("conv")
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
            prior_turn_note=prior_turn_note,
            earlier_turns=earlier_turns,
        )
        fields = {"model": model or ""}
        look_at = self.ms(self.settings.handoff_grace_s)
        self.store.create(event, first_run=run_id, look_at_ms=look_at, fields=fields)
        return NewTurn(turn_id, conversation_id, run_id)

    def withdraw(self, turn_id: str, conversation_id: str) -> bool:
        """Take back a turn whose creation failed part way (its first chunk could not be sent,
        or Redis refused a write after the turn was recorded), so that a failed request leaves
        no turn that runs later; False when the turn went on (claimed, stopped) and stays."""
        return self.store.withdraw(turn_id, conversation_id)


__all__ = ["Decided", "Lifecycle", "NewTurn", "Outcome"]
