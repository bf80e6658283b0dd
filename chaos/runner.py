"""Chaos trials on a real prefork worker and a real redis-server (``make chaos``), or on a
``dres worker -P gevent`` (``make chaos POOL=gevent``: see below).

Each trial runs one turn of several write tools (one idempotent, one with ``identity``) under a
``restart``-mode model, and injects one fault at a random point: SIGKILL of the pool child or of
the whole worker (before tool_start, between the side effect and tool_done, after tool_done,
during the handoff to the next chunk), a soft limit inside a tool, a duplicated or dropped
successor message, SIGTERM of the worker (a deploy), or a fault of the store itself — the
redis-server that is the ledger and the broker — killed with SIGKILL and restarted on its AOF
after 0.5 to 4 s (``redis_restart``), or stopped with SIGSTOP for 1 to 10 s (``redis_pause``, a
partition stand-in), either once the turn's stream holds a random number of events or exactly
between a write's side effect and its tool_done, or during the hand-over to the next chunk.
A ``backlog`` trial instead enqueues several foreground turns at once on a worker with
one pool process, so each turn's next chunk waits in the queue well past the handoff grace: every
turn must still complete, and the broker must never hold two messages for one run. Then it
checks the invariants of ``chaos.invariants`` on every turn (and after a store fault, that the
worker rode it out in the same process). A stopped foreground turn is
continued, as a person would, at most twice (a backlog turn never: it must not stop).

``failover`` trials (``only=["failover"]``, never mixed with the others, nor drawn by default:
they need a set-up of their own) run the same turn on a Sentinel set-up
(``chaos.failover``): the master is failed over, by ``SENTINEL FAILOVER`` or a SIGKILL, at the
store faults' three points, and the same invariants are checked, the worker's staying up
included; then the old master rejoins as a replica for the next trial.

``approval`` trials (``only=["approval"]``, alone, not drawn by default: they need a worker on
which writes wait for a person, and the runner to play the person) run the same turn with every
write waiting for approval and a fault around a decision (``chaos.approvals``); the same
invariants are checked, and no write ran without an ``approve`` for its signature, none twice
on one approval.

``pool="gevent"`` runs the same trials on ``dres worker -P gevent`` workers (``-c 64``; the
backlog's ``-c 8``), each trial with ``FLIGHT`` (50) more turns enqueued beside the one its fault
aims at, so that a fault strikes a process with many turns in flight; the invariants are checked
on every turn. A fault that kills a process running a turn explains one takeover of each of the
trial's turns (they all ran in it). ``chaos.trial.NOT_UNDER_GEVENT`` lists the faults such a run
does not draw, and why.

``conversation`` trials (``only=["conversation"]``, alone, not drawn by default: the runner
sends a second message of its own mid-turn) run the same turn in a conversation and, at a point
drawn from the seed, a second message under ``queue`` or ``interrupt``, a regenerate (a fork of
the turn) or the same message again, beside a worker fault (``chaos.conversations``); every turn
of the conversation is checked, and the conversation itself (``chaos.conversation_checks``): no
two turns' runs overlap, no write twice across a fork.

``timer`` trials (``only=["timer"]``, alone, not drawn by default: their turns wait on a timer,
on two workers) run turns that note, wait 1 to 3 s (``wait_until``), then send, with a fault
around the wait (``chaos.timers``); besides every invariant, every timer wakes once, never early,
and each wake's lateness is measured (``chaos.timer_checks``).

``limit=N`` (``--tenants N``) runs the default trials with each trial's turns under 2 or 3
tenants, one of them enqueuing more than N at once, on workers and a runner at
``DRES_TENANT_CONCURRENCY=N`` (``chaos.tenants``): besides every turn's invariants, no tenant
had more than N turns in a run at once, and every slot came back after the trial.

``naive=True`` runs the same trials on a worker started with ``DRES_NAIVE=1`` (no journal note,
no hard-block, no interrupted-write guard) and counts the duplicate effects that causes.
"""

from __future__ import annotations

