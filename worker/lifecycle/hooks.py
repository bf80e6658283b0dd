"""The lifecycle's hook seam: the points where a concern that is not a turn's own steps (tenant
admission today; the next one tomorrow) takes part, each concern one module (in the spirit of
dramatiq's middleware).

A hook is told of a new turn before it is recorded (``refuse``: it may refuse it), asked whether
a new turn may start at once (``start``) and, when not, told that the turn waits (``wait``); it is
told when a turn gives up what it held (``leave``: it ended, stopped, waits, or was taken back),
when a chunk claimed its run (``claimed``) and at each reaper sweep (``sweep``). ``wait``,
``leave``, ``claimed`` and ``sweep`` answer with the turns that may start now — the lifecycle,
not the hook, releases them (``Line.let_through``): a hook records and decides; it never moves a
turn itself.

A hook's methods are called on the path of every turn (create, claim, end): they cost at most one
round trip each, and one that cannot reach Redis raises, as any ledger step does, except where
the lifecycle says a failure must not undo its step (a turn's end: ``leave`` is best effort there,
and the reaper's sweep mends what it missed).
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger.tenants import Admitted
from ledger.turn import TurnMeta
from worker.engine.recorder import RunContext

#: what a hook answers when nothing more may start
NOTHING: tuple[Admitted, ...] = ()


class Hook:
    """A concern the lifecycle calls at its points; each method does nothing until a concern's
    module overrides it. At most one hook of a lifecycle gates admission (``gates``): the turn a
    ``start`` or ``wait`` lets through is that hook's to say."""

    #: this hook decides when turns start (``start``, ``wait``)
    gates = False

    def refuse(self, tenant: str) -> None:
        """A new turn of ``tenant`` is about to be recorded: raise to refuse it."""

    def start(self, tenant: str, turn_id: str) -> bool:
        """May the new turn start at once (True: it holds what it needs now)? False: it is
        recorded waiting, and ``wait`` is called once it may go as far as its conversation is
        concerned."""
        return True

    def wait(self, meta: TurnMeta, kind: str) -> Sequence[Admitted]:
        """The turn (``kind`` ``new``, or ``resume`` after a wait) would start now: the turns
        that may (it among them, or not: then it waits, and a later answer lets it through)."""
        return (Admitted(meta.turn_id, meta.tenant, kind, 0),)

    def wait_all(self, metas: Sequence[TurnMeta], kind: str) -> list[Sequence[Admitted]]:
        """``wait`` for several turns, in order (the reaper's timers that fell due together);
        a hook may answer them in one round trip."""
        return [self.wait(meta, kind) for meta in metas]

    def leave(self, turn_id: str) -> Sequence[Admitted]:
        """The turn gives back what it held (it ended, stopped, waits, or was taken back)."""
        return NOTHING

    def claimed(self, run: RunContext) -> Sequence[Admitted]:
        """A chunk claimed its run (its message left the broker's queue)."""
        return NOTHING

    def sweep(self) -> Sequence[Admitted]:
        """The reaper's periodic look: mend what a crash left, let through what may start."""
        return NOTHING


class Hooks(Hook):
    """The lifecycle's hooks, called in order; the gating one decides ``start`` and ``wait``."""

    def __init__(self, hooks: Sequence[Hook] = ()) -> None:
        gating = [hook for hook in hooks if hook.gates]
        if len(gating) > 1:
            raise ValueError("at most one hook may gate admission")
        self.hooks = tuple(hooks)
        self.gate: Hook = gating[0] if gating else Hook()
        self.gates = bool(gating)

    def refuse(self, tenant: str) -> None:
        for hook in self.hooks:
            hook.refuse(tenant)

    def start(self, tenant: str, turn_id: str) -> bool:
        return self.gate.start(tenant, turn_id)

    def wait(self, meta: TurnMeta, kind: str) -> Sequence[Admitted]:
        return self.gate.wait(meta, kind)

    def wait_all(self, metas: Sequence[TurnMeta], kind: str) -> list[Sequence[Admitted]]:
        return self.gate.wait_all(metas, kind)

    def leave(self, turn_id: str) -> Sequence[Admitted]:
        return [admitted for hook in self.hooks for admitted in hook.leave(turn_id)]

    def claimed(self, run: RunContext) -> Sequence[Admitted]:
        return [admitted for hook in self.hooks for admitted in hook.claimed(run)]

    def sweep(self) -> Sequence[Admitted]:
        return [admitted for hook in self.hooks for admitted in hook.sweep()]
