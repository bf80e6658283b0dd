"""A chaos trial's draw (``Trial``): its fault, where it strikes, the turns' mode and, in an
approval trial, what its person decides (``Person``), in a conversation trial, what the runner
sends mid-turn (``Second``), in a timer trial, how long each turn waits (``Timer``); with the
tables the faults are drawn from.

Below both ``chaos.runner``, which runs the trials, and ``chaos.approvals``, which plays the
person: each takes the trial from here, so neither imports the other back.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from chaos.cluster import BACKLOG, DEFAULT, STORE, Cluster, Profile
from chaos.failover import HOWS
from chaos.invariants import WRITES

#: store faults: the action, and the range of its outage in seconds (down, or paused)
STORE_FAULTS: dict[str, tuple[float, float]] = {
    "redis_restart": (0.5, 4.0),
    "redis_pause": (1.0, 10.0),
}
#: where a fault of the store strikes: once the turn's stream holds a random number of events,
#: between a write's side effect and its tool_done, during the hand-over to the next chunk (its
#: two steps kept apart there), and right after a hand-over that sent its message in its step
STORE_POINTS = ("-", "tool.after_effect", "chunk.handoff", "chunk.sent")
#: the action of a failover of the Sentinel-monitored master (its trials are drawn only from
#: ``FAILOVER_FAULTS``, on a ``SentinelCluster``)
FAILOVER = "failover"
FAILOVER_FAULTS: list[tuple[str, str]] = [(FAILOVER, point) for point in STORE_POINTS]
#: (action, failpoint), drawn with equal weights; the actions of ``RUNNER_FAULTS`` and
#: ``backlog`` are the runner's own (at a failpoint, the runner strikes once the worker reports
#: the point reached and waits there for the outage)
FAULTS: list[tuple[str, str]] = [
    *[
        (action, point)
        for action in ("kill_child", "kill_worker")
        for point in (
            "tool.before_start",
            "tool.after_effect",
            "tool.after_done",
            "chunk.handoff",
            "chunk.sent",
        )
    ],
    ("soft_limit", "tool.after_effect"),
    ("duplicate", "chunk.handoff"),
    ("drop", "chunk.handoff"),
    ("sigterm", "-"),
    ("backlog", "-"),
    *[(action, point) for action in STORE_FAULTS for point in STORE_POINTS],
]
#: faults a gevent run does not draw, and why: each means something else, or nothing, where a
#: turn's chunks are greenlets of the worker's one process (docs/deploy.md)
NOT_UNDER_GEVENT = {
    # the failpoint SIGKILLs its own process: under gevent that is the whole worker, with every
    # turn of the trial in it, which is ``kill_worker`` at the same five points (drawn anyway)
    "kill_child": "SIGKILL of the process running the chunk is kill_worker there: no pool child",
    # the failpoint sends the process SIGUSR1, prefork's soft limit; a gevent worker's main
    # process takes SIGUSR1 as Celery's stack dump, and its soft limit is dres's timer in each
    # greenlet instead, which cuts every turn of every gevent trial anyway (the third step
    # waits 1 s on the model, the limit is 0.5 s) wherever its many turns are; one landing
    # inside a write is tests/integration/test_gevent_pool.py's
    "soft_limit": "its failpoint is SIGUSR1, prefork's soft limit; gevent's is dres's own timer,"
    " which cuts every turn of every trial",
}
#: faults the runner makes itself, given the trial: at point ``-`` once the (first) turn's
#: stream holds a random number of events, else once the failpoint fired
RUNNER_FAULTS: dict[str, Callable[[Cluster, Trial], None]] = {
    "redis_restart": lambda cluster, trial: cluster.restart_redis(trial.outage_s),
    "redis_pause": lambda cluster, trial: cluster.pause_redis(trial.outage_s),
    "sigterm": lambda cluster, _: cluster.terminate_worker(),
    FAILOVER: lambda cluster, trial: cluster.fail_over(trial.how),
}
#: turns a backlog trial enqueues at once: with one pool process, the last one's first chunk
#: and every turn's second chunk wait behind several soft limits' worth of chunks
BACKLOG_TURNS = 6
#: the kind's name (``--only approval``): its trials are drawn only from
#: ``chaos.approvals.APPROVAL_FAULTS``
APPROVAL = "approval"
#: the worker's setting: every write of the chaos tools waits for a person
APPROVAL_ENV = (("DRES_APPROVAL", ",".join(sorted(WRITES))),)
#: the approval trials' workers: the default's and the store faults' profiles, with approvals
APPROVAL_DEFAULT = Profile(DEFAULT.concurrency, (*DEFAULT.env, *APPROVAL_ENV))
APPROVAL_STORE = Profile(STORE.concurrency, (*STORE.env, *APPROVAL_ENV))
#: seconds after the turn is seen waiting within which the person decides
DECIDE_S = 1.5
#: the share of decisions that deny
DENY_P = 0.2
#: decisions drawn per trial (more are approvals): a turn asks three times, plus one per denial
#: of a call the model makes again
DRAWN = 8
#: the ``nth`` decision a runner's fault strikes at is one of the first three (every turn makes
#: those)
NTH = 3


@dataclass(frozen=True)
class Person:
    """What a trial's person will decide, drawn from the seed alone: the ``i``-th decision
    (``decisions[i]``, ``delays[i]`` seconds after the request is seen), and at which one the
    runner's own fault strikes."""

    decisions: tuple[str, ...] = ()
    delays: tuple[float, ...] = ()
    nth: int = 0

    @classmethod
    def draw(cls, rng: random.Random) -> Person:
        decisions = tuple("deny" if rng.random() < DENY_P else "approve" for _ in range(DRAWN))
        delays = tuple(round(rng.uniform(0.0, DECIDE_S), 2) for _ in range(DRAWN))
        return cls(decisions, delays, rng.randrange(NTH))

    def decision(self, index: int) -> tuple[str, float]:
        if index < len(self.decisions):
            return self.decisions[index], self.delays[index]
        return "approve", 0.0


