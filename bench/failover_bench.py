"""Rows D5-D6 (issue 23): a Sentinel failover in the middle of a running turn -> that turn's next
event, and its next model call, on the new master, in seconds.

Setup: ``rigs.redis_sentinel.LocalSentinel`` (a primary and a replica, redis-server with
AOF ``everysec``; three sentinels, quorum 2, ``down-after-milliseconds`` 1000,
``failover-timeout`` 5000) and one real ``dres worker -c 1`` (prefork, ``rigs
.WorkerProcess``) whose environment names the rig's sentinels and master and nothing else of
dres's but the bench tools and room for a long turn (``DRES_MAX_MODEL_CALLS``): every limit, the
lease, the store outage budget and the failover hold (``sentinel_watch.FAILOVER_HOLD_S``) at
their defaults. This process enqueues and stops turns through the sentinels too, and reads every
figure from the data nodes directly, by port.

A trial: a background turn of a scripted model whose every step thinks ``STEP_S`` then calls the
no-op write tool ``bench.bench_tools.record``, so it appends all the time. Once the master holds
the ``model_start`` of step ``TRIGGER_STEP``, the bench takes ``time.time()`` and makes the
fault: D5 ``SENTINEL FAILOVER`` (the replica is promoted while the old master runs on; Sentinel
makes it a replica ~11 s later), D6 SIGKILL of the master (the sentinels see it down after 1 s,
agree, elect a leader, promote the replica).

The rig has one replica, so the new master is known before the fault. The bench polls it every
``POLL_S`` (``MULTI ROLE; XREVRANGE <the turn's stream> + - COUNT 1; EXEC``): the first poll that
finds it a master notes the turn's newest entry there (what replication had brought); the
figures are the later polls that find the turn's first entry after it (next event) and its
first ``model_start`` (next model call), minus the fault's time, each to a poll. What the old
master took and the new one never saw does not count. A figure not seen within ``deadline_s``
counts at the deadline. Per trial the JSON also holds when the replica answered as the master,
when every sentinel named it (``LocalSentinel.wait_master``, in a thread), the first event's
type and own ``ts`` (made before the fault if its write was in flight), the runs started after
the fault, and the turn's longest pause between two model calls after it resumed. The rig is
then restored while the turn goes on (a killed node restarted, the old master a replica of the
new one with its link up, every sentinel agreeing), the turn stopped, and the next trial starts
on the same worker.

Faults alternate (failover, sigkill, sigkill, failover, ...). The rows have no baseline and no
target: an absolute time, median [min..max] over the trials.

Run from the project root: ``.venv/bin/python -m bench.failover_bench [--quick] [--trials N]
[--json PATH]`` (or ``python -m bench --only failover``). It reports and never asserts.
"""

from __future__ import annotations

import itertools
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.default_workers import TOOLS, default_settings, reported_settings
from bench.failover_rig import (
    LOOK_S,
    agreement,
    ended_on,
    events_on,
    make_fault,
    restore,
    watch_new_master,
)
from bench.harness import Group, Row, loadavg
from ledger.events import Event, ModelStart, RunStarted, TurnEnded
from rigs import ROOT, WorkerProcess, poll, subprocess_env, write_script
from rigs.redis_sentinel import DOWN_AFTER_MS, FAILOVER_TIMEOUT_MS, QUORUM, LocalSentinel
from worker.edges.redis.sentinel_watch import FAILOVER_HOLD_S
from worker.edges.runtime import Runtime

FAULTS = ("sentinel failover", "sigkill")
NUMBERS = {"sentinel failover": "D5", "sigkill": "D6"}
WHAT = {"sentinel failover": "SENTINEL FAILOVER", "sigkill": "SIGKILL of the master"}
#: the figures of a trial each fault has a row of, and what the row calls them
FIGURES = {"next_event_s": "next event", "next_model_call_s": "next model call"}
#: seconds each step thinks before its tool call: the turn's pace of events
STEP_S = 0.05
#: steps of the turn: more than a trial needs (it is stopped once the rig is restored)
STEPS = 800
#: the step whose model_start sets the fault off
TRIGGER_STEP = 5
#: seconds a trial's turn may take to reach TRIGGER_STEP; longer: the set-up is broken
START_S = 60.0
#: seconds after the fault before a trial counts as a miss (its figure is then this deadline)
TRIAL_DEADLINE_S = 30.0
#: seconds a stopped turn may take to end
END_S = 30.0
WORKER_READY_S = 60.0
WORKER_ENV = {"DRES_TOOLS": TOOLS, "DRES_MAX_MODEL_CALLS": str(STEPS + 10)}
RIG = {
    "down_after_ms": DOWN_AFTER_MS,
    "failover_timeout_ms": FAILOVER_TIMEOUT_MS,
    "quorum": QUORUM,
    "sentinels": 3,
    "replicas": 1,
    "failover_hold_s": FAILOVER_HOLD_S,
}


