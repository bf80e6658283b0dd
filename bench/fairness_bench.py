"""Row Q1 of ``make bench`` (issue 47, tenants: docs/semantics.md): fairness. Tenant B's 10 turns
arrive behind tenant A's 1,000 on a saturated pool; B's wait to start, in units of B's own turn
duration, through dres's admission (round-robin across tenants with waiting turns) beside the
same scenario dispatched FIFO, as dres did before admission, in the same run.

Setup: a private redis-server (AOF on, ``appendfsync everysec``) and one real ``dres worker -P
gevent -c 50`` (``bench.scale_support.workers``), no tenant limit set (fair order holds without
limits: issue 47); a scripted model that thinks 0.1 s and answers. The pool: once the backlog is
fair, B's k-th turn starts after about 2k of the pool's slots free (A's and B's turns alternate),
so B's 10 turns all start within about 20 / c turn durations of a pool of c slots: "<= 3
durations" needs c >= ~7. A prefork ``-c 2`` pool would put B's last start ~10 durations after
its enqueue however fair the order; ``-c 50`` on gevent (one process: what a host of many turns
runs, rows M1-M2) starts them within ~0.4 duration of a slot freeing, so what is left is the
admission's own delay. 1,000 turns of 0.1 s on 50 slots keep the pool full for ~2 s of thinking
alone, ~10-20 s with the worker's own CPU on this 2-vCPU host: far longer than B's enqueue.

A case: the bench process enqueues A's 1,000 turns (background mode, tenant ``a``) one after
another as fast as it can, then B's 10 (tenant ``b``), and waits for all to end.
- fair: ``Lifecycle.enqueue(..., tenant=...)``, as the API does it: a turn that may not start at
  once waits in Redis (``Tenancy.start`` / ``Line._release`` -> ``Hooks.wait``), ``AHEAD`` in the
  broker beyond what the worker took, and starts round-robin across tenants.
- FIFO: each turn recorded as ready to run (``Lifecycle.create``, not held) and its message sent
  at once (``Lifecycle.launch``), bypassing the admission gate: dres before issue 47, Celery's
  one FIFO queue; B's turns wait behind every A turn still queued.
Per B turn, from the ledger's ``ts``: wait = its first ``run_started`` - its ``turn_started``;
duration = its ``turn_ended`` - that ``run_started``; figure = wait / duration. p50 and p95 over
B's 10 turns (nearest rank: p95 of 10 is the largest). Also per case: the most A turns running
at once (the pool saturated), A's median duration, the wall time of the whole case.

Rounds: each round runs both cases (their order alternating); rows pair a round's fair and FIFO
figures. Rows: p95 and p50 fair / FIFO (information), and the p95 fair alone against its bound
(<= 3 durations).

Run alone: ``python -m bench --only fairness [--quick]`` or ``python -m bench.fairness_bench``.
"""

from __future__ import annotations

import math
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.celery_worker import bench_settings, process_env, wait_turns
from bench.harness import GEVENT, Group, Row, loadavg, private_redis
from bench.scale_support import workers
from ledger.events import Event, RunStarted, TurnEnded, TurnStarted
from rigs import write_script
from worker.base.logging import configure_logging
from worker.edges.runtime import Runtime

ABOUT = "row Q1: tenant B's 10 turns behind tenant A's 1,000, fair admission vs FIFO (tenants)"
#: B's p95 wait to start, in B's own turn durations (issue 47)
WAIT_LIMIT = 3.0
CASES = ("fair", "fifo")
MODE = "background"


@dataclass(frozen=True)
class FairnessPlan:
    #: rounds; each runs the fair case and the FIFO one
    rounds: int
    #: tenant A's turns, enqueued first
    a_turns: int = 1000
    #: tenant B's turns, enqueued right after A's
    b_turns: int = 10
    #: the gevent pool's slots
    concurrency: int = 50
    #: seconds each turn's one model call thinks
    think_ms: int = 100