#: the kind's name (``--only conversation``): its trials are drawn only from
#: ``chaos.conversations.CONVERSATION_FAULTS``
CONVERSATION = "conversation"
#: what a conversation trial sends mid-turn: a second message under ``double_text`` queue or
#: interrupt, a regenerate (a fork of the first turn), the first message again (same id, text)
SECONDS = ("queue", "interrupt", "regenerate", "retry")
#: how it is sent: ``Lifecycle.enqueue`` / ``fork`` (as POST /v1/turns and /fork do), or
#: ``Lifecycle.send`` (as the chat protocols do, matching the message by its id)
VIAS = ("turns", "chat")
#: the first turn's stream holds between these many events when the second is sent (if it ends
#: before, the second is sent once it has ended; a turn of the trial's script has 36 or so)
AT_EVENTS = (2, 40)
#: seconds each write of a conversation trial takes between its start and its effect (drawn): a
#: second message may then land while one executes (it finishes and is recorded; a fork waits)
SLOW_S = (0.0, 0.0, 0.1, 0.3)
#: the share of conversation trials whose second message is sent as the worker's fault fires
AT_FAULT_P = 0.4
#: hits of a tool failpoint a conversation trial may pass over besides the usual ones, so that
#: the fault strikes the second turn too
LATER_HITS = 4


