"""One live turn per conversation (docs/semantics.md): letting a conversation's turns through
its line, one at a time, in order.

A turn sent to a conversation is recorded ``held`` (queued, no run pending, no message sent) and
joins the conversation's list; ``advance`` then lets the first turn that has not ended through:
it sets the line to that turn (compare-and-set, ``ledger.lines``) and, if the turn is held,
releases it — its context read now (``conversation``), its first run recorded pending and sent
(``Step.RELEASE``). The line is cleared only once its holder has ended, so a conversation never
has two turns running at once, whoever calls ``advance`` and however many call it together.

``advance`` is called by whoever may have freed the line or filled it: the enqueue and the fork
that added a turn, every turn's end (``close``), a run that ends waiting, Continue; the reaper
calls it for a held turn it looks at, so a crash between a turn's end and its ``advance`` delays
the next turn, never strands it. A turn waiting for a person (or a client, or a time) holds the
line only until a later turn comes: that turn supersedes it (``superseded``), as a new message
always has.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

import redis
import structlog

from ledger.errors import LedgerError, TransitionRefused, UnknownTurn
from ledger.events import TurnContext
from ledger.store import MetaValue
from ledger.tenants import Admitted
from ledger.turn import Step, StopCode, TurnMeta, TurnStatus
from worker.base.errors import Refused
from worker.lifecycle.base import LifecycleBase, NewTurn, Released
from worker.lifecycle.conversation import conversation_context
from worker.lifecycle.tenancy import kind_of

log = structlog.get_logger("dres.line")

#: reads of the line before ``advance`` gives up for now (each round follows a change another
#: actor made meanwhile; the reaper's next look at a held turn tries again)
ROUNDS = 8


class Again(Enum):
    """``_advance_once``'s answer when the line changed under it: look again."""

    AGAIN = "again"


AGAIN = Again.AGAIN
SUPERSEDED_WAITING = "a new message in the conversation came while it waited"