FULL = FairnessPlan(rounds=2)
QUICK = FairnessPlan(rounds=1, a_turns=200, concurrency=20)


# -- a case -----------------------------------------------------------------------------------


def fair(rt: Runtime, message: str, model: str, tenant: str) -> str:
    return rt.lifecycle.enqueue(message, mode=MODE, model=model, tenant=tenant).turn_id


def fifo(rt: Runtime, message: str, model: str, tenant: str) -> str:
    """The turn as dres dispatched it before admission: recorded ready, its message sent."""
    turn = rt.lifecycle.create(message, mode=MODE, model=model, tenant=tenant)
    rt.lifecycle.launch(turn.turn_id, turn.run_id, MODE)
    return turn.turn_id


def span(events: Sequence[Event]) -> tuple[float, float, float]:
    """(turn_started, first run_started, turn_ended) ``ts`` of an ended turn."""
    started = events[0]
    assert isinstance(started, TurnStarted), started
    run = next(e for e in events if isinstance(e, RunStarted))
    end = events[-1]
    assert isinstance(end, TurnEnded), end
    return started.ts, run.ts, end.ts


def most_at_once(spans: Sequence[tuple[float, float, float]]) -> int:
    """The most turns running (first run_started .. turn_ended) at any instant."""
    edges = sorted([(s[1], 1) for s in spans] + [(s[2], -1) for s in spans])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def nearest_rank(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def run_case(rt: Runtime, case: str, plan: FairnessPlan, model: str) -> dict[str, Any]:
    send = fair if case == "fair" else fifo
    t0 = time.time()
    a = [send(rt, f"a{i}", model, "a") for i in range(plan.a_turns)]
    a_sent = time.time()
    b = [send(rt, f"b{i}", model, "b") for i in range(plan.b_turns)]
    wait_turns(rt, a + b, 120 + plan.a_turns * plan.think_ms / 1000)
    a_spans = [span(rt.ledger.events(t)) for t in a]
    b_spans = [span(rt.ledger.events(t)) for t in b]
    waits = [run - started for started, run, _ in b_spans]
    durations = [end - run for _, run, end in b_spans]
    ratios = [w / d for w, d in zip(waits, durations, strict=True)]
    a_first, a_last = min(r for _, r, _ in a_spans), max(e for *_, e in a_spans)
    return {
        "case": case,
        "p95": nearest_rank(ratios, 0.95),
        "p50": statistics.median(ratios),
        "b_wait_ms": [round(w * 1000, 1) for w in waits],
        "b_duration_ms": [round(d * 1000, 1) for d in durations],
        "b_wait_durations": [round(r, 2) for r in ratios],
        "a_enqueue_s": round(a_sent - t0, 2),
        "a_duration_ms_median": round(statistics.median(e - r for _, r, e in a_spans) * 1000, 1),
        "a_wait_ms_median": round(statistics.median(r - s for s, r, _ in a_spans) * 1000, 1),
        "a_at_once_most": most_at_once(a_spans),
        # the pool's mean fill over A's turns: their summed run time / first start -> last end
        "a_at_once_mean": round(sum(e - r for _, r, e in a_spans) / (a_last - a_first), 1),
        "a_ended_per_s": round(len(a_spans) / (a_last - a_first), 1),
        # A's turns still waiting to start when B's first turn was recorded
        "a_not_started_at_b": sum(1 for _, r, _ in a_spans if r > b_spans[0][0]),
        "wall_s": round(max(end for *_, end in a_spans + b_spans) - t0, 2),
    }


def bench_fairness(rt: Runtime, plan: FairnessPlan, model: str) -> list[dict[str, dict[str, Any]]]:
    rounds = []
    for n in range(plan.rounds):
        cases = CASES if n % 2 == 0 else CASES[::-1]
        rounds.append({case: run_case(rt, case, plan, model) for case in cases})
    return rounds


# -- rows -------------------------------------------------------------------------------------


def fairness_rows(
    plan: FairnessPlan, rounds: Sequence[dict[str, dict[str, Any]]], info: dict[str, Any]
) -> list[Row]:
    what = (
        f"tenant B's {plan.b_turns} turns behind A's {plan.a_turns:,}, `dres worker -P gevent "
        f"-c {plan.concurrency}`, {plan.think_ms} ms turns: B's wait to start"
    )
    extra = {"rounds": len(rounds), "worker": info["worker"]}

    def of(case: str, q: str) -> list[float]:
        return [r[case][q] for r in rounds]

    return [
        Row(f"{what}, p95, fair vs FIFO", "B's durations", of("fair", "p95"), of("fifo", "p95"),
            None, extra, number="Q1", baseline="the same turns dispatched FIFO (before admission)"),
        Row(f"{what}, p50, fair vs FIFO", "B's durations", of("fair", "p50"), of("fifo", "p50"),
            None, extra, number="Q1", baseline="the same turns dispatched FIFO (before admission)"),
        Row(f"{what}, p95, fair, bound", "B's durations", of("fair", "p95"), [], extra=extra,
            number="Q1", limit=WAIT_LIMIT),
    ]  # fmt: skip


def measure(plan: FairnessPlan) -> tuple[list[Row], dict[str, Any]]:
    """Row Q1 on a redis-server and a gevent worker of its own."""
    info: dict[str, Any] = {
        "worker": f"dres worker -P gevent -c {plan.concurrency}",
        "limits": "none set (DRES_TENANT_* unset)",
        "loadavg_start": loadavg(),
    }
    configure_logging("WARNING")  # a line per waiting turn would time this process's printing
    with private_redis() as server, tempfile.TemporaryDirectory(prefix="dres-bench-") as tmp:
        rt = Runtime.from_settings(bench_settings(server.url))
        env = process_env(server.url)
        think = {"delay_s": plan.think_ms / 1000, "text": "done"}
        model = write_script(Path(tmp) / "think.json", [think])
        warm = write_script(Path(tmp) / "warm.json", [{"text": "done"}])
        try:
            with workers(rt, 1, env, Path(tmp), concurrency=plan.concurrency, pool=GEVENT):
                # imports, connections, the pool's greenlets' first turns
                wait_turns(
                    rt, [fair(rt, "warm", warm, "warm") for _ in range(plan.concurrency)], 120
                )
                started = time.monotonic()
                rounds = bench_fairness(rt, plan, model)
                info["rounds_s"] = round(time.monotonic() - started, 1)
        finally:
            rt.redis.close()
    info["rounds"] = rounds
    info["loadavg_end"] = loadavg()
    return fairness_rows(plan, rounds, info), info


def summary(rows: list[Row], info: dict[str, Any]) -> list[str]:
    lines = [""]
    for n, r in enumerate(info["rounds"]):
        for case, x in r.items():
            lines.append(
                f"round {n} {case}: B waits {x['b_wait_ms']} ms; durations median "
                f"{statistics.median(x['b_duration_ms']):.1f} ms; A: {x['a_at_once_most']} at once "
                f"(mean {x['a_at_once_mean']}, {x['a_ended_per_s']} ended/s), "
                f"{x['a_not_started_at_b']} not started at B's first, median duration "
                f"{x['a_duration_ms_median']} ms, enqueued in {x['a_enqueue_s']} s; wall "
                f"{x['wall_s']} s"
            )
    lines.append(f"load average {info['loadavg_start']} -> {info['loadavg_end']}")
    return lines


GROUP = Group(
    "fairness", ABOUT, measure, FULL, QUICK, __doc__,
    options=(("rounds", f"rounds (default {FULL.rounds})"),), summary=summary,
)  # fmt: skip
main = GROUP.main


if __name__ == "__main__":
    sys.exit(main())
