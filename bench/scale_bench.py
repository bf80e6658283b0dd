"""Issue 16's rows of ``make bench``: what one more worker buys, and what a turn costs in Redis.

S1. Throughput with one worker process vs two: N short turns (background mode; a scripted model
    answering at once) enqueued by this process as fast as it can, once to one ``dres worker
    -c 1`` and once to two of them on the same queues (two hosts' workers, as far as one machine
    shows it); turns/s from the first enqueue to the last ``turn_ended`` ``ts``, and the p99 of
    each turn's ``turn_started`` -> ``turn_ended`` (``ts``; a burst queues, so it grows with N).
S2. A streamed 2,000-token answer from a local fake provider, watched over SSE: its delay and
    its Redis bytes per text byte (``bench.stream_bench``); once as fast as the provider can
    send, once at a provider's pace, and once with ``DRES_TEXT_FLUSH_MS=0`` (one event per
    delta, as before coalescing). S2g (issue 37): the paced case's bytes with the worker on
    gevent (``-P gevent``: the process's one text flusher writes every run's text).
S3. Redis per recorded tool call and per ended turn (``MEMORY USAGE`` of the turn's keys) beside
    the raw size of its events' JSON, and what ``finished_ttl_s`` keeps at a million turns a day;
    the short turn both as a conversation's first and as a new message after one (held, let
    through its conversation's line with a ``context`` event).

Every group runs on the private redis-server ``python -m bench`` hands it. Run alone:
``python -m bench --only scale [--quick] [--turns N]``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.celery_worker import bench_settings, process_env
from bench.celery_worker import wait_turns as wait_ended
from bench.harness import Group, Row, private_redis
from bench.scale_support import MILLION, ScalePlan, events_json_bytes, turn_bytes, workers
from bench.stream_bench import bytes_rows, measure_streaming
from bench.throughput_bench import throughput_script
from ledger import keys
from ledger.events import TurnEnded, TurnStarted
from rigs import write_script
from worker.edges.runtime import Runtime

#: what ``--only scale`` runs, in a line
ABOUT = "rows S1-S3: scaling out, a streamed answer and a turn in Redis (issue 16)"
#: issue 27: a short turn's Redis bytes beside its events' JSON (S3)
SHORT_TURN_TARGET = 2.0
SHORT_TURN_ROW = "Redis per ended short turn"


FULL = ScalePlan(
    turns=1000, rounds=2, tokens=2000, trials=3, pace_s=0.01, cost_turns=20, calls=10,
    gevent_trials=3,
)  # fmt: skip
QUICK = ScalePlan(
    turns=100, rounds=1, tokens=2000, trials=1, pace_s=0.005, cost_turns=5, calls=5,
    gevent_trials=1,
)  # fmt: skip


# -- S1 and S3: short turns on one or two workers -------------------------------------------------


def turn_batch(rt: Runtime, model: str, turns: int) -> tuple[float, float]:
    """(turns/s, p99 seconds turn_started -> turn_ended) of ``turns`` turns enqueued at once."""
    t0 = time.time()
    ids = [
        rt.lifecycle.enqueue(f"short {i}", mode="background", model=model).turn_id
        for i in range(turns)
    ]
    wait_ended(rt, ids, 120 + turns * 1.0)
    last, latencies = 0.0, []
    for turn_id in ids:
        events = rt.ledger.events(turn_id)
        start, end = events[0], events[-1]
        assert isinstance(start, TurnStarted) and isinstance(end, TurnEnded), turn_id
        last = max(last, end.ts)
        latencies.append(end.ts - start.ts)
    return turns / (last - t0), statistics.quantiles(latencies, n=100)[98]


def measure_throughput(
    rt: Runtime, env: dict[str, str], tmp: Path, plan: ScalePlan
) -> tuple[list[Row], dict[str, Any]]:
    model = write_script(tmp / "short.json", [{"text": "done"}])
    rates: dict[int, list[float]] = {1: [], 2: []}
    p99s: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(plan.rounds):
        for count in (1, 2):
            with workers(rt, count, env, tmp):
                turn_batch(rt, model, 10)  # warm-up: imports, connections
                rate, p99 = turn_batch(rt, model, plan.turns)
            rates[count].append(rate)
            p99s[count].append(p99 * 1000)
    base = f"one dres worker (-c 1), {plan.turns} short turns"
    extra = {"turns": plan.turns, "rounds": plan.rounds}
    rows = [
        Row("turns/s, two workers vs one", "turns/s", rates[2], rates[1], None, extra,
            higher_is_better=True, number="S1", baseline=base),
        Row("p99 turn_started -> turn_ended, two workers vs one", "ms", p99s[2], p99s[1], None,
            extra, number="S1", baseline=base),
    ]  # fmt: skip
    return rows, {"turns_per_s": rates, "p99_ms": p99s}


def measure_costs(
    rt: Runtime, env: dict[str, str], tmp: Path, plan: ScalePlan
) -> tuple[list[Row], dict[str, Any]]:
    short = write_script(tmp / "cost-short.json", [{"text": "done"}])
    tools = write_script(tmp / "cost-tools.json", throughput_script(plan.calls))
    with workers(rt, 1, env, tmp):
        cases = {}
        for name, model in (("short", short), ("tools", tools)):
            ids = [
                rt.lifecycle.enqueue(
                    "what does a turn cost", mode="background", model=model
                ).turn_id
                for _ in range(plan.cost_turns)
            ]
            wait_ended(rt, ids, 120)
            cases[name] = ids
        cases["follow-up"] = [
            rt.lifecycle.enqueue(
                "and what does the next one cost", conversation_id=conversation_id,
                mode="background", model=short,
            ).turn_id
            for conversation_id in (rt.ledger.meta(t).conversation_id for t in cases["short"])
        ]  # fmt: skip
        wait_ended(rt, cases["follow-up"], 120)
    mem = {k: [float(turn_bytes(rt, t)) for t in ids] for k, ids in cases.items()}
    raw = {k: [float(events_json_bytes(rt, t)) for t in ids] for k, ids in cases.items()}
    per_call = [(t - s) / plan.calls for t, s in zip(mem["tools"], mem["short"], strict=True)]
    raw_call = [(t - s) / plan.calls for t, s in zip(raw["tools"], raw["short"], strict=True)]
    ttl_days = rt.settings.finished_ttl_s / 86400
    held_gb = statistics.median(mem["short"]) * MILLION * ttl_days / 1e9
    extra = {
        "turns": plan.cost_turns,
        "calls": plan.calls,
        "finished_ttl_days": ttl_days,
        "gb_held_per_million_short_turns_a_day": held_gb,
        "events_per_short_turn": rt.redis.xlen(keys.turn_events(cases["short"][0])),
        "events_per_follow_up_turn": rt.redis.xlen(keys.turn_events(cases["follow-up"][0])),
    }
    rows = [
        Row("Redis per recorded tool call", "B", per_call, raw_call, None, extra,
            number="S3", baseline="its events' JSON (tool_start + tool_done)"),
        Row(SHORT_TURN_ROW, "B", mem["short"], raw["short"], SHORT_TURN_TARGET, extra,
            number="S3", baseline="its events' JSON"),
        Row("Redis per ended short turn, a new message after one", "B", mem["follow-up"],
            raw["follow-up"], SHORT_TURN_TARGET, extra, number="S3", baseline="its events' JSON"),
    ]  # fmt: skip
    return rows, extra


# -- all of them ----------------------------------------------------------------------------------


def measure(redis_url: str, plan: ScalePlan) -> tuple[list[Row], dict[str, Any]]:
    """Rows S1-S3 against the Redis at ``redis_url`` (workers and an API started here)."""
    rt = Runtime.from_settings(bench_settings(redis_url))
    info: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="dres-scale-") as name:
            tmp = Path(name)
            env = process_env(redis_url)
            rows, info["throughput"] = measure_throughput(rt, env, tmp, plan)
            streaming, info["streaming"] = measure_streaming(rt, redis_url, tmp, plan)
            costs, info["costs"] = measure_costs(rt, env, tmp, plan)
    finally:
        rt.redis.close()
    # S2's text share is the streamed turn less a short turn of a conversation's own
    short = statistics.median(next(r for r in costs if r.name == SHORT_TURN_ROW).dres)
    streaming += bytes_rows(info["streaming"]["streaming"], short, plan.tokens)
    streaming += bytes_rows(info["streaming"]["gevent"], short, plan.tokens, number="S2g")
    return [*rows, *streaming, *costs], info


def plan_for(quick: bool, turns: int | None) -> ScalePlan:
    plan = QUICK if quick else FULL
    return plan if turns is None else replace(plan, turns=turns)


def on_private_redis(plan: ScalePlan) -> tuple[list[Row], dict[str, Any]]:
    """Rows S1-S3 on a redis-server of their own, started here and stopped after."""
    with private_redis() as server:
        return measure(server.url, plan)


GROUP = Group(
    "scale", ABOUT, on_private_redis, FULL, QUICK, __doc__,
    options=(("turns", "row S1's short turns per round"),),
)  # fmt: skip
main = GROUP.main


if __name__ == "__main__":
    sys.exit(main())