class Line(LifecycleBase):
    def advance(self, conversation_id: str, *, ended: str | None = None) -> Released | None:
        """Let the conversation's next turn through its line if the line is free; returns the
        turn released (None: the line is busy, or nothing waits). ``ended``: the turn whose end
        (or wait) calls this: nothing is read further when another turn holds the line (its end
        moves it) or when nothing came after ``ended``."""
        if not conversation_id:
            return None
        if ended is not None:
            look = self.store.lines.look(conversation_id)
            if look.holder not in ("", ended) or look.newest in ("", ended):
                return None
        for _ in range(ROUNDS):
            moved = self._advance_once(conversation_id)
            if moved is not AGAIN:
                return moved
        log.warning("the conversation's line kept changing; the reaper tries again")
        return None

    def _advance_once(self, conversation_id: str) -> Released | Again | None:
        """One look at the line: AGAIN when another actor changed it meanwhile."""
        lines = self.store.lines
        holder = lines.look(conversation_id).holder
        unended = lines.unended(conversation_id)
        if holder:
            meta = next((m for m in unended if m.turn_id == holder), None)
            if meta is None:  # its holder ended (or is gone): the line is free
                lines.set(conversation_id, holder, "")
                return AGAIN
        elif unended:
            meta = unended[0]
        else:
            return None
        if self._superseded(meta, unended):
            return AGAIN
        if not holder and not lines.set(conversation_id, "", meta.turn_id):
            return AGAIN
        if meta.status == TurnStatus.QUEUED and meta.held:
            # released by the one that set the line to it (or, after a crash, by whoever finds
            # the line its)
            return self._release(meta)
        return None

    def advance_quietly(self, conversation_id: str, *, ended: str | None = None) -> None:
        """``advance`` where a failure must not undo what the caller did (a turn's end): the next
        turn then waits for the reaper's look at it."""
        try:
            self.advance(conversation_id, ended=ended)
        except (LedgerError, redis.RedisError) as e:
            log.warning("could not let the conversation's next turn through", error=repr(e))

    def make_way(self, conversation_id: str, double_text: str) -> None:
        """Before a new message of the conversation is recorded: under ``reject``, refuse it
        while a turn is live; under ``interrupt``, stop the live turns (``superseded``), so that
        no write of theirs starts once the new message is recorded. A turn that waits is no
        live turn: the new message supersedes it (``Line.advance``)."""
        live = self.live_turns(conversation_id)
        if not live or double_text == "queue":
            return
        if double_text == "reject":
            raise Refused(_busy(live[0]))
        for meta in live:
            self.stop(meta.turn_id, StopCode.SUPERSEDED)

    def live_turns(self, conversation_id: str, before: str | None = None) -> list[TurnMeta]:
        """The conversation's turns queued, running or resuming (before ``before``, if given)."""
        live = []
        for meta in self.store.lines.unended(conversation_id):
            if meta.turn_id == before:
                break
            if meta.status != TurnStatus.WAITING:
                live.append(meta)
        return live

    def admit(self, turn: NewTurn, double_text: str) -> NewTurn:
        """A held turn joined its conversation's list: let it through the line if that is free.
        Under ``reject``, a live turn that came first (another request, meanwhile) refuses it."""
        if double_text == "reject":
            earlier = self.live_turns(turn.conversation_id, before=turn.turn_id)
            if earlier:
                raise Refused(_busy(earlier[0]))
        released = self.advance(turn.conversation_id)
        if released is not None and released.turn_id == turn.turn_id:
            return NewTurn(turn.turn_id, turn.conversation_id, released.run_id)
        return turn

    def _superseded(self, meta: TurnMeta, unended: list[TurnMeta]) -> bool:
        """A turn that waits while a later one of its conversation came: it stops
        (``superseded``). False: it does not wait, or nothing came after it."""
        if meta.status != TurnStatus.WAITING or meta is unended[-1]:
            return False
        self.stop_waiting(meta, StopCode.SUPERSEDED, SUPERSEDED_WAITING, advance=False)
        return True

    def _release(self, meta: TurnMeta) -> Released | None:
        """Let a held turn through its tenant's admission (``Hooks.wait``): now, or later (None:
        it waits ``queued``, held by no worker and no message, and a later admission lets it
        through); with it, whatever else may start now."""
        admitted = self.hooks.wait(meta, kind_of(meta))
        if all(a.turn_id != meta.turn_id for a in admitted):
            self.let_through(admitted)
            return None
        released = self._release_now(meta)
        if released is None:  # it moved on meanwhile: it keeps the slot unless it ended
            self.let_through(self._settle(meta.turn_id))
        self.let_through(admitted, but=meta.turn_id)
        return released

    def let_through(self, admitted: Sequence[Admitted], *, but: str = "") -> None:
        """Release the held turns an admission let through (each holds its tenant's slot now),
        but ``but`` (the caller's own); what a turn that ended meanwhile gives back may let
        another through, looked at in turn."""
        todo = [a.turn_id for a in admitted if a.turn_id != but]
        for _ in range(ROUNDS * 8):
            if not todo:
                return
            todo += [a.turn_id for a in self._settle(todo.pop(0))]
        log.warning("admission kept letting turns through; the reaper goes on", left=len(todo))

    def _settle(self, turn_id: str) -> Sequence[Admitted]:
        """Release one turn that holds its tenant's slot, if it is held; one that ended (or is
        gone) gives the slot back, and what that lets through is returned. A turn running,
        pending or still waiting keeps the slot (a resume whose step has not landed yet: the
        step leaves it held, and the reaper's look at a held turn releases it)."""
        for _ in range(3):
            try:
                meta = self.store.meta(turn_id)
            except UnknownTurn:
                return self.hooks.leave(turn_id)
            if meta.ended:
                return self.hooks.leave(turn_id)
            if meta.status != TurnStatus.QUEUED or not meta.held:
                return ()
            if self._release_now(meta) is not None:
                return ()
        return ()

    def _release_now(self, meta: TurnMeta) -> Released | None:
        """Let a held turn through: its context (a turn's first release) and its first run
        pending, in one step; then its message."""
        if meta.fork_of:
            # first: the context below leaves the replaced turns out by their marks
            self.mark_replaced(meta.turn_id)
        events = []
        if not meta.runs:
            context = conversation_context(
                self.ledger, meta.conversation_id, self.settings.history_chars, before=meta.turn_id
            )
            events.append(
                self.event(
                    meta,
                    TurnContext,
                    earlier_turns=context.earlier_turns,
                    prior_turn_note=context.prior_turn_note,
                )
            )
        run_id = self.ids.new("run")
        fields: dict[str, MetaValue] = {
            "held": "",
            "next_run": run_id,
            "dispatched": self.clock.now(),
            "redispatches": 0,
        }
        # watched before the step: a release whose message never left is sent again
        self.store.watch(meta.turn_id, self.ms(self.settings.handoff_grace_s))
        try:
            self.store.transition(
                meta.turn_id,
                Step.RELEASE,
                expect={"held": "1", "epoch": meta.epoch},
                events=events,
                fields=fields,
            )
        except (TransitionRefused, UnknownTurn) as e:
            log.info("a held turn moved on before its release", turn_id=meta.turn_id, why=str(e))
            return None
        self.launch(meta.turn_id, run_id, meta.mode)
        log.info("turn let through: its run pending and sent", turn_id=meta.turn_id)
        return Released(meta.turn_id, run_id)

    def mark_replaced(self, fork_id: str, replaces: Sequence[str] | None = None) -> None:
        """Mark the turns a fork replaces (``replaces``; None: its ``turn_started``'s) as
        replaced by it; idempotent: its release marks them again, for a fork whose creator died
        before it had."""
        if replaces is None:
            (event,) = self.ledger.started([fork_id])
            replaces = () if event is None else event.replaces
        for turn_id in replaces:
            self.store.mark(turn_id, replaced_by=fork_id)


def _busy(meta: TurnMeta) -> str:
    return (
        f"turn {meta.turn_id} of the conversation is {meta.status.value}: a new message waits "
        "for it under double_text queue, stops it under interrupt; this request's is reject"
    )
