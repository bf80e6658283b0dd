"""The ``approval`` trials (``make chaos KINDS=approval``): the same turn, on a worker where every
write of the chaos tools waits for a person (``DRES_APPROVAL``), and the runner plays the person.

Each time the turn is ``waiting``, the runner decides its open request at a random moment (0 to
``DECIDE_S`` seconds later): ``approve`` mostly, ``deny`` sometimes, through a ``Lifecycle`` like
the API's, with the signature read from the request's ``approval_requested`` event. A turn asks
three times at least (send, charge, note; a denied call that the model makes again asks again),
and a Continue after a crash may ask again: the runner decides every request it finds open.

One fault per trial strikes around a decision or in the approved call it resumes:
- at a worker's failpoint, as in the other trials: SIGKILL of the pool child or the whole worker
  before an approved call's ``tool_start``, between its side effect and its ``tool_done``
  (``tool.after_effect``), or at the hand-over to the next chunk; a soft limit inside the approved
  tool; a duplicated successor message;
- the runner's own, at its ``nth`` decision (``DECISION_POINTS``): right after it, a SIGKILL of
  the pool processes or of the whole worker, or a second message for the run the decision
  resumes; a restart of redis-server (down 0.5 to 4 s) just before or right after it.

Every invariant of the other trials is checked, and ``invariants.approval_checks``: no write ran
without an ``approve`` for its signature, none twice on one approval, no denied call ran.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from chaos.cluster import Cluster
from chaos.trial import Trial
from ledger.events import ApprovalRequested
from ledger.turn import TurnMeta

#: the runner's own points, at its ``nth`` decision: just before it, right after it
BEFORE, DECIDED = "before_decision", "decided"
DECISION_POINTS = (BEFORE, DECIDED)
#: (action, point), drawn with equal weights; the worker's failpoints strike in approved calls
#: (every write that runs is one) and at the hand-over their chunks' soft limit makes
APPROVAL_FAULTS: list[tuple[str, str]] = [
    *[
        (action, point)
        for action in ("kill_child", "kill_worker")
        for point in ("tool.before_start", "tool.after_effect", "chunk.handoff", DECIDED)
    ],
    ("soft_limit", "tool.after_effect"),
    ("duplicate", "chunk.handoff"),
    ("duplicate", DECIDED),
    ("redis_restart", BEFORE),
    ("redis_restart", DECIDED),
]


def strike(cluster: Cluster, trial: Trial, turn_id: str, run_id: str | None) -> None:
    """The runner's own fault at a decision: ``trial.action`` around it."""
    if trial.action == "redis_restart":
        cluster.restart_redis(trial.outage_s)
    elif trial.action == "kill_worker" and cluster.worker is not None:
        cluster.worker.kill_group()
    elif trial.action == "kill_child" and cluster.worker is not None:
        for pid in cluster.worker.children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    elif trial.action == "duplicate" and run_id is not None:
        mode = cluster.runtime.ledger.meta(turn_id).mode
        cluster.runtime.lifecycle.dispatcher.dispatch(turn_id, run_id, str(mode))


@dataclass
class Decider:
    """The person of one trial: decides each open request of a waiting turn once its moment
    came, and makes the runner's fault at the ``nth`` decision."""

    cluster: Cluster
    trial: Trial
    #: called with the seconds a fault of the runner's own took (not the turn's time)
    paused: Callable[[float], None]
    #: approval_id -> when its decision is due (monotonic)
    due: dict[str, float] = field(default_factory=dict)
    #: approval_id -> the decision taken
    made: dict[str, str] = field(default_factory=dict)
    struck: bool = False

    @property
    def counts(self) -> Counter[str]:
        return Counter(self.made.values())

    def look(self, turn_id: str, meta: TurnMeta) -> None:
        now = time.monotonic()
        for approval_id in meta.pending_approvals:
            if approval_id in self.made:
                continue
            if approval_id not in self.due:
                _, delay = self.trial.person.decision(len(self.due))
                self.due[approval_id] = now + delay
            elif now >= self.due[approval_id]:
                self.decide(turn_id, approval_id)

    def decide(self, turn_id: str, approval_id: str) -> None:
        runtime = self.cluster.runtime
        index = len(self.made)
        decision, _ = self.trial.person.decision(index)
        strikes = self.trial.point in DECISION_POINTS and not self.struck
        strikes = strikes and index >= self.trial.person.nth
        if strikes and self.trial.point == BEFORE:
            self.fault(turn_id, None)
        request = next(
            env.event
            for env in runtime.ledger.read_turn(turn_id)
            if isinstance(env.event, ApprovalRequested) and env.event.approval_id == approval_id
        )
        decided = runtime.lifecycle.decide(
            turn_id, approval_id, decision, request.signature, reason="chaos", by="chaos"
        )
        if decided.ok or decided.decision is not None:
            # taken (or taken already: a decision sent again after a cut-off connection)
            self.made[approval_id] = decided.decision or decision
        if strikes and self.trial.point == DECIDED and decided.ok:
            self.fault(turn_id, decided.run_id)

    def fault(self, turn_id: str, run_id: str | None) -> None:
        self.struck = True
        before = time.monotonic()
        strike(self.cluster, self.trial, turn_id, run_id)
        self.paused(time.monotonic() - before)