import contextlib
import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from chaos import invariants, tenants, timer_checks, timers
from chaos.approvals import APPROVAL_FAULTS, DECISION_POINTS, Decider
from chaos.cluster import FLIGHT, GEVENT, BrokerCensus, Cluster
from chaos.conversations import Sender, action_table, opening
from chaos.failover import SentinelCluster
from chaos.kinds import drawn
from chaos.report import Outcome, TurnResult, naive_table, table
from chaos.takeovers import WorkerLogs, count, cpu_hog, taken_over
from chaos.timers import TIMER_FLIGHT, TIMER_POINTS, Timekeeper
from chaos.tools import read_effects
from chaos.trial import CONVERSATION, FAILOVER_FAULTS, RUNNER_FAULTS, TIMER, Trial
from ledger import keys
from ledger.errors import LedgerUnavailable
from ledger.store import STORE_ERRORS
from rigs import write_script
from worker.base.logging import configure_logging

#: seconds a trial's turns have to reach a terminal state (beyond a store fault's outage)
BOUND_S = 40.0
#: the same for an approval trial's turn, which also waits for three decisions or more, and for
#: a conversation trial's, which run one after the other
APPROVAL_BOUND_S = 60.0
#: the same for a gevent trial's many turns, which share the one process a fault restarts
FLIGHT_BOUND_S = 60.0
#: seconds the runner's own reads wait for a Redis that does not answer before the trial fails
ANSWER_S = 60.0
#: seconds between looks at the turns (and the broker) while a trial runs
POLL_S = 0.05
T = TypeVar("T")
MESSAGE = "Send the launch email, charge 5, note it."
#: the trials' scripted model, with ``on_resume="restart"``
STEPS: list[dict[str, Any]] = [
    {
        "text": "Sending.",
        "tool_calls": [
            {
                "name": "chaos_send",
                "input": {
                    "to": "ada@example.com",
                    "subject": "Launch",
                    "body": "Friday at 10.",
                },
            }
        ],
    },
    {"tool_calls": [{"name": "chaos_charge", "input": {"amount": 5}}]},
    # Over the soft limit (0.5 s): every turn takes two chunks at least.
    {"delay_s": 1.0, "tool_calls": [{"name": "chaos_note", "input": {"text": "charged"}}]},
    {"tool_calls": [{"name": "chaos_read", "input": {}}]},
    {"text": "All done."},
]


