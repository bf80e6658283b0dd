"""Timers (docs/semantics.md, timers): a turn that waits until a time its tool named
(``wait_until``), held by no worker, and the reaper's wake.

A run whose tool returned ``wait_until`` ends ``waiting`` (``Approvals.wait``): the turn's
metadata holds ``wake_at`` and the reaper's index looks at it then. The reaper hands the
timers that fell due to ``wake_all``, as many as it took together: each takes its tenant's next
free slot (``Hooks.wait_all``: one round trip for all) and one step of the state machine
(``Step.WAKE``, held queued as ``Step.WAKE_HELD`` with no free slot) resumes it in a new run of
cause ``timer``, its message sent in the same atomic step where the broker is the ledger's own
server (``TurnStore.transitions``: one round trip for all). Each step is conditioned on the turn
as it was read — waiting at the same epoch, nothing else awaited — so two reapers wake a turn
once, and Stop or a new message that came first wins.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from ledger.errors import TransitionRefused, UnknownTurn
from ledger.store import MetaValue
from ledger.turn import Step, TurnMeta, TurnStatus
from ledger.turns import Outgoing, PlannedStep
from worker.base import metrics
from worker.lifecycle.base import LifecycleBase

log = structlog.get_logger("dres.timers")


def timer_due(meta: TurnMeta, now_ms: int) -> bool:
    """Does ``meta``'s turn wait on its timer alone, and has the timer fallen due?"""
    return (
        meta.status == TurnStatus.WAITING
        and bool(meta.wake_at)
        and not meta.approvals_pending
        and not meta.clients_pending
        and meta.wake_at * 1000 <= now_ms
    )


class Timers(LifecycleBase):
    def wake_all(self, metas: Sequence[TurnMeta]) -> dict[str, str]:
        """Wake the turns of ``metas`` whose timer fell due (the others: looked at again at
        their ``wake_at``); what became of each: ``woken``, ``woken_held`` (no free slot of its
        tenant: queued for one), ``timer`` (not yet) or ``changed`` (it moved meanwhile)."""
        now_ms = self.ms()
        done: dict[str, str] = {}
        due = []
        for meta in metas:
            if timer_due(meta, now_ms):
                due.append(meta)
            else:
                self.store.watch(meta.turn_id, int(meta.wake_at * 1000))
                done[meta.turn_id] = "timer"
        if not due:
            return done
        runs = [
            self.resuming_run(meta, admitted)
            for meta, admitted in zip(due, self.hooks.wait_all(due, "resume"), strict=True)
        ]
        look_at = self.ms(self.settings.handoff_grace_s)
        messages = self._messages(due, runs)
        steps = [
            self._step(meta, run_id, messages.get(meta.turn_id), look_at)
            for meta, run_id in zip(due, runs, strict=True)
        ]
        answers = (
            self.store.transitions(steps)
            if self.store.batches
            else [self._take(step) for step in steps]
        )
        looks: dict[str, int] = {}
        lates = []
        for meta, step, run_id, answer in zip(due, steps, runs, answers, strict=True):
            if isinstance(answer, (TransitionRefused, UnknownTurn)):
                done[meta.turn_id] = "changed"  # Stop, a new message or another reaper came first
                continue
            if isinstance(answer, Exception):
                raise answer
            lates.append(now_ms / 1000 - meta.wake_at)
            metrics.timer_woke(lates[-1])
            # looked at again after a hand-off grace: a message lost on the way is sent again
            looks[meta.turn_id] = look_at
            if run_id is None:
                done[meta.turn_id] = "woken_held"
                continue
            if step.outgoing is None:  # not sent with the step: sent now
                self.dispatcher.dispatch(meta.turn_id, run_id, meta.mode)
            done[meta.turn_id] = "woken"
        self.store.watch_all(looks)
        if lates:
            log.info("timers fell due", woken=len(lates), late_s=round(max(lates), 3))
        return done

    def _messages(
        self, metas: Sequence[TurnMeta], runs: Sequence[str | None]
    ) -> dict[str, Outgoing | None]:
        """The runs' messages, made to go with their steps where they can (the ledger's server
        is the broker's), by turn id."""
        if not self.store.sends_with_steps:
            return {}
        woken = [(m.turn_id, r, m.mode) for m, r in zip(metas, runs, strict=True) if r]
        made = self.dispatcher.prepare_all(woken)
        return {turn_id: message for (turn_id, _, _), message in zip(woken, made, strict=True)}

    def _step(
        self, meta: TurnMeta, run_id: str | None, outgoing: Outgoing | None, look_at_ms: int
    ) -> PlannedStep:
        """The step that wakes ``meta``'s turn, with its run's message when it goes with it."""
        expect: dict[str, MetaValue] = {
            "epoch": meta.epoch,
            "approvals_pending": 0,
            "clients_pending": 0,
        }
        return PlannedStep(
            meta.turn_id,
            Step.WAKE if run_id else Step.WAKE_HELD,
            expect,
            self.resume_fields(meta, "timer", run_id),
            outgoing,
            look_at_ms if outgoing is not None else 0,
        )

    def _take(self, step: PlannedStep) -> int | Exception:
        """One step alone (a Redis Cluster's: no pipeline), its refusal as its answer."""
        try:
            return self.store.transition(
                step.turn_id,
                step.step,
                expect=step.expect,
                fields=step.fields,
                outgoing=step.outgoing,
                look_at_ms=step.look_at_ms,
            )
        except (TransitionRefused, UnknownTurn) as e:
            return e


__all__ = ["Timers", "timer_due"]
