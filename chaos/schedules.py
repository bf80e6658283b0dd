"""Chaos trials of schedules (``make chaos KINDS=schedule``; alone, never drawn otherwise: they
need two workers and no turn of the runner's own), on either pool.

Each trial runs two workers, whose reapers race to fire every due tick (``Lifecycle.
fire_due_schedules``), and makes 1 to 3 schedules (``every`` 1 or 2 s, an ``at`` 1 to 2 s
ahead; ``catch_up`` one) whose turns do one chaos write and answer. They tick for 5 to 8 s
(longer after a fault that may hold a tick's claim, so ticks come again before the end) while
one fault strikes:
- a worker's failpoint in the reaper's look at a due schedule: SIGKILL of that worker holding
  the tick's claim (``schedule.claimed``) or right after the tick's turn was made, before the
  schedule moved on (``schedule.started``); SIGSTOP of it holding the claim (``sigstop``), sent
  SIGCONT by the runner around the claim's expiry (the other reaper fires the tick meanwhile:
  the paused one must not start a second turn);
- the runner's own, the moment a tick's turn appears (``tick.turn``): SIGKILL of one worker,
  of both workers' pool processes, or a second chunk message for the turn's run (``duplicate``);
- the runner's own, as a tick comes due (``tick.due``): SIGKILL of both workers, which start
  again 2.5 to 4 intervals later (the ticks missed: ``catch_up`` one fires one), or a
  redis-server restart (down 0.5 to 3 s).
Then the schedules are deleted and the ticks' turns run to their end. Every turn's invariants are
checked (``chaos.runner.judge``), and the schedules' (``chaos.schedule_checks``): no tick twice,
none early, none off the schedule's ticks, ticks keep coming, an ``at`` fires once, none after
the deletion. Each trial's line says the ticks fired and the latest a tick's turn started after
its tick.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from chaos import schedule_checks
from chaos.cluster import GEVENT, STORE, Cluster, under
from chaos.report import Outcome, table
from chaos.runner import POLL_S, Watch, answered, arm, judge
from chaos.schedule_checks import Fired, Made
from chaos.trial import Trial
from ledger import keys
from ledger.codec import text
from ledger.errors import LedgerUnavailable
from ledger.events import TurnStarted
from ledger.store import STORE_ERRORS
from rigs import WorkerProcess, write_script
from worker.base.logging import configure_logging
from worker.lifecycle.schedules import CLAIM_MS, tick_turn_id
from worker.lifecycle.service import Lifecycle

KIND = "schedule"
#: the workers' failpoints in the reaper's look at a due schedule (worker/lifecycle/schedules.py)
CLAIMED, STARTED = "schedule.claimed", "schedule.started"
#: the runner's own points: a tick's turn just made, a tick about to come due
TURN, DUE = "tick.turn", "tick.due"
#: (action, point), drawn with equal weights
FAULTS: list[tuple[str, str]] = [
    ("kill_worker", CLAIMED),
    ("kill_worker", STARTED),
    ("sigstop", CLAIMED),
    ("kill_worker", TURN),
    ("kill_child", TURN),
    ("duplicate", TURN),
    ("kill_both", DUE),
    ("redis_restart", DUE),
]
#: faults a gevent run does not draw: no pool processes to kill apart from the worker
NOT_UNDER_GEVENT = {"kill_child"}
#: the ticks' turns: one write, then the answer
STEPS: list[dict[str, Any]] = [
    {"tool_calls": [{"name": "chaos_note", "input": {"text": "tick"}}]},
    {"text": "Ticked."},
]
MESSAGE = "Note the tick."
#: seconds of ticks a trial lets come (drawn), and at least this long after its fault ended
TICKING_S = (5.0, 8.0)
AFTER_FAULT_S = 3.0
#: intervals of the ``every`` schedules, in seconds
EVERY_S = (1, 2)
#: an ``at`` schedule's time, seconds ahead
AT_S = (1.0, 2.0)
#: a ``tick.due`` fault strikes this long before its tick (s, drawn)
LEAD_S = (0.0, 0.3)
#: kill_both: the workers are down this many intervals of the first schedule (drawn)
DOWN_INTERVALS = (2.5, 4.0)
#: redis_restart: seconds down (drawn)
REDIS_DOWN_S = (0.5, 3.0)
#: sigstop: seconds the worker stays stopped, around the claim's expiry (drawn)
STOPPED_S = (CLAIM_MS / 1000 - 1.0, CLAIM_MS / 1000 + 2.0)
#: seconds a claim may be held by a worker a fault took away, beside the outage itself
CLAIM_S = CLAIM_MS / 1000
#: seconds the ticks may go on past their drawn time for the fault to strike (it aims at one of
#: the first schedule's first three ticks, 2 s apart at most, the first one 2 s after its making)
REACH_S = 5.0
#: seconds of a busy host's delays a gap between ticks may take besides (two shared vCPUs)
SLACK_S = 3.0
#: seconds the runner waits for a stopped worker to show it stopped
STOP_SEEN_S = 5.0


@dataclass(frozen=True)
class Ticks:
    """A trial's draw beside its fault, from the seed alone: the schedules (``every`` seconds,
    ``None`` for an ``at``), how long they tick, which tick of the first the fault aims at,
    and the fault's own numbers."""

    schedules: tuple[int | None, ...]
    ticking_s: float
    at_s: float
    #: the fault aims at the first schedule's ``nth`` tick (0: its first)
    nth: int
    lead_s: float
    #: kill_both: intervals down; redis_restart: seconds down; sigstop: seconds stopped
    outage: float
    #: kill_worker at ``tick.turn``: which worker (0, 1)
    victim: int

    @classmethod
    def draw(cls, rng: random.Random, action: str) -> Ticks:
        more = tuple(rng.choice((*EVERY_S, None)) for _ in range(rng.randrange(3)))
        schedules = (rng.choice(EVERY_S), *more)
        ticking_s, at_s = round(rng.uniform(*TICKING_S), 1), round(rng.uniform(*AT_S), 1)
        nth, lead_s = rng.randrange(3), round(rng.uniform(*LEAD_S), 2)
        outage = {"kill_both": DOWN_INTERVALS, "redis_restart": REDIS_DOWN_S}.get(action, STOPPED_S)
        drawn = round(rng.uniform(*outage), 2)
        return cls(schedules, ticking_s, at_s, nth, lead_s, drawn, rng.randrange(2))


