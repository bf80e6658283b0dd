"""The ``timer`` trials (``make chaos KINDS=timer``): turns whose tool returns ``wait_until``
(docs/semantics.md, timers), on two workers, so that two reapers race to wake each turn, and one
fault around a wait.

A trial runs ``TIMER_TURNS`` turns (under gevent, ``TIMER_FLIGHT`` more beside them), each of the
script ``script``: a note, ``chaos_wait`` (a plain write that then waits its turn's drawn 1 to 3
s, ``chaos.trial.Timer``), a send whose step outlasts the soft limit (the woken run hands over
to a next chunk), a text; a ``restart``-mode model, so each run after the wait makes the calls
before it again (answered from the record: no effect, no wait). The first turn is sent alone;
the others once it waits, ended, or the fault fired, so the worker's failpoints (which count
every tool's calls) strike the first turn's ``chaos_wait``.

One fault per trial (``TIMER_FAULTS``):
- at a worker's failpoint, in the first turn's ``chaos_wait`` call: SIGKILL of the pool child
  or of the whole worker (one of the two) before its ``tool_start``, between its effect and its
  return (``chaos.tools.WAIT_POINT``: its own), after its ``tool_done`` (that carries
  ``wake_at``) before the run ends waiting (the run that takes over finds the wait in the ledger
  and waits again, or goes on if the time passed); a redis-server restart between its effect and
  its return; a duplicated successor message at the woken run's hand-over;
- the runner's own, around the first turn's wait: ``waiting`` (a drawn share into it),
  ``woken`` (the moment the runner sees it no longer waiting: a reaper's wake made, the run
  claimed or about to be) and ``resuming`` (both workers stopped with SIGSTOP just before the
  time, the runner makes the reaper's look itself, so the turn is ``resuming``, its run's message
  sent and claimed by no one, the fault strikes, the workers go on): SIGKILL of every pool child,
  of one worker (the other's reaper goes on; a stopped worker may hold the woken run's message
  popped from the queue, which its death loses: the reaper sends it again), of both, a
  redis-server restart (down 0.5 to 4 s), or (``woken``, ``resuming``) the woken run's message
  sent again;
- ``none``: the waits alone, the two reapers racing.

Every invariant of the other trials is checked, and ``chaos.timer_checks``: every timer wakes
once, never early, no run that began after the time waits again, no ``chaos_wait`` returned its
wait twice, every turn completed (after a Continue if the fault stopped it). Each timer wake's
lateness (its ``run_started`` after ``wake_at``) is measured; one later than ``LATE_S`` breaks
the trial unless its fault explains it (``explains_lateness``: Redis or every worker away, or
the woken run's process killed).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos import timer_checks
from chaos.cluster import Cluster
from chaos.report import Outcome
from chaos.tools import WAIT_POINT
from chaos.trial import Trial
from ledger import keys
from ledger.turn import TurnStatus
from rigs import WorkerProcess, write_script
from worker.lifecycle.service import TurnOptions

#: the runner's own points around the first turn's wait: a drawn share into it; the moment it is
#: seen woken (a reaper's wake, in practice just claimed); between the wake's step and the claim
#: (``RESUMING``: both workers stopped, the runner makes the reaper's look itself)
WAITING, WOKEN, RESUMING = "waiting", "woken", "resuming"
TIMER_POINTS = (WAITING, WOKEN, RESUMING)
#: seconds before the first turn's ``wake_at`` the runner stops both workers (SIGSTOP) at
#: ``RESUMING``, so that no reaper of theirs wakes it and no worker claims the woken run
HOLD_S = 0.2
#: SIGKILL of both workers (the runner's own): no reaper is left until they are started again
KILL_WORKERS = "kill_workers"
#: (action, point), drawn with equal weights
TIMER_FAULTS: list[tuple[str, str]] = [
    ("none", "-"),
    *[
        (action, point)
        for action in ("kill_child", "kill_worker")
        for point in ("tool.before_start", WAIT_POINT, "tool.after_done")
    ],
    ("redis_restart", WAIT_POINT),
    ("duplicate", "chunk.handoff"),
    *[
        (action, point)
        for action in ("kill_child", "kill_worker", KILL_WORKERS, "redis_restart")
        for point in TIMER_POINTS
    ],
    ("duplicate", WOKEN),
    ("duplicate", RESUMING),
]
#: turns a gevent timer trial runs beside its own: many waits in the one process a fault strikes
#: (fewer than the other kinds' 50: each waits, and the two workers' reapers wake each)
TIMER_FLIGHT = 20
#: seconds a timer may wake late (its ``run_started`` after its ``wake_at``) when nothing in the
#: trial explains it: docs/semantics.md's bound (every reaper sweeps every
#: ``DRES_REAPER_INTERVAL_S``; the chaos workers' is 0.2 s)
LATE_S = 2.0
#: the trial's message
MESSAGE = "Note it, wait a little, then send the email."


def script(seconds: float) -> list[dict[str, Any]]:
    """A timer trial's turn: a note, a wait of ``seconds``, a send past the soft limit, a text."""
    return [
        {"text": "Noting.", "tool_calls": [{"name": "chaos_note", "input": {"text": "before"}}]},
        {"tool_calls": [{"name": "chaos_wait", "input": {"seconds": seconds, "label": "wait"}}]},
        {
            "delay_s": 1.0,  # over the soft limit (0.5 s): the woken run hands over
            "tool_calls": [
                {
                    "name": "chaos_send",
                    "input": {"to": "ada@example.com", "subject": "Woken", "body": "It is time."},
                }
            ],
        },
        {"text": "Waited, then sent."},
    ]


