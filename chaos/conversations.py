"""The ``conversation`` trials (``make chaos KINDS=conversation``): a turn of writes in a
conversation, and mid-turn a second message to the same conversation (docs/semantics.md: one live
turn per conversation; forks).

The first turn is the other trials' (send, charge, a note whose step outlasts the soft limit, a
read; restart-mode model), sent with a message id, into a new conversation through its line or,
as a first ``POST /v1/turns`` without a conversation, starting one. Once its stream holds a
number of events drawn from the seed (or once it ended, if it ends before), the runner sends
(``chaos.trial.Second``):
- ``queue``: a second message under ``double_text=queue``: held until the first turn ends;
- ``interrupt``: a second message under ``double_text=interrupt``: the first turn stops at its
  next safe point (``superseded``), then the second runs;
- ``regenerate``: a fork of the first turn (live, or just ended) with its own message: it
  replaces the first, which stops ``superseded`` if still live, and inherits its journal;
- ``retry``: the first message again, same id and text: it returns the first turn and records
  nothing;
each through ``Lifecycle.enqueue``/``fork`` (as ``POST /v1/turns`` and ``/fork`` do) or
``Lifecycle.send`` (as the chat protocols do, matching the message by its id). The second
message's turn runs the same script: a new message repeats the writes (a new request may), a
fork must not. One worker fault of ``CONVERSATION_FAULTS`` strikes as in the other trials, at the
first turn's failpoints or (passing more hits over) the second's.

Every turn of the conversation is judged by ``chaos.invariants`` (a turn that is no longer the
conversation's newest may end stopped without Continue), and the conversation by
``chaos.conversation_checks``: no two turns' runs overlap, no write twice across a fork, a turn
ends ``superseded`` only when a fork or an interrupting message stopped it and starts no write
after that message was recorded, the list holds the turns sent and a retry recorded nothing.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from chaos import conversation_checks as checks
from chaos.cluster import Cluster
from chaos.invariants import IDEMPOTENT_WRITES
from chaos.report import Outcome, render
from chaos.tools import read_effects, slow_key
from chaos.trial import Trial
from ledger import keys
from ledger.events import ToolBlocked
from worker.base.errors import DresError
from worker.lifecycle.service import TurnOptions

#: (action, failpoint), drawn with equal weights beside the second message: none, the worker's
#: kills at a write's three points and at the hand-over, a soft limit inside a write, a lost or
#: duplicated successor message
CONVERSATION_FAULTS: list[tuple[str, str]] = [
    ("none", "-"),
    *[
        (action, point)
        for action in ("kill_child", "kill_worker")
        for point in ("tool.before_start", "tool.after_effect", "tool.after_done", "chunk.handoff")
    ],
    ("soft_limit", "tool.after_effect"),
    ("duplicate", "chunk.handoff"),
    ("drop", "chunk.handoff"),
]
#: seconds between two looks at the first turn's length while the second message waits, and for
#: how long one look of the runner's goes on looking (a turn's events come in bursts of a few ms)
AIM_S = 0.002
LOOK_S = 0.05
#: the second message's text (the script makes the same calls: a new request may repeat them)
SECOND_MESSAGE = "Send the launch email again, charge 5, note it."


def opening(cluster: Cluster, trial: Trial, model: str) -> TurnOptions:
    """What a trial's turns are sent with: its mode and ``model``; in a conversation trial, a
    message id too (the retry's), and a new conversation's id when it comes through the line
    (and its writes are made as slow as drawn, before its first turn)."""
    options: TurnOptions = {"mode": trial.mode, "model": model}
    if not trial.second.action:
        return options
    cluster.runtime.redis.set(slow_key(), trial.second.slow_s)
    ids = cluster.runtime.lifecycle.ids
    options["message_id"] = ids.new("msg")
    if trial.second.line:
        options["conversation_id"] = ids.new("conv")
    return options


@dataclass
class Sender:
    """Sends a conversation trial's second message once its moment came (once), and judges the
    conversation after the trial."""

    cluster: Cluster
    trial: Trial
    #: the trial's turns (the ``Watch``'s list): the second message's turn joins it
    turn_ids: list[str]
    sent: bool = False
    #: the first turn had not ended when it was sent
    live: bool = False
    #: the turn the second message gave ("": none, refused)
    returned: str = ""
    refused: str = ""
    #: turn -> the turn whose message was sent under ``interrupt`` after it
    superseders: dict[str, str] = field(default_factory=dict)

    def look(self) -> None:
        """Send once the first turn's stream holds ``at_events`` (or the worker's fault fired,
        ``at_fault``) or the turn ended, looking every ``AIM_S`` for ``LOOK_S`` (the runner's
        own looks are far apart)."""
        if self.sent:
            return
        runtime, first = self.cluster.runtime, self.turn_ids[0]
        meta = runtime.ledger.meta(first)
        deadline = time.monotonic() + LOOK_S
        while not meta.ended and not self.due(first):
            if time.monotonic() > deadline:
                return
            time.sleep(AIM_S)
            meta = runtime.ledger.meta(first)
        self.sent, self.live = True, not meta.ended
        try:
            self.returned = self.send(meta.conversation_id, meta.message_id, meta.model or None)
        except DresError as e:
            self.refused = f"the {self.trial.second.action} was refused: {e!r}"
            return
        if self.returned not in self.turn_ids:
            self.turn_ids.append(self.returned)
        if self.trial.second.action == "interrupt":
            self.superseders[first] = self.returned

    def due(self, first: str) -> bool:
        client = self.cluster.runtime.redis
        if self.trial.second.at_fault:
            return bool(client.hexists(keys.chaos_fault(), "fired"))
        return int(client.xlen(keys.turn_events(first))) >= self.trial.second.at_events

    def send(self, conversation_id: str, message_id: str, model: str | None) -> str:
        """Send the second message; the turn it gave."""
        lifecycle, second = self.cluster.runtime.lifecycle, self.trial.second
        chat, first = second.via == "chat", self.turn_ids[0]
        mode = self.trial.mode
        if second.action in ("queue", "interrupt"):
            new_id = lifecycle.ids.new("msg")
            text, double_text = SECOND_MESSAGE, second.action
            if chat:
                sent = lifecycle.send(
                    conversation_id, text, message_id=new_id, double_text=double_text,
                    mode=mode, model=model,
                )  # fmt: skip
                return sent.turn_id
            return lifecycle.enqueue(
                text, conversation_id=conversation_id, message_id=new_id, mode=mode,
                model=model, double_text=double_text,
            ).turn_id  # fmt: skip
        (started,) = self.cluster.runtime.ledger.started([first])
        message = started.message if started is not None else ""
        if second.action == "regenerate":
            if chat:
                regenerated = lifecycle.send(
                    conversation_id, message, message_id=message_id, regenerate=True
                )
                return regenerated.turn_id
            return lifecycle.fork(first).turn_id
        if chat:  # the retry
            return lifecycle.send(
                conversation_id, message, message_id=message_id, mode=mode, model=model
            ).turn_id
        return lifecycle.enqueue(
            message, conversation_id=conversation_id, message_id=message_id, mode=mode,
            model=model,
        ).turn_id  # fmt: skip

    def newest(self, turn_id: str) -> bool:
        """Is ``turn_id`` the conversation's newest turn, the one a person may continue?"""
        return turn_id == self.turn_ids[-1]

    def judge(self, outcome: Outcome) -> None:
        """The conversation's invariants into ``outcome``, and what the trial met into its
        ``line`` counts."""
        runtime, first = self.cluster.runtime, self.turn_ids[0]
        conversation_id = runtime.ledger.meta(first).conversation_id
        listed = runtime.lifecycle.store.lines.turn_ids(conversation_id)
        views = [self.view(turn_id) for turn_id in listed]
        out = [self.refused] if self.refused else []
        if not self.sent:
            out.append(f"the {self.trial.second.action} was never sent")
        elif self.trial.second.action == "retry":
            out += checks.retry_started_nothing(self.returned, first, listed)
        else:
            out += checks.listed_as_sent(listed, self.turn_ids)
        out += checks.other_checks(views, self.superseders)
        outcome.violations += out
        twice = checks.no_write_twice_across_forks(views)
        if self.trial.naive:  # expected there: a naive fork inherits no journal
            outcome.duplicate_notes += twice
        else:
            outcome.violations += twice
        second = self.trial.second
        outcome.line.update(counts(views, live=self.live, via=second.via, slow=second.slow_s > 0))
        outcome.line["at the fault"] += second.at_fault

    def view(self, turn_id: str) -> checks.TurnView:
        runtime = self.cluster.runtime
        meta = runtime.ledger.meta(turn_id)
        return checks.TurnView(
            turn_id,
            runtime.ledger.read_turn(turn_id),
            read_effects(runtime.redis, turn_id),
            str(meta.status),
            meta.code,
            meta.replaced_by,
        )


