"""Row W1 of ``make bench`` (issue 49, timers: docs/semantics.md): 10,000 turns whose timers
fall due in the same second, woken by the reapers of two workers: each turn's wake delay (p50,
p99, max; target p99 <= 2 s), that every one is woken once, and the Redis bytes of a sweep with
the timers waiting and none due (O(due): flat from 1,000 to 10,000 waiting) and per woken turn.

Setup: a private redis-server (AOF on, ``appendfsync everysec``, as the other rows: the wake is
writes), the ledger and the broker on it, a worker's settings at their defaults. Seeding, in this
process, through a worker's own runtime and the lifecycle's own steps: per turn
``Lifecycle.create`` (background, no message sent), ``Lifecycle.claim`` of its first run (as a
chunk claims it) and ``Lifecycle.wait(run, waiting_on(Waits(wake_at=T)))`` (the result the agent
loop returns when a tool's ``wait_until`` ends the run), every turn with the same ``wake_at`` T,
a whole second far enough ahead for the seeding and the byte sweeps (``SEED_BUDGET_S`` a turn).

Bytes of a sweep, none due: ``Reaper.sweep()`` of a fresh reaper on that runtime, the server's
``total_net_output_bytes`` across it less what reading the counter costs (row K1's way), after
the first ``first`` turns waited and again after all of them; medians of ``repeats`` sweeps.

The wake: two processes, each a worker's reaper thread (``ReaperThread`` on
``Runtime.reaper()``: ``Reaper.sweep()`` every ``DRES_REAPER_INTERVAL_S`` 1 s +-20 %, its
presence beats too, logging at INFO to a file), started before T, with the real
``CeleryDispatcher`` sending each woken run's chunk message to the broker queue and no worker
consuming it: running the woken turns is the pool's capacity, not the wake. Once the queue holds
a message per turn (or after ``WAKE_DEADLINE_S``) they stop. Per turn, from its metadata: wake
delay = ``dispatched`` (the wake step's time) - T; woken once = ``next_cause`` timer, no
``wake_at`` left, and its ``next_run`` named by exactly one message in the queue. Bytes per woken
turn: ``total_net_output_bytes`` from just before T to the last wake, less this process's polls
of the queue's length, / the turns.

Run alone: ``python -m bench --only timers [--quick]`` or ``python -m bench.timer_bench``.
"""

from __future__ import annotations

import gc
import itertools
import math
import multiprocessing
import os
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import redis

from bench.harness import Group, Row, loadavg, private_redis
from ledger import keys
from ledger.turn import TurnMeta
from worker.base.logging import configure_logging
from worker.base.settings import load_settings
from worker.edges.runtime import Runtime
from worker.engine.outcome import Waits, waiting_on
from worker.lifecycle.dispatch import run_ids
from worker.lifecycle.reaper import ReaperThread

#: a reaper's line for each batch of timers it woke (``worker.lifecycle.timers``)
WOKEN = re.compile(r"timers fell due.*?woken=(\d+)")
ABOUT = "row W1: 10,000 timers due in the same second, woken by two workers' reapers"
#: the wake delay's p99, seconds (issue 49)
TARGET_P99_S = 2.0
#: a sweep's bytes with all the timers waiting / with the first ``first`` waiting: flat
TARGET_FLAT = 1.1
#: seconds of seeding budgeted per turn (T's distance ahead; ~1 ms a turn on a quiet machine)
SEED_BUDGET_S = 0.004
#: seconds ahead of T on top of the seeding's budget: the byte sweeps, the reapers' start
START_S = 10.0
#: seconds before T the reapers must be ready and the wake's byte count begins
LEAD_S = 0.5
#: seconds between two looks at the queue's length during the wake
POLL_S = 0.05
#: the worker's mode of the turns (their messages' queue)
MODE = "background"
#: the model the turns name (nothing runs them)
MODEL = "scripted:none"


@dataclass(frozen=True)
class TimerPlan:
    #: turns waiting on a timer due in the same second
    timers: int
    #: the smaller count a sweep's bytes are measured at too (the flat check)
    first: int
    #: sweeps per byte figure (medians)
    repeats: int
    #: workers' reapers sweeping during the wake
    reapers: int = 2


FULL = TimerPlan(timers=10_000, first=1_000, repeats=7)
QUICK = TimerPlan(timers=1_000, first=100, repeats=3)


def wake_deadline_s(timers: int) -> float:
    """Seconds after T the wake may take before the reapers are stopped (then some missed)."""
    return max(60.0, timers * 0.05)


def out_bytes(client: redis.Redis) -> int:
    return int(client.info("stats")["total_net_output_bytes"])


def counter_cost(client: redis.Redis) -> int:
    """Bytes one read of the server's output counter adds to the next read (its own reply)."""
    reads = [out_bytes(client) for _ in range(6)]
    return int(statistics.median(b - a for a, b in itertools.pairwise(reads)))