def models(directory: Path, trial: Trial, index: int) -> list[str]:
    """The trial's scripted models, one per drawn wait (turn ``k`` runs ``k % len``)."""
    return [
        write_script(directory / f"timer-{index}-{k}.json", script(seconds), on_resume="restart")
        for k, seconds in enumerate(trial.timer.seconds)
    ]


def explains_lateness(trial: Trial) -> bool:
    """The trial's fault may make a timer wake late: Redis away, every worker away, or the
    woken run's process killed before it claimed the turn (every pool child killed while turns
    wait kills the processes their wakes may go to)."""
    if trial.action in ("redis_restart", KILL_WORKERS):
        return True
    if trial.point in (WOKEN, RESUMING):
        return trial.action in ("kill_child", "kill_worker")
    return trial.point == WAITING and trial.action == "kill_child"


def judge(trial: Trial, fired: bool, outcome: Outcome, saw: str = "") -> None:
    """The trial's wakes' lateness (each turn's were measured into ``outcome.late``): a wake
    later than ``LATE_S`` breaks it unless its fault, fired, explains that. (``saw``: the first
    turn's status when the runner's own fault struck, for the trial's line.)"""
    if saw:
        outcome.details.append(f"the runner's fault struck with the first turn {saw}")
    outcome.late_explained = fired and explains_lateness(trial)
    outcome.violations += timer_checks.too_late(outcome.late, outcome.late_explained, LATE_S)


def wakes(outcome: Outcome) -> str:
    """A timer trial's wakes, for its line."""
    late = max(outcome.late, default=0.0)
    outage = " (an outage)" if outcome.late_explained else ""
    return f"  {len(outcome.late)} wake(s), at most {late:.2f} s late{outage}"


def killed_as(trial: Trial) -> str:
    """The trial's action as ``chaos.takeovers.count`` knows it: a kill of both workers is a
    worker kill (each turn's run held by either)."""
    return "kill_worker" if trial.action == KILL_WORKERS else trial.action


def strike(cluster: Cluster, trial: Trial, turn_id: str, run_id: str) -> None:
    """The runner's own fault around a wait: ``trial.action``, on both workers where it says."""
    workers = [w for w in (cluster.worker, cluster.second) if w is not None]
    if trial.action == "redis_restart":
        cluster.restart_redis(trial.outage_s)
    elif trial.action == "kill_worker" and workers:
        workers[0].kill_group()
    elif trial.action == KILL_WORKERS:
        for worker in workers:
            worker.kill_group()
    elif trial.action == "kill_child":
        for pid in [pid for worker in workers for pid in worker.children()]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    elif trial.action == "duplicate" and run_id:
        mode = cluster.runtime.ledger.meta(turn_id).mode
        cluster.runtime.lifecycle.dispatcher.dispatch(turn_id, run_id, str(mode))


def signal_all(workers: list[WorkerProcess], signum: int) -> None:
    """``signum`` to each worker's process group (its pool children too); a dead one passed."""
    for worker in workers:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(worker.pid, signum)