@dataclass(frozen=True)
class FailoverPlan:
    #: trials of each fault
    trials: int
    #: seconds after the fault before a trial counts as a miss
    deadline_s: float = TRIAL_DEADLINE_S


FULL = FailoverPlan(trials=10)
QUICK = FailoverPlan(trials=3)


@dataclass
class Trial:
    fault: str
    turn_id: str
    old_port: int
    new_port: int
    #: seconds from the fault to the poll that saw the turn's first entry on the new master,
    #: and its first model_start there; the deadline when none came
    next_event_s: float
    next_model_call_s: float
    #: seconds from the fault until the new master answered ROLE as a master
    promoted_s: float | None = None
    #: seconds from the fault until every sentinel named the new master
    agreed_s: float | None = None
    #: that first entry's type, and its own ts - the fault's (negative: made before the fault)
    event_type: str | None = None
    event_made_s: float | None = None
    #: the turn's median seconds between two model calls before the fault, and its longest
    #: pause between two after the next model call, until the rig was whole and the turn stopped
    step_period_s: float | None = None
    later_pause_s: float | None = None
    #: runs the turn started after the fault
    runs_after: int | None = None
    #: seconds from the enqueue to the fault, and from the fault's end to a whole rig
    lead_s: float | None = None
    restore_s: float | None = None
    #: the turn's status once stopped (None: not ended within END_S)
    status: str | None = None


def busy_script() -> list[dict[str, Any]]:
    """Think STEP_S, record one number, again and again: a turn that keeps appending."""
    record = [
        {"delay_s": STEP_S, "tool_calls": [{"name": "record", "input": {"n": n}}]}
        for n in range(STEPS)
    ]
    return [*record, {"text": "Done."}]


def _at_trigger(rig: LocalSentinel, port: int, turn_id: str) -> list[Event] | None:
    events = events_on(rig, port, turn_id)
    reached = any(isinstance(e, ModelStart) and e.step >= TRIGGER_STEP for e in events)
    return events if reached else None


def _model_calls(events: Sequence[Event], after: float = 0.0) -> list[float]:
    return [e.ts for e in events if isinstance(e, ModelStart) and e.ts >= after]


def longest_gap(times: Sequence[float], *, median: bool = False) -> float | None:
    """The longest gap between two successive ``times`` (with ``median``: their median gap)."""
    gaps = [b - a for a, b in itertools.pairwise(times)]
    if not gaps:
        return None
    return statistics.median(gaps) if median else max(gaps)


def _since(fault_at: float, at: float | None, default: float | None = None) -> float | None:
    return default if at is None else at - fault_at


def run_trial(rt: Runtime, rig: LocalSentinel, fault: str, model: str, plan: FailoverPlan) -> Trial:
    """One turn, one fault in it, the rig restored while the turn goes on, the turn stopped."""
    master = rig.master_port()
    [new] = [node.port for node in rig.nodes if node.port != master]  # the only replica
    enqueued = time.time()
    turn_id = rt.lifecycle.enqueue(
        "benchmark: a failover mid-turn", mode="background", model=model
    ).turn_id
    before = poll(lambda: _at_trigger(rig, master, turn_id), START_S, LOOK_S)
    if before is None:
        raise RuntimeError(f"turn {turn_id} did not reach step {TRIGGER_STEP} in {START_S} s")
    agreed: dict[str, Any] = {}
    old, fault_at = make_fault(rig, fault)
    sentinels = threading.Thread(target=agreement, args=(rig, old, plan.deadline_s, agreed))
    sentinels.start()
    seen = watch_new_master(rig, new, turn_id, fault_at + plan.deadline_s)
    sentinels.join()
    if agreed and agreed["port"] != new:
        raise RuntimeError(f"the sentinels chose {agreed['port']}, not the replica {new}")
    restore_s = restore(rig, new)
    rt.lifecycle.stop(turn_id)
    stopped = poll(lambda: ended_on(rig, new, turn_id), END_S, LOOK_S)
    events = stopped or events_on(rig, new, turn_id)
    ended = [e.status for e in events if isinstance(e, TurnEnded)]
    runs = [e for e in events if isinstance(e, RunStarted) and e.ts > fault_at]
    deadline = plan.deadline_s
    return Trial(
        fault, turn_id, old, new,
        next_event_s=_since(fault_at, seen.event_at, deadline) or deadline,
        next_model_call_s=_since(fault_at, seen.model_call_at, deadline) or deadline,
        promoted_s=_since(fault_at, seen.promoted_at),
        agreed_s=_since(fault_at, agreed.get("at")),
        event_type=seen.event.type if seen.event else None,
        event_made_s=_since(fault_at, seen.event.ts if seen.event else None),
        step_period_s=longest_gap(_model_calls(before), median=True),
        later_pause_s=longest_gap(_model_calls(events, after=seen.model_call_ts or 0.0)),
        runs_after=len(runs),
        lead_s=fault_at - enqueued,
        restore_s=restore_s,
        status=ended[-1] if ended else None,
    )  # fmt: skip