def draw(rng: random.Random, pool: str) -> tuple[Trial, Ticks]:
    faults = [f for f in FAULTS if pool != GEVENT or f[0] not in NOT_UNDER_GEVENT]
    action, point = rng.choice(faults)
    ticks = Ticks.draw(rng, action)
    skip = ticks.nth if point in (CLAIMED, STARTED) else 0
    return Trial(action, point, "background", skip, None, False), ticks


@dataclass
class PairCluster(Cluster):
    """``Cluster``'s redis-server and two workers of one profile (``workers``), each in a
    process group of its own, whose reapers race for every tick."""

    workers: list[WorkerProcess | None] = field(default_factory=lambda: [None, None])

    def ensure_worker(self, profile: object = None) -> None:
        """Both workers live: each dead one started again (all at once, then waited for)."""
        wanted = under(self.pool, STORE)
        self.profile = wanted
        env = {**self.env, **dict(wanted.env)}
        started = []
        for slot, old in enumerate(self.workers):
            if old is not None and old.alive():
                continue
            if old is not None:
                self.restarts += 1
                old.stop()
            extra: tuple[str, ...] = ("-n", f"w{slot}@%h")
            extra += ("-P", GEVENT) if wanted.pool == GEVENT else ()
            log = self.tmp / f"worker{slot}-{self.restarts}.log"
            worker = WorkerProcess.start(
                env, log, concurrency=wanted.concurrency, extra=extra, ready=False
            )
            self.workers[slot] = worker
            started.append(worker)
        for worker in started:
            worker.wait_ready(timeout=60)
        self.worker = self.workers[0]

    def worker_alive(self) -> bool:
        return all(w is not None and w.alive() for w in self.workers)

    def live(self) -> list[WorkerProcess]:
        return [w for w in self.workers if w is not None and w.alive()]

    def signal_all(self, sig: signal.Signals) -> None:
        for worker in self.live():
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, sig)

    def close(self) -> None:
        self.signal_all(signal.SIGCONT)
        for worker in self.workers:
            if worker is not None:
                worker.stop()
        self.stop_store()