@dataclass
class Watch:
    """Follows a trial's turns until each ends, making the runner's own fault on the way."""

    cluster: Cluster
    turn_ids: list[str]
    trial: Trial
    max_continues: int
    census: BrokerCensus | None = None
    fired: bool = False
    done: set[str] = field(default_factory=set)
    continues: dict[str, int] = field(default_factory=dict)
    #: the person who decides an approval trial's requests (None in the other trials)
    decider: Decider | None = None
    #: who sends a conversation trial's second message (None in the other trials)
    sender: Sender | None = None
    #: a timer trial's hook: its other turns, its fault around a wait (None in the others)
    keeper: Timekeeper | None = None
    #: seconds the runner's own faults took (not the turns' time)
    faults_s: float = 0.0

    def __post_init__(self) -> None:
        if self.trial.approval:
            self.decider = Decider(self.cluster, self.trial, self.pause)
        if self.trial.second.action:
            self.sender = Sender(self.cluster, self.trial, self.turn_ids)

    def pause(self, seconds: float) -> None:
        self.faults_s += seconds

    def run(self) -> None:
        bound = APPROVAL_BOUND_S if self.trial.approval or self.sender is not None else BOUND_S
        if self.trial.flight:
            bound = max(bound, FLIGHT_BOUND_S)
        bound += self.trial.waves * tenants.WAVE_S  # a tenant trial's turns go in rounds
        deadline = time.monotonic() + bound
        # the runner's own faults' time (``faults_s``) is not the turns'
        while self.open() and time.monotonic() < deadline + self.faults_s:
            self.cluster.ensure_worker()
            # Redis may not answer yet (a store fault ends with redis-server still loading its
            # AOF, or the worker's fault left it busy): look again
            with contextlib.suppress(*STORE_ERRORS, LedgerUnavailable):
                before = time.monotonic()
                if self.strikes():
                    self.pause(time.monotonic() - before)  # the fault is not the turn's time
                    continue
                self.look()
            time.sleep(POLL_S)

    def open(self) -> bool:
        """A turn has not ended yet, or the second message is still to be sent."""
        unsent = self.sender is not None and not self.sender.sent
        unsent = unsent or (self.keeper is not None and not self.keeper.sent)
        return unsent or len(self.done) < len(self.turn_ids)

    def strikes(self) -> bool:
        """Make the runner's fault if its moment came (once); True if it did."""
        trial = self.trial
        if self.fired or trial.action not in RUNNER_FAULTS:
            return False
        if trial.point in DECISION_POINTS or trial.point in TIMER_POINTS:  # the hooks' own
            return False
        client = self.cluster.runtime.redis
        if trial.point == "-":
            due = client.xlen(keys.turn_events(self.turn_ids[0])) >= (trial.kill_after or 0)
        else:  # the worker reached the point and waits there for the outage
            due = bool(client.hexists(keys.chaos_fault(), "fired"))
        if due:
            self.fired = True
            RUNNER_FAULTS[trial.action](self.cluster, trial)
        return due

    def fault_fired(self, point_fired: bool) -> bool:
        """Did the trial's fault happen? (``point_fired``: its failpoint was reached.)"""
        trial = self.trial
        if self.decider is not None:
            return self.decider.struck if trial.point in DECISION_POINTS else point_fired
        if self.keeper is not None and trial.point in TIMER_POINTS:
            return self.keeper.struck
        # a store fault at a failpoint fired when the runner struck, not when the point was reached
        return trial.backlog or self.fired or (point_fired and trial.action not in RUNNER_FAULTS)

    def look(self) -> None:
        runtime = self.cluster.runtime
        if self.census is not None:
            self.census.look()
        if self.sender is not None:  # first: it may add a turn, or send once the first ended
            self.sender.look()
        if self.keeper is not None:  # the same: it sends the timer trial's other turns
            self.keeper.look()
        for turn_id in self.turn_ids:
            if turn_id in self.done:
                continue
            meta = runtime.ledger.meta(turn_id)
            if meta.status == "completed":
                self.done.add(turn_id)
            elif meta.status == "stopped":
                self.stopped(turn_id)
            elif meta.status == "waiting" and self.decider is not None:
                self.decider.look(turn_id, meta)

    def stopped(self, turn_id: str) -> None:
        """Continue it as a person would, or leave it stopped (a refusal is judged later, from
        the stream's ``can_continue``)."""
        n = self.continues.get(turn_id, 0)
        if (
            n < self.max_continues
            and self.cluster.runtime.lifecycle.continue_turn(turn_id, auto=False).ok
        ):
            self.continues[turn_id] = n + 1
        else:
            self.done.add(turn_id)


def answered(call: Callable[[], T]) -> T:
    """``call()`` (a read or write of the runner's own), sent again until Redis answers: a
    worker's fault may leave it loading its AOF or busy a moment longer. Past ``ANSWER_S``
    the error is the trial's."""
    deadline = time.monotonic() + ANSWER_S
    while True:
        try:
            return call()
        except (*STORE_ERRORS, LedgerUnavailable):
            if time.monotonic() > deadline:
                raise
            time.sleep(POLL_S)


def arm(client: Any, trial: Trial) -> None:
    """Arm the trial's failpoint fault (none at point ``-``) for the worker's ``Failpoints``."""
    client.delete(keys.chaos_fault())
    if trial.point != "-" and trial.point not in DECISION_POINTS:  # those are the runner's
        armed: dict[str, str | int] = {"point": trial.point, "action": trial.action}
        client.hset(keys.chaos_fault(), mapping={**armed, "skip": trial.skip, "hits": 0})