@dataclass(frozen=True)
class Second:
    """What a conversation trial sends while its first turn runs (or once it ended), drawn from
    the seed alone: ``action`` (``SECONDS``), once the first turn's stream holds ``at_events``;
    ``via`` (``VIAS``); whether the first turn came through its conversation's line (``line``:
    sent with a conversation id) or started one (none given, as a first POST /v1/turns does)."""

    action: str = ""
    at_events: int = 0
    via: str = ""
    line: bool = False
    #: tool failpoint hits passed over besides the trial's ``skip``
    later: int = 0
    #: seconds each write takes between its start and its effect (``chaos.tools.slow_key``)
    slow_s: float = 0.0
    #: sent the moment the worker's fault fires instead (a run just killed at a write's effect:
    #: the new message or fork meets a turn whose run is dead, its write interrupted), or once
    #: the first turn ended if it never does
    at_fault: bool = False

    @classmethod
    def draw(cls, rng: random.Random) -> Second:
        action, via = rng.choice(SECONDS), rng.choice(VIAS)
        at_events, line = rng.randrange(*AT_EVENTS), rng.random() < 0.5
        later, slow_s = rng.randrange(LATER_HITS), rng.choice(SLOW_S)
        return cls(action, at_events, via, line, later, slow_s, rng.random() < AT_FAULT_P)

    @property
    def hits_later(self) -> int:
        """Tool failpoint hits to pass over besides the trial's: only when the fault may aim at
        a second turn's own writes (a new message's; a fork's are mostly answered from the
        record, a retry has none) and not at the moment the second message is sent."""
        return self.later if self.action in ("queue", "interrupt") and not self.at_fault else 0


#: tenants a tenant trial's turns belong to (drawn)
TENANTS = (2, 3)


def draw_tenants(rng: random.Random, limit: int) -> tuple[int, ...]:
    """A tenant trial's turns per tenant: the first tenant enqueues more than ``limit`` at once
    (1 to ``limit + 1`` more, so that its bound binds), each other 1 to ``limit + 1``."""
    first = limit + rng.randint(1, limit + 1)
    return (first, *(rng.randint(1, limit + 1) for _ in range(rng.choice(TENANTS) - 1)))


#: the kind's name (``--only timer``): its trials are drawn only from ``chaos.timers.TIMER_FAULTS``
TIMER = "timer"
#: turns a timer trial runs (the first alone, the others once it waits: ``chaos.timers``)
TIMER_TURNS = 3
#: the range of each turn's wait, in seconds
TIMER_S = (1.0, 3.0)
#: how far into the first turn's wait a runner's fault ``waiting`` strikes (a share of it)
INTO = (0.1, 0.9)


@dataclass(frozen=True)
class Timer:
    """A timer trial's draw, from the seed alone: each turn's wait (``seconds[k]``, the
    ``chaos_wait`` of its script, the first the longest), and how far into the first turn's wait
    (``into``, a share of it) the runner's fault at ``waiting`` strikes."""

    seconds: tuple[float, ...] = ()
    into: float = 0.0

    @classmethod
    def draw(cls, rng: random.Random) -> Timer:
        # the first turn's the longest: the faults strike it, and a crash pickup of its run (a
        # lease, 1.5 s, after the crash) then comes before its time more often
        drawn = [round(rng.uniform(*TIMER_S), 1) for _ in range(TIMER_TURNS)]
        return cls(tuple(sorted(drawn, reverse=True)), round(rng.uniform(*INTO), 2))