def stopped(pid: int) -> bool:
    """Is the process stopped (SIGSTOP)?"""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, IndexError):
        return False


@dataclass
class Ticker:
    """A trial's schedules and its fault: makes them, strikes once, deletes them."""

    cluster: PairCluster
    trial: Trial
    ticks: Ticks
    script: str
    made: list[Made] = field(default_factory=list)
    struck: bool = False
    #: the trial's outage (ms): a gap of ticks may be this much longer
    outage_ms: int = 0
    #: every worker down, from-to (ms)
    down: tuple[int, int] | None = None
    deleted_ms: int = 0
    #: what the runner saw as it struck
    saw: str = ""

    @property
    def lifecycle(self) -> Lifecycle:
        return self.cluster.runtime.lifecycle

    def ms(self) -> int:
        return int(self.lifecycle.ms())

    def make(self) -> None:
        for every in self.ticks.schedules:
            at = None if every is not None else _iso(time.time() + self.ticks.at_s)
            add = partial(
                self.lifecycle.add_schedule, MESSAGE, at=at, every=every, model=self.script
            )
            made = answered(partial(add, catch_up="one"))
            assert made.next_ms is not None
            every_s = None if made.every is None else int(made.every)
            self.made.append(Made(made.schedule_id, every_s, made.at_ms, made.next_ms))

    def run(self) -> None:
        """Make the schedules, let them tick with the fault, delete them."""
        self.arm()
        self.make()
        end = time.monotonic() + self.ticks.ticking_s
        # the fault aims at one of the first three ticks: ticks come until it struck
        reach = end + REACH_S
        while time.monotonic() < end or (not self.struck and time.monotonic() < reach):
            with contextlib.suppress(*STORE_ERRORS, LedgerUnavailable):
                self.cluster.ensure_worker()
                if not self.struck and self.due():
                    self.strike()
                    end = max(end, time.monotonic() + self.after_fault_s())
            time.sleep(POLL_S)
        answered(lambda: self.cluster.runtime.redis.delete(keys.chaos_fault()))
        for made in self.made:
            answered(partial(self.lifecycle.remove_schedule, made.schedule_id))
        self.deleted_ms = self.ms()
        self.cluster.signal_all(signal.SIGCONT)  # none stays stopped past its trial

    def after_fault_s(self) -> float:
        """Ticks to let come after the fault: a claim it left held expires, and ticks come."""
        if self.trial.action == "duplicate":
            return AFTER_FAULT_S
        return CLAIM_S + 2 * self.step_s + AFTER_FAULT_S

    @property
    def step_s(self) -> int:
        return self.made[0].every_s or 1

    def arm(self) -> None:
        """Arm the worker's failpoint (the runner's own points are not the workers')."""
        client = self.cluster.runtime.redis
        if self.trial.point in (CLAIMED, STARTED):
            answered(partial(arm, client, self.trial))
        else:
            answered(partial(client.delete, keys.chaos_fault()))

    def aimed_ms(self) -> int:
        """The first schedule's tick the runner's fault aims at."""
        return self.made[0].first_ms + self.ticks.nth * self.step_s * 1000

    def due(self) -> bool:
        point = self.trial.point
        if point in (CLAIMED, STARTED):
            return bool(self.cluster.runtime.redis.hexists(keys.chaos_fault(), "fired"))
        if point == TURN:
            turn_id = tick_turn_id(self.made[0].schedule_id, self.aimed_ms())
            return self.cluster.runtime.redis.exists(keys.turn_meta(turn_id)) > 0
        return self.ms() >= self.aimed_ms() - self.ticks.lead_s * 1000

    def strike(self) -> None:
        self.struck = True
        action, cluster = self.trial.action, self.cluster
        began = self.ms()
        if action == "sigstop":
            self.unstop()
        elif action == "kill_worker" and self.trial.point == TURN:
            victim = cluster.workers[self.ticks.victim]
            if victim is not None:
                victim.kill_group()
        elif action == "kill_child":
            for worker in cluster.live():
                for pid in worker.children():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        elif action == "duplicate":
            turn_id = tick_turn_id(self.made[0].schedule_id, self.aimed_ms())
            meta = self.cluster.runtime.ledger.meta(turn_id)
            run_id = meta.next_run or meta.run_id
            self.lifecycle.dispatcher.dispatch(turn_id, run_id, "background")
            self.saw = f"run {run_id} sent again"
        elif action == "kill_both":
            for worker in cluster.live():
                worker.kill_group()
            time.sleep(self.ticks.outage * self.step_s)  # the outage itself
            cluster.ensure_worker()
            self.down = (began, self.ms())
        elif action == "redis_restart":
            cluster.restart_redis(self.ticks.outage)
            answered(cluster.runtime.redis.ping)
        # a worker killed (or paused, or cut off) holding a tick's claim holds it off this long
        self.outage_ms = self.ms() - began + (0 if action == "duplicate" else int(CLAIM_MS))

    def unstop(self) -> None:
        """The reaper stopped itself at its failpoint holding the claim: SIGCONT it after the
        trial's time (the other worker's reaper fires the tick once the claim expired)."""
        deadline = time.monotonic() + STOP_SEEN_S
        paused: list[WorkerProcess] = []
        while not paused and time.monotonic() < deadline:
            paused = [w for w in self.cluster.live() if stopped(w.pid)]
            time.sleep(POLL_S / 5)
        time.sleep(self.ticks.outage)  # the pause itself
        self.cluster.signal_all(signal.SIGCONT)
        self.saw = f"worker stopped {self.ticks.outage} s" if paused else "no worker seen stopped"


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat()