def run_trial(cluster: Cluster, trial: Trial, script: str, index: int = 0) -> Outcome:
    """Run one trial (``index``: its number, which names a tenant trial's tenants)."""
    client = cluster.runtime.redis
    logs = WorkerLogs(cluster.tmp)
    logs.mark()
    answered(lambda: arm(client, trial))
    cluster.ensure_worker(trial.profile)
    restarts = cluster.restarts
    started = time.monotonic()
    models = timers.models(cluster.tmp, trial, index) if trial.timed else [script]
    options = opening(cluster, trial, models[0])
    owners = tenants.turn_tenants(trial, index) if trial.limit else [""] * trial.turns
    owners = owners[:1] if trial.timed else owners  # the others once the first waits
    turn_ids = []
    for owner in owners:
        if owner:
            options["tenant"] = owner
        turn_ids.append(cluster.runtime.lifecycle.enqueue(MESSAGE, **options).turn_id)
    watch = Watch(
        cluster,
        turn_ids,
        trial,
        max_continues=0 if trial.backlog else 2,
        census=cluster.census() if trial.backlog else None,
    )
    if trial.timed:
        watch.keeper = Timekeeper(cluster, trial, turn_ids, options, models, watch.pause)
    watch.run()
    point_fired = answered(lambda: client.hget(keys.chaos_fault(), "fired")) is not None
    fired = watch.fault_fired(point_fired)
    answered(lambda: client.delete(keys.chaos_fault()))
    outcome = Outcome(trial.fault, [], 0.0, fired)
    if watch.decider is not None:
        outcome.decisions = watch.decider.counts
    for index, turn_id in enumerate(turn_ids):
        prefix = f"turn {index + 1}: " if len(turn_ids) > 1 else ""
        judge(cluster, trial, watch, outcome, turn_id, prefix)
    if watch.sender is not None:
        watch.sender.judge(outcome)
    if trial.timed:
        timers.judge(trial, fired, outcome, watch.keeper.saw if watch.keeper else "")
    if watch.census is not None:
        outcome.violations += invariants.one_message_per_run(watch.census.most)
    if trial.store:
        exits = cluster.restarts - restarts + (not cluster.worker_alive())
        outcome.violations += invariants.worker_stayed(exits)
    if trial.limit:
        turns = dict(zip(turn_ids, owners, strict=True))
        tenants.judge(cluster, trial, turns, outcome, answered)
    # under gevent one process death ends every run of the trial: each turn's takeover is its;
    # a tenant trial's worker killed held each tenant's running turns, as many as its pool
    runs = trial.turns if trial.flight or trial.timed else 1
    if trial.limit and trial.action == "kill_worker":
        runs = min(trial.most_running, cluster.profile.concurrency)
    logged = logs.since()
    outcome.takeovers = count(outcome.taken, timers.killed_as(trial), fired, logged, runs=runs)
    outcome.mended = logged.count(tenants.MENDED)
    outcome.seconds = time.monotonic() - started
    cluster.recover()  # for the next trial, out of this one's time
    return outcome


def judge(
    cluster: Cluster, trial: Trial, watch: Watch, outcome: Outcome, turn_id: str, prefix: str
) -> None:
    """Check one ended turn's invariants into ``outcome``; in a naive run the duplicate-effect
    ones go to its notes, since naive resume is expected to break them."""
    ledger = cluster.runtime.ledger
    meta = answered(lambda: ledger.meta(turn_id))
    envelopes = answered(lambda: ledger.read_turn(turn_id))
    effects = answered(lambda: read_effects(cluster.runtime.redis, turn_id))
    status, code = str(meta.status), meta.code
    end = invariants.last_turn_ended([env.event for env in envelopes])
    soft_limit = trial.action == "soft_limit"
    # a turn no longer its conversation's newest may end stopped without Continue
    newest = watch.sender is None or watch.sender.newest(turn_id)
    others = invariants.other_checks(
        envelopes, effects, status=status, code=code, soft_limit_in_tool=soft_limit, newest=newest
    )
    if trial.backlog:
        others += invariants.completed_despite_backlog(status, code)
    duplicates = invariants.duplicate_checks(envelopes, effects)
    if trial.approval:
        duplicates += invariants.approval_checks([env.event for env in envelopes], effects)
    if trial.timed:
        events = [env.event for env in envelopes]
        continues = watch.continues.get(turn_id, 0)
        others += timer_checks.check(events)
        others += timer_checks.completed(status, code, continues)
        outcome.late += timer_checks.lateness(events)
        outcome.waited_again += timer_checks.waited_again(events)
    if not trial.naive:
        others, duplicates = [*duplicates, *others], []
    outcome.taken += taken_over([env.event for env in envelopes])
    outcome.violations += [prefix + v for v in others]
    outcome.duplicate_notes += [prefix + v for v in duplicates]
    outcome.turns.append(
        TurnResult(
            status=status,
            code=code,
            can_continue=bool(end and end.can_continue),
            continues=watch.continues.get(turn_id, 0),
            timed_out=turn_id not in watch.done,
            duplicates=invariants.duplicate_effects(effects),
        )
    )