@dataclass
class Timekeeper:
    """A timer trial's runner hook: sends its other turns once the first waits (or ended, or the
    fault fired), and makes the runner's own fault around the first turn's wait."""

    cluster: Cluster
    trial: Trial
    #: the trial's turns, the watch's list: the first sent by the runner, the others appended here
    turn_ids: list[str]
    #: what each turn is sent with, and its models (turn ``k`` runs ``models[k % len]``)
    options: TurnOptions
    models: list[str]
    #: called with the seconds a fault of the runner's own took (not the turns' time)
    paused: Callable[[float], None]
    #: when (epoch seconds) the fault at ``waiting`` strikes: set once the first turn is seen
    #: waiting on its timer (0: not yet)
    strike_at: float = 0.0
    struck: bool = False
    #: the first turn's status when the runner's own fault struck (``woken``: ``resuming`` is
    #: between the wake's step and the claim, ``running`` just after the claim)
    saw: str = ""

    @property
    def sent(self) -> bool:
        return len(self.turn_ids) >= self.trial.turns

    def look(self) -> None:
        ledger, client = self.cluster.runtime.ledger, self.cluster.runtime.redis
        first = self.turn_ids[0]
        meta = ledger.meta(first)
        waits = meta.status == TurnStatus.WAITING and meta.waiting_for == "timer"
        if waits and not self.strike_at:
            now = time.time()
            self.strike_at = now + self.trial.timer.into * max(meta.wake_at - now, 0.0)
            if self.trial.point == RESUMING:
                self.strike_at = meta.wake_at - HOLD_S
        gone = meta.status in (TurnStatus.COMPLETED, TurnStatus.STOPPED)
        fired = self.struck or bool(client.hexists(keys.chaos_fault(), "fired"))
        if not self.sent and (waits or gone or fired):
            self.send()
        if self.struck or not self.strike_at or self.trial.point not in TIMER_POINTS:
            return
        if self.trial.point == WAITING and time.time() >= self.strike_at:
            self.fault(first, "", str(meta.status))
        elif self.trial.point == WOKEN and not waits:
            self.fault(first, meta.next_run or meta.run_id, str(meta.status))
        elif self.trial.point == RESUMING and time.time() >= self.strike_at:
            self.struck = True
            before = time.monotonic()
            self.wake_held(first)
            self.paused(time.monotonic() - before)

    def wake_held(self, turn_id: str) -> None:
        """``RESUMING``: both workers stopped, the reaper's look at the turn made here once its
        time came (the wake's step: ``resuming``, its run's message sent), the fault struck
        before any worker claims the run, the workers (those left) let go on."""
        cluster, runtime = self.cluster, self.cluster.runtime
        workers = [w for w in (cluster.worker, cluster.second) if w is not None]
        signal_all(workers, signal.SIGSTOP)
        try:
            meta = runtime.ledger.meta(turn_id)
            while meta.status == TurnStatus.WAITING and time.time() < meta.wake_at:
                time.sleep(0.01)  # no reaper of theirs wakes it meanwhile
            if meta.status == TurnStatus.WAITING:
                runtime.lifecycle.expire_if_due(meta)
            meta = runtime.ledger.meta(turn_id)
            self.saw = str(meta.status)
            if self.trial.action == "redis_restart":
                cluster.server.kill()  # down before the workers go on; started below
            else:
                strike(cluster, self.trial, turn_id, meta.next_run or meta.run_id)
        finally:
            signal_all(workers, signal.SIGCONT)
        if self.trial.action == "redis_restart":
            time.sleep(self.trial.outage_s)  # the outage itself
            cluster.server.start()

    def send(self) -> None:
        """The trial's other turns (one by one: a store fault may cut the sending short, and
        the next look sends the rest)."""
        lifecycle = self.cluster.runtime.lifecycle
        while not self.sent:
            model = self.models[len(self.turn_ids) % len(self.models)]
            options: TurnOptions = {**self.options, "model": model}
            self.turn_ids.append(lifecycle.enqueue(MESSAGE, **options).turn_id)

    def fault(self, turn_id: str, run_id: str, status: str) -> None:
        self.struck, self.saw = True, status
        before = time.monotonic()
        strike(self.cluster, self.trial, turn_id, run_id)
        self.paused(time.monotonic() - before)