@dataclass
class Census:
    """The ticks' turns in the ledger: each turn looked at once (its ``turn_started``), over
    the whole run (the store keeps every trial's)."""

    cluster: PairCluster
    #: turn_id -> its tick (None: not a tick's turn)
    seen: dict[str, Fired | None] = field(default_factory=dict)

    def fired(self, schedule_ids: set[str]) -> list[Fired]:
        client = self.cluster.runtime.redis
        ledger = self.cluster.runtime.ledger
        pattern = f"{keys.PREFIX}:turn:*:meta"
        for key in answered(lambda: list(client.scan_iter(match=pattern, count=1000))):
            turn_id = text(key).split("{", 1)[1].split("}", 1)[0]
            if turn_id in self.seen:
                continue
            envelopes = answered(partial(ledger.read_turn, turn_id))
            if envelopes:
                self.seen[turn_id] = as_fired(turn_id, envelopes[0].event)
        return [f for f in self.seen.values() if f is not None and f.schedule_id in schedule_ids]


def as_fired(turn_id: str, first: object) -> Fired | None:
    if not isinstance(first, TurnStarted) or first.schedule_id is None or first.tick_at is None:
        return None
    return Fired(turn_id, first.schedule_id, round(first.tick_at * 1000), first.ts * 1000)


@dataclass
class Result:
    """A trial's outcome, with its ticks."""

    outcome: Outcome
    fired: int = 0
    late_s: float = 0.0
    median_s: float = 0.0
    saw: str = ""