def run(
    trials: int,
    seed: int,
    naive: bool = False,
    only: Collection[str] = (),
    hog: int = 0,
    pool: str = "prefork",
    limit: int = 0,
) -> tuple[list[Outcome], Cluster]:
    """Run the trials; ``only``: draw just the faults of these actions (all but ``failover``,
    ``approval``, ``conversation`` and ``timer`` when empty; each of those alone: on a Sentinel
    set-up; on a worker where writes wait for a person; with a second message mid-turn; turns
    that wait on a timer, on two workers); ``hog``: busy loops beside the worker;
    ``pool``: the workers' (gevent: ``FLIGHT`` more turns in each trial); ``limit``: a tenant's
    bound (``chaos.tenants``; 0: no tenant trials)."""
    faults = drawn(only, pool)
    approval, timed = faults == APPROVAL_FAULTS, TIMER in only
    if limit and (approval or timed or faults == FAILOVER_FAULTS or CONVERSATION in only):
        raise ValueError("tenant trials are the default kinds' (store faults among them)")
    rng = random.Random(seed)
    tmp = Path(tempfile.mkdtemp(prefix="dres-chaos-"))
    script = write_script(tmp / "script.json", STEPS, on_resume="restart")
    sentinel = faults == FAILOVER_FAULTS
    if approval or timed or CONVERSATION in only or limit:
        # decisions, second messages, turns waiting for their tenant: the trials' lines say enough
        configure_logging("WARNING")
    cluster = (
        SentinelCluster(tmp, naive=naive)
        if sentinel
        else Cluster(tmp, naive=naive, pool=pool, tenants=limit, pair=timed)
    )
    outcomes: list[Outcome] = []
    try:
        with cpu_hog(hog):
            trial_loop(cluster, rng, trials, faults, script, outcomes, CONVERSATION in only)
    finally:
        cluster.close()
    return outcomes, cluster


def trial_loop(
    cluster: Cluster,
    rng: random.Random,
    trials: int,
    faults: Sequence[tuple[str, str]],
    script: str,
    outcomes: list[Outcome],
    conversation: bool = False,
) -> None:
    """Draw and run each trial into ``outcomes``, printing its line as it ends;
    ``conversation``: each with a second message mid-turn (``chaos.conversations``)."""
    # a timer trial's turns run on two workers (``Cluster.pair``)
    naive, approval, timed = cluster.naive, faults == APPROVAL_FAULTS, cluster.pair
    # a conversation trial's turns are its conversation's, a tenant trial's its tenants': no
    # turns in flight beside them
    limit = cluster.tenants
    flight = FLIGHT if cluster.pool == GEVENT and not conversation and not limit else 0
    flight = min(flight, TIMER_FLIGHT) if timed else flight
    for index in range(trials):
        draw = Trial.draw(rng, naive, faults, approval, conversation, limit, timed)
        trial = replace(draw, flight=flight)
        outcome = run_trial(cluster, trial, script, index + 1)
        outcomes.append(outcome)
        mark = "VIOLATION" if outcome.violations else "ok"
        if approval:
            made = outcome.decisions
            mark += f"  {made['approve']} approved, {made['deny']} denied"
        if naive:
            mark += f"  {outcome.duplicates} duplicate effect(s)"
        if timed:
            mark += timers.wakes(outcome)
        if outcome.takeovers.false:
            mark += f"  {outcome.takeovers.false} FALSE TAKEOVER(S)"
        print(
            f"[{index + 1:>3}/{trials}] {outcome.fault:<44} -> {outcome.status:<10} "
            f"{outcome.seconds:5.1f} s  {mark}",
            flush=True,
        )
        for violation in outcome.violations:
            print(f"        ! {violation}", flush=True)
        for note in outcome.duplicate_notes:
            print(f"        = {note}", flush=True)
        for line in outcome.details:
            print(f"          {line}", flush=True)