def idle_sweep_bytes(rt: Runtime, client: redis.Redis, repeats: int) -> list[int]:
    """``repeats`` sweeps of a fresh reaper with nothing due: each one's Redis bytes."""
    cost = counter_cost(client)
    reaper = rt.reaper()
    reaper.sweep()  # its connections and scripts warm
    found = []
    for _ in range(repeats):
        gc.collect()
        first = out_bytes(client)
        done = reaper.sweep()
        found.append(out_bytes(client) - first - cost)
        assert done == {}, f"a timer fell due before T: {done}"
    return found


def seed(rt: Runtime, count: int, wake_at: float) -> list[str]:
    """``count`` turns, each created, its first run claimed and ended waiting on its timer."""
    lifecycle = rt.lifecycle
    waiting = waiting_on(Waits(wake_at=wake_at), ())
    turn_ids = []
    for _ in range(count):
        turn = lifecycle.create("remind me at the timer", mode=MODE, model=MODEL)
        run = lifecycle.claim(turn.turn_id, turn.run_id)
        assert run is not None, f"could not claim {turn.turn_id}'s first run"
        assert lifecycle.wait(run, waiting) == "waiting"
        turn_ids.append(turn.turn_id)
    return turn_ids


def check_seeded(rt: Runtime, turn_id: str, wake_at: float) -> None:
    """A seeded turn is what the timer's steps leave: waiting on its timer, looked at at T."""
    meta = rt.lifecycle.store.meta(turn_id)
    assert (meta.waiting_for, meta.wake_at, meta.next_run) == ("timer", wake_at, ""), meta
    assert rt.redis.zscore(keys.active_turns(), turn_id) == int(wake_at * 1000)


def reaper_process(url: str, log_path: str, ready: Event, stop: Event) -> None:
    """A worker's reaper thread in a process of its own, its log (INFO) in ``log_path``."""
    with open(log_path, "a") as log_file:
        os.dup2(log_file.fileno(), 2)
    configure_logging("INFO")
    thread = ReaperThread(Runtime.from_settings(load_settings(redis_url=url)).reaper())
    thread.start()
    ready.set()
    stop.wait()
    thread.stop()
    thread.join()


def queued_runs(rt: Runtime) -> list[str]:
    """The run id of every chunk message in the queues, one per message (repeats kept)."""
    dispatcher: Any = rt.lifecycle.dispatcher
    found: list[str] = []
    for key in dispatcher.queue_keys() or ():
        for message in rt.redis.lrange(key, 0, -1):
            found += run_ids([message]) or {"?"}
    return found


def woken_once(metas: Sequence[TurnMeta], messages: Sequence[str]) -> int:
    """Turns woken by their timer (its cause, no timer left) whose run has exactly one message."""
    count = Counter(messages)
    return sum(
        1
        for m in metas
        if m.next_cause == "timer" and not m.wake_at and m.next_run and count[m.next_run] == 1
    )