@dataclass(frozen=True)
class Trial:
    """One trial's draw: its fault, where it strikes, and the turns' mode."""

    action: str
    point: str
    mode: str
    #: hits of the failpoint passed over before the fault fires
    skip: int
    #: events of the first turn's stream after which the runner's own fault strikes
    kill_after: int | None
    naive: bool
    #: seconds of a store fault's outage (redis-server down, or paused); 0 for other faults
    outage_s: float = 0.0
    #: how a failover is made (``chaos.failover.HOWS``); empty for other faults
    how: str = ""
    #: an approval trial (``chaos.approvals``): every write waits for ``person``'s decisions
    approval: bool = False
    person: Person = field(default_factory=Person)
    #: turns enqueued beside the one the fault aims at (a gevent run's many turns in flight;
    #: set after the draw, which it never changes)
    flight: int = 0
    #: a conversation trial's second message (``chaos.conversations``); none in the others
    second: Second = field(default_factory=Second)
    #: a tenant trial's bound (``DRES_TENANT_CONCURRENCY``; 0: not a tenant trial) and its
    #: tenants' turns, the first tenant's (with the turn the fault aims at) more than ``limit``
    limit: int = 0
    tenants: tuple[int, ...] = ()
    #: a timer trial's waits (``chaos.timers``); none in the others
    timer: Timer = field(default_factory=Timer)

    @classmethod
    def draw(
        cls,
        rng: random.Random,
        naive: bool,
        faults: Sequence[tuple[str, str]] = FAULTS,
        approval: bool = False,
        conversation: bool = False,
        limit: int = 0,
        timer: bool = False,
    ) -> Trial:
        # The draws depend on the seed alone, never on an outcome: a naive run meets the same
        # faults in the same order.
        action, point = rng.choice(faults)
        mode = rng.choice(["background", "background", "foreground"])
        skip = rng.randrange(3) if point.startswith("tool.") else 0
        kill_after = rng.randrange(3, 20) if action in RUNNER_FAULTS and point == "-" else None
        outage_s = round(rng.uniform(*STORE_FAULTS[action]), 2) if action in STORE_FAULTS else 0.0
        if action == "backlog":
            mode = "foreground"  # a foreground turn is the one a lost handoff would stop
        how = rng.choice(HOWS) if action == FAILOVER else ""  # last: the other draws stay
        person = Person.draw(rng) if approval else Person()  # and only for an approval trial
        second = Second.draw(rng) if conversation else Second()  # and for a conversation trial
        if point.startswith("tool."):
            skip += second.hits_later
        drawn = (action, point, mode, skip, kill_after, naive, outage_s, how, approval, person)
        tenants = draw_tenants(rng, limit) if limit else ()  # and only for a tenant trial
        waits = Timer.draw(rng) if timer else Timer()  # and only for a timer trial
        if timer and point.startswith("tool."):
            skip = 1  # the first turn's second call, its chaos_wait (its turns come one by one)
        drawn = (action, point, mode, skip, *drawn[4:])
        return cls(*drawn, second=second, limit=limit, tenants=tenants, timer=waits)

    @property
    def store(self) -> bool:
        """A fault of the store itself: the worker must ride it out in the same process."""
        return self.action in STORE_FAULTS or self.action == FAILOVER

    @property
    def profile(self) -> Profile:
        if self.approval:
            return APPROVAL_STORE if self.store else APPROVAL_DEFAULT
        return BACKLOG if self.backlog else STORE if self.store else DEFAULT

    @property
    def backlog(self) -> bool:
        return self.action == "backlog"

    @property
    def timed(self) -> bool:
        """A timer trial (``chaos.timers``)."""
        return bool(self.timer.seconds)

    @property
    def turns(self) -> int:
        if self.timed:
            return TIMER_TURNS + self.flight
        if self.tenants:
            return sum(self.tenants)
        if self.flight:
            return 1 + self.flight
        return BACKLOG_TURNS if self.backlog else 1

    @property
    def most_running(self) -> int:
        """A tenant trial's turns that may run at once, all tenants at their bound."""
        return sum(min(self.limit, n) for n in self.tenants)

    @property
    def waves(self) -> int:
        """A tenant trial's turns of its busiest tenant, in rounds of ``limit`` at once."""
        return max((-(-n // self.limit) for n in self.tenants), default=0)

    @property
    def fault(self) -> str:
        label = self.action
        if self.backlog and not self.tenants:  # a tenant trial's turns are drawn
            label += f" x{self.turns}"
        if self.flight and not self.backlog:
            label += f" x{self.turns}"
        if self.approval:
            label = f"{APPROVAL}/{label}"
        if self.second.action:
            label = f"{self.second.action}/{label}"
        if self.timed:
            label = f"{TIMER}/{label}"
        if self.how:
            label += f"/{self.how}"
        where = f" {self.point}" if self.point != "-" else ""
        return f"{label}{where} ({self.mode})"