def main(
    trials: int,
    seed: int,
    naive: bool = False,
    only: Collection[str] = (),
    hog: int = 0,
    pool: str = "prefork",
    limit: int = 0,
) -> int:
    """Run the trials and print the tables; 1 if any invariant broke (in a naive run: any but
    the duplicate-effect ones, which naive resume is expected to break). ``hog``: busy loops
    beside the worker for the whole run; ``pool``: the workers'."""
    started = time.monotonic()
    outcomes, cluster = run(trials, seed, naive, only, hog, pool, limit)
    print()
    print(table(outcomes))
    if any(o.line for o in outcomes):
        print("\nper second message:\n")
        print(action_table(outcomes))
    if naive:
        print("\nnaive resume (DRES_NAIVE=1):\n")
        print(naive_table(outcomes))
    violations = sum(bool(o.violations) for o in outcomes)
    mode = "naive resume" if naive else "dres"
    turns = sum(len(o.turns) for o in outcomes)
    print(
        f"\n{len(outcomes)} trials ({mode}, {pool} workers, {turns} turns), seed {seed}, "
        f"{violations} with violations, "
        f"{sum(o.duplicates for o in outcomes)} duplicate effects, {cluster.restarts} worker "
        f"restarts, {cluster.switches} worker switches, {time.monotonic() - started:.0f} s"
    )
    taken = [o.takeovers for o in outcomes]
    print(
        f"takeovers: {sum(t.taken for t in taken)}, {sum(t.deaths for t in taken)} process "
        f"deaths (the faults' kills, hard limits); false takeovers (of live runs): "
        f"{sum(t.false for t in taken)}, {sum(t.zombies for t in taken)} live runs found their "
        f"turn taken; CPU hog: {hog} busy loop(s)"
    )
    decisions = sum((o.decisions for o in outcomes), Counter[str]())
    if decisions:
        print(
            "decisions: "
            + ", ".join(f"{n} {what}" for what, n in sorted(decisions.items()))
            + f"; {sum(o.continues for o in outcomes)} continues"
        )
    if limit:
        reached = sum(o.reached for o in outcomes)
        print(
            f"tenants: at most {limit} running each (DRES_TENANT_CONCURRENCY); {reached} of "
            f"{len(outcomes)} trials had a tenant at {limit} running at once; "
            f"{sum(o.mended for o in outcomes)} slots left behind given back by a reaper's mend"
        )
    late = [(s, o.late_explained) for o in outcomes for s in o.late]
    if late:
        quiet = [s for s, explained in late if not explained]
        print(
            f"timer wakes: {len(late)}, at most {max(s for s, _ in late):.2f} s late; in trials "
            f"with no outage {len(quiet)}, at most {max(quiet, default=0):.2f} s late, "
            f"{sum(s > timers.LATE_S for s in quiet)} later than {timers.LATE_S} s; "
            f"{sum(o.waited_again for o in outcomes)} runs begun before the time waited again"
        )
    if isinstance(cluster, SentinelCluster):
        made = cluster.failovers
        print(f"failovers: {made['command']} by SENTINEL FAILOVER, {made['kill']} by SIGKILL")
    return 1 if violations else 0