def failover_rows(trials: Sequence[Trial], plan: FailoverPlan, info: dict[str, Any]) -> list[Row]:
    """Per fault, a row of each figure (``FIGURES``); the trials' details go with the first."""
    rows = []
    for fault in FAULTS:
        mine = [t for t in trials if t.fault == fault]
        if not mine:
            continue

        def median(field: str, of: list[Trial] = mine) -> float | None:
            values = [v for t in of if (v := getattr(t, field)) is not None]
            return statistics.median(values) if values else None

        common = {
            "fault": fault,
            "trials": len(mine),
            "deadline_s": plan.deadline_s,
            "promoted_s_median": median("promoted_s"),
            "agreed_s_median": median("agreed_s"),
            "rig": info.get("rig", RIG),
        }
        details = {
            "step_period_s_median": median("step_period_s"),
            "later_pause_s_max": max((t.later_pause_s or 0.0 for t in mine), default=None),
            "first_events": dict(Counter(t.event_type or "none" for t in mine)),
            "runs_after": dict(Counter(str(t.runs_after) for t in mine)),
            "statuses": dict(Counter(t.status or "not ended" for t in mine)),
            "trial_details": [asdict(t) for t in mine],
        }
        for n, (field, what) in enumerate(FIGURES.items()):
            figures = [getattr(t, field) for t in mine]
            extra = {
                **common,
                "figure": field,
                "missed_deadline": sum(1 for x in figures if x >= plan.deadline_s),
                **(details if n == 0 else {}),
            }
            rows.append(
                Row(
                    f"{WHAT[fault]} -> the turn's {what} on the new master", "s", figures, [],
                    None, extra, number=NUMBERS[fault], baseline="none: an absolute time",
                )
            )  # fmt: skip
    return rows


def bench_failover(rt: Runtime, rig: LocalSentinel, plan: FailoverPlan, model: str) -> list[Trial]:
    trials: list[Trial] = []
    for n in range(plan.trials):
        for fault in FAULTS if n % 2 == 0 else FAULTS[::-1]:
            trials.append(run_trial(rt, rig, fault, model, plan))
    return trials


def measure(plan: FailoverPlan) -> tuple[list[Row], dict[str, Any]]:
    """Rows D5-D6 on a rig and a worker of their own, started here and stopped after."""
    info: dict[str, Any] = {"rig": RIG, "trials_per_fault": plan.trials, "step_s": STEP_S}
    info["trigger_step"] = TRIGGER_STEP
    with tempfile.TemporaryDirectory(prefix="dres-failover-") as tmp, LocalSentinel() as rig:
        fields = {"redis_sentinels": rig.addresses, "redis_master": rig.name}
        settings = default_settings(rig.url, **fields, max_model_calls=STEPS + 10)
        info["settings"] = reported_settings(settings)
        rt = Runtime.from_settings(settings)
        env = subprocess_env({**rig.env(), **WORKER_ENV}, ROOT)
        worker = WorkerProcess.start(env, Path(tmp) / "worker.log", ready=False)
        try:
            worker.wait_ready(timeout=WORKER_READY_S)
            model = write_script(Path(tmp) / "busy.json", busy_script())
            info["loadavg_before"] = loadavg()
            started = time.monotonic()
            trials = bench_failover(rt, rig, plan, model)
            info["trials_s"] = round(time.monotonic() - started, 1)
            info["loadavg_end"] = loadavg()
            info["same_worker"] = worker.alive()
        except BaseException:
            print(f"failover worker's log tail:\n{worker.log()[-4000:]}", file=sys.stderr)
            raise
        finally:
            worker.stop()
            rt.app.close()
            rt.redis.close()
    return failover_rows(trials, plan, info), info


def trial_lines(rows: Sequence[Row]) -> list[str]:
    def f(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    return [
        f"{t['fault']:<17}  next event {t['next_event_s']:5.2f} s ({t['event_type']}, made at "
        f"{f(t['event_made_s'])}), next model call {t['next_model_call_s']:5.2f} s; promoted "
        f"{f(t['promoted_s'])}, sentinels agreed {f(t['agreed_s'])}; {t['runs_after']} new runs, "
        f"later pause {f(t['later_pause_s'])} s; steps every {f(t['step_period_s'])} s; "
        f"restored in {f(t['restore_s'])} s; {t['status']}"
        for row in rows
        for t in row.extra.get("trial_details", [])
    ]


GROUP = Group(
    "failover",
    "rows D5-D6: a Sentinel failover mid-turn -> the turn's next event (issue 23)",
    measure, FULL, QUICK, __doc__,
    options=(("trials", f"trials per fault (default {FULL.trials})"),),
    summary=lambda rows, info: ["", *trial_lines(rows), "", f"rig {info['rig']}"],
)  # fmt: skip
main = GROUP.main


if __name__ == "__main__":
    sys.exit(main())