def run_trial(
    cluster: PairCluster, census: Census, trial: Trial, ticks: Ticks, script: str
) -> Result:
    cluster.ensure_worker()
    started = time.monotonic()
    ticker = Ticker(cluster, trial, ticks, script)
    ticker.run()
    ids = {m.schedule_id for m in ticker.made}
    turn_ids = [f.turn_id for f in census.fired(ids)]
    watch = Watch(cluster, turn_ids, trial, max_continues=2)
    watch.fired = True  # the fault was the ticker's
    watch.run()
    fired = census.fired(ids)  # a tick fired after the deletion is found too
    outcome = Outcome(trial.fault, [], 0.0, ticker.struck)
    for f in sorted(fired, key=lambda f: (f.schedule_id, f.tick_ms)):
        if f.turn_id not in turn_ids:
            continue  # judged as a violation below: it came after the deletion
        prefix = f"{f.schedule_id[-6:]}@{f.tick_ms}: "
        judge(cluster, trial, watch, outcome, f.turn_id, prefix)
    outcome.violations += schedule_checks.check(
        ticker.made,
        fired,
        tick_turn_id=tick_turn_id,
        deleted_ms=ticker.deleted_ms,
        allowance_ms=ticker.outage_ms + int(SLACK_S * 1000),
        down=ticker.down,
    )
    outcome.seconds = time.monotonic() - started
    late = schedule_checks.lateness(fired)
    return Result(outcome, len(fired), late, schedule_checks.median_lateness(fired), ticker.saw)


def label(trial: Trial, ticks: Ticks) -> str:
    spelled = ",".join("at" if every is None else f"{every}s" for every in ticks.schedules)
    return f"{KIND}[{spelled}]/{trial.action} {trial.point}"


def run(trials: int, seed: int, pool: str = "prefork") -> tuple[list[Result], int]:
    """Run the trials, printing each one's line; their results, and the workers' restarts."""
    rng = random.Random(seed)
    tmp = Path(tempfile.mkdtemp(prefix="dres-chaos-schedule-"))
    script = write_script(tmp / "script.json", STEPS, on_resume="restart")
    configure_logging("WARNING")
    cluster = PairCluster(tmp, pool=pool)
    census = Census(cluster)
    results: list[Result] = []
    try:
        for index in range(trials):
            trial, ticks = draw(rng, pool)
            result = run_trial(cluster, census, trial, ticks, script)
            result.outcome.fault = label(trial, ticks)
            results.append(result)
            report(index, trials, result)
    finally:
        cluster.close()
    return results, cluster.restarts


def main(trials: int, seed: int, pool: str = "prefork") -> int:
    """Run the trials and print the table; 1 if any invariant broke."""
    began = time.monotonic()
    results, restarts = run(trials, seed, pool)
    print()
    print(table([r.outcome for r in results]))
    return summary(results, seed, pool, restarts, time.monotonic() - began)


def report(index: int, trials: int, result: Result) -> None:
    outcome = result.outcome
    mark = "VIOLATION" if outcome.violations else "ok"
    fired = "" if outcome.fired else "  (fault not reached)"
    print(
        f"[{index + 1:>3}/{trials}] {outcome.fault:<44} -> {outcome.status:<10} "
        f"{outcome.seconds:5.1f} s  {mark}  {result.fired} ticks, late {result.median_s:.2f} s "
        f"(median), at most {result.late_s:.2f} s{fired}  {result.saw}".rstrip(),
        flush=True,
    )
    for violation in outcome.violations:
        print(f"        ! {violation}", flush=True)


def summary(results: list[Result], seed: int, pool: str, restarts: int, took_s: float) -> int:
    violations = sum(bool(r.outcome.violations) for r in results)
    turns = sum(len(r.outcome.turns) for r in results)
    lates = [r.late_s for r in results]
    medians = sorted(r.median_s for r in results)
    print(
        f"\n{len(results)} trials ({KIND}, {pool} workers, two of them, {turns} ticks' turns), "
        f"seed {seed}, {violations} with violations, "
        f"{sum(r.outcome.duplicates for r in results)} duplicate effects, "
        f"{sum(r.outcome.fired for r in results)} faults struck, {restarts} worker restarts, "
        f"{took_s:.0f} s ({took_s / max(len(results), 1):.1f} s a trial)"
    )
    print(
        f"fire lateness (turn_started - tick): at most {max(lates, default=0):.2f} s, the "
        f"trials' medians at most {max(medians, default=0):.2f} s; each trial's most: "
        + " ".join(f"{s:.2f}" for s in lates)
    )
    return 1 if violations else 0