def counts(
    views: Sequence[checks.TurnView], *, live: bool, via: str, slow: bool = False
) -> Counter[str]:
    """What one trial met: the second message sent while the first turn ran or after it ended,
    and how; whether its writes were slow; turns ended superseded; calls a fork answered from an
    inherited journal (of them, writes left interrupted, refused), and idempotent writes a fork
    ran again with the key of the turn it inherits; the conversation's newest turn completed."""
    found = Counter({"while live" if live else "after its end": 1, f"via {via}": 1})
    found["slow writes"] = int(slow)
    found["superseded"] = sum(v.code == checks.SUPERSEDED for v in views)
    blocked = [
        e.event
        for v in views
        for e in v.envelopes
        if isinstance(e.event, ToolBlocked) and e.event.inherited_from
    ]
    found["inherited blocks"] = len(blocked)
    found["of them interrupted"] = sum(b.reason == "interrupted" for b in blocked)
    found["same-key retries"] = sum(same_key_retries(v, views) for v in views)
    found["newest completed"] = int(bool(views) and views[-1].status == "completed")
    return found


def same_key_retries(fork: checks.TurnView, views: Sequence[checks.TurnView]) -> int:
    """Executions of an idempotent write in ``fork`` with the key of a turn it inherits."""
    inherited = checks.inherited(fork)
    keys = {r["key"] for v in views if v.turn_id in inherited for r in v.effects}
    return sum(r["tool"] in IDEMPOTENT_WRITES and r["key"] in keys for r in fork.effects)


#: the per-action table's columns, after the trials
COLUMNS = (
    "while live",
    "after its end",
    "via turns",
    "via chat",
    "slow writes",
    "at the fault",
    "fired",
    "superseded",
    "inherited blocks",
    "of them interrupted",
    "same-key retries",
    "newest completed",
    "violations",
)


def action_table(outcomes: Sequence[Outcome]) -> str:
    """Per second message (``queue``, ``interrupt``, ``regenerate``, ``retry``): trials, when and
    how it was sent, faults fired, turns superseded, calls answered from an inherited journal,
    trials whose newest turn completed, trials with a violation."""
    rows: dict[str, Counter[str]] = {}
    for o in outcomes:
        row = rows.setdefault(o.fault.split("/")[0], Counter())
        row.update(o.line)
        row["trials"] += 1
        row["fired"] += o.fired
        row["violations"] += bool(o.violations)
    lines = [["second message", "trials", *COLUMNS]]
    for action in sorted(rows):
        lines.append([action, *(str(rows[action][c]) for c in ("trials", *COLUMNS))])
    return render(lines)