def delays(metas: Sequence[TurnMeta], wake_at: float, stopped_at: float) -> list[float]:
    """Each turn's wake delay, s: its wake step's time - T; one not woken counts as the time
    the reapers stopped - T (a lower bound)."""
    return [(m.dispatched if m.next_cause == "timer" else stopped_at) - wake_at for m in metas]


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile by nearest rank (p99 of 10,000: the 9,900th smallest)."""
    ordered = sorted(values)
    rank = math.ceil(round(q * len(ordered), 6))  # 1-based; round: 0.99 * 100 is 99.00000000000001
    return ordered[min(len(ordered), max(1, rank)) - 1]


def wake(
    rt: Runtime, client: redis.Redis, url: str, plan: TimerPlan, wake_at: float, logs: Path
) -> dict[str, Any]:
    """The reapers' processes, started before T and stopped once a message per turn is queued:
    what they sent, and when they stopped."""
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    readies = [ctx.Event() for _ in range(plan.reapers)]
    paths = [logs / f"reaper-{n}.log" for n in range(plan.reapers)]
    procs = [
        ctx.Process(target=reaper_process, args=(url, str(p), r, stop), daemon=True)
        for p, r in zip(paths, readies, strict=True)
    ]
    for proc in procs:
        proc.start()
    try:
        for ready in readies:
            if not ready.wait(max(1.0, wake_at - LEAD_S - time.time())):
                raise RuntimeError("a reaper process was not ready before T")
        if time.time() > wake_at - LEAD_S:
            raise RuntimeError("the reapers were ready only after T: machine too busy")
        dispatcher: Any = rt.lifecycle.dispatcher
        cost = counter_cost(client)
        polled = out_bytes(client)
        dispatcher.backlog()
        poll_cost = out_bytes(client) - polled - cost
        time.sleep(max(0.0, wake_at - LEAD_S - time.time()))
        began = out_bytes(client)
        polls, deadline = 0, wake_at + wake_deadline_s(plan.timers)
        while (dispatcher.backlog() or 0) < plan.timers and time.time() < deadline:
            polls += 1
            time.sleep(POLL_S)
        polls += 1
        stopped_at = time.time()
        sent = out_bytes(client) - began - cost - polls * poll_cost
    finally:
        stop.set()
        for proc in procs:
            proc.join(10)
    logs_ = [p.read_text() for p in paths]
    return {
        "stopped_at": stopped_at,
        "wake_bytes": sent,
        "polls": polls,
        # each batch a reaper woke logs one line: "timers fell due ... woken=N"
        "woken_by_reaper": [sum(map(int, WOKEN.findall(text))) for text in logs_],
        # a turn both reapers read due and the other woke first (its step refused)
        "changed_by_reaper": [text.count("'changed'") for text in logs_],
        "sweeps_moving_by_reaper": [text.count(" actions=") for text in logs_],
        "sweep_failures": sum(text.count("reaper sweep failed") for text in logs_),
    }


def measure(plan: TimerPlan) -> tuple[list[Row], dict[str, Any]]:
    """Row W1 on a redis-server of its own."""
    info: dict[str, Any] = {"loadavg_start": loadavg(), "aof": "on, appendfsync everysec"}
    configure_logging("WARNING")  # this process's seeding: the reapers log on their own
    with private_redis() as server, tempfile.TemporaryDirectory(prefix="dres-bench-") as tmp:
        rt = Runtime.from_settings(load_settings(redis_url=server.url))
        client = redis.Redis.from_url(server.url)  # the counters' reads
        try:
            t0 = time.time()
            wake_at = float(int(t0 + START_S + plan.timers * SEED_BUDGET_S))
            first = min(plan.first, plan.timers)
            turn_ids = seed(rt, first, wake_at)
            check_seeded(rt, turn_ids[0], wake_at)
            info["idle_sweep_bytes_first"] = idle_sweep_bytes(rt, client, plan.repeats)
            turn_ids += seed(rt, plan.timers - first, wake_at)
            info["seed_s"] = round(time.time() - t0, 1)
            check_seeded(rt, turn_ids[-1], wake_at)
            info["idle_sweep_bytes_all"] = idle_sweep_bytes(rt, client, plan.repeats)
            info["ahead_s"] = round(wake_at - time.time(), 1)
            info["loadavg_wake"] = loadavg()
            seen = wake(rt, client, server.url, plan, wake_at, Path(tmp))
            metas = [rt.lifecycle.store.meta(turn_id) for turn_id in turn_ids]
            messages = queued_runs(rt)
        finally:
            client.close()
            rt.redis.close()
    info.update(seen, messages=len(messages), woken_once=woken_once(metas, messages))
    info["delays_s"] = delays(metas, wake_at, seen["stopped_at"])
    info["loadavg_end"] = loadavg()
    return timer_rows(plan, info), info


def timer_rows(plan: TimerPlan, info: dict[str, Any]) -> list[Row]:
    """W1's rows from what ``measure`` saw: the delays' p50 / p99 / max, the turns woken once,
    a sweep's bytes with none due (all waiting / the first few), the bytes per woken turn."""
    n, ds = plan.timers, info["delays_s"]
    extra = {"timers": n, "reapers": plan.reapers, "woken_by_reaper": info["woken_by_reaper"]}
    what = f"{n:,} timers due in the same second, {plan.reapers} workers' reapers"
    idle = f"a reaper's sweep, {n:,} timers waiting, none due: Redis bytes"
    return [
        Row(f"{what}: wake delay p99", "s", [nearest_rank(ds, 0.99)], [], extra=extra,
            number="W1", limit=TARGET_P99_S),
        Row(f"{what}: wake delay p50", "s", [statistics.median(ds)], [], extra=extra,
            number="W1"),
        Row(f"{what}: wake delay max", "s", [max(ds)], [], extra=extra, number="W1"),
        Row(f"{what}: turns woken exactly once", "turns", [info["woken_once"]], [], extra=extra,
            number="W1", limit=n, higher_is_better=True),
        Row(idle, "B", [float(b) for b in info["idle_sweep_bytes_all"]],
            [float(b) for b in info["idle_sweep_bytes_first"]], TARGET_FLAT,
            {**extra, "unpaired": True}, number="W1",
            baseline=f"the same sweep, {plan.first:,} timers waiting"),
        Row(f"{what}: Redis bytes per woken turn", "B", [info["wake_bytes"] / n], [],
            extra=extra, number="W1"),
    ]  # fmt: skip


def summary(rows: list[Row], info: dict[str, Any]) -> list[str]:
    return [
        "",
        f"seeded in {info['seed_s']} s, T {info['ahead_s']} s ahead after the byte sweeps; "
        f"messages queued {info['messages']}, woken once {info['woken_once']}, woken by each "
        f"reaper {info['woken_by_reaper']} in {info['sweeps_moving_by_reaper']} sweeps, steps "
        f"refused (another reaper first) {info['changed_by_reaper']}, sweep failures "
        f"{info['sweep_failures']}; "
        f"wake bytes {info['wake_bytes']:,} ({info['polls']} polls left out)",
        f"load average {info['loadavg_start']} -> {info['loadavg_wake']} (wake) -> "
        f"{info['loadavg_end']}",
    ]


GROUP = Group(
    "timers", ABOUT, measure, FULL, QUICK, __doc__,
    options=(("timers", f"turns waiting on a timer (default {FULL.timers:,})"),),
    summary=summary,
)  # fmt: skip
main = GROUP.main


if __name__ == "__main__":
    sys.exit(main())
