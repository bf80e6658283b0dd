"""Rows 4 and 5 of ``make bench``: dres on a real prefork worker beside plain Celery tasks.

Everything runs against a private redis-server (AOF on, ``appendfsync everysec``) and one real
dres worker subprocess, ``python -m worker.edges.cli worker -c 2 --without-heartbeat`` (prefork, two
pool processes, the reaper on, ``--loglevel=WARNING``), which also runs the plain tasks of
``bench.hop_tasks`` (``DRES_CELERY_INCLUDE``): the baselines use the same app, settings, pool and
processes as the chunks they are compared with. Foreground chunks get a 0.3 s soft limit (hard
5 s) so that row 4 can cut one chunk per step; row 5's turns run in background mode, whose limits
(60 s / 90 s) they never reach, so each of them is one chunk.

4. Resume latency. A turn whose scripted model has B steps, each thinking for ``delay_s`` = 3 s
   (far past the soft limit) before one call of the write tool ``bench_tools.record``, then a
   final text step: chunk k replays step k-1 (``delay_s`` only acts on a step's first attempt),
   runs its tool call, starts step k and is cut by the soft limit while it "thinks", so every
   step costs one chunk boundary. Per boundary, from the turn's ledger: ``ts`` of the next
   chunk's first ``model_start`` minus ``ts`` of ``run_ended(soft_limit)`` — the handover, the
   successor's message, its claim (which also reads what is new of the turn), the journal and
   note, and the prompt all lie in between (the ``resumed`` record is written with that
   ``model_start``, before the model is called). Baseline: a chain of plain self-chaining
   ``bench.hop`` tasks on the same worker, start(i+1) - end(i), end taken just before
   ``apply_async`` (for information since issue 27). The row with the target: ``bench.soft_hop``,
   a plain task cut by the same soft limit that sends the next one from its
   ``SoftTimeLimitExceeded`` handler — what Celery itself adds to any chain made at a soft
   limit (signal, the pool's timeout handling), so that the part of the boundary that is
   dres's own can be read off.
5. Throughput. N turns (scripted: five steps with one ``record(n)`` call each, then a text step),
   enqueued by this process as fast as it can, timed from the first enqueue to the last
   ``turn_ended`` ``ts``; turns/s and tool calls/s. Baseline: N plain ``bench.noop`` tasks sent
   as fast as possible, timed from the first send to the last task's finish (it stores its
   time); for information also a larger batch of plain tasks.

Rounds alternate (dres, plain, plain, dres, ...) so that noise from the shared cores falls on
both sides; row figures are medians over rounds with [min..max] and per-round ratios.

4g. Issue 37: once the prefork worker has stopped, the same rounds of row 4's dres turn on a
   ``dres worker -P gevent -c 2`` with the same settings (its 0.3 s soft limit is dres's own
   timer, thrown into the chunk's greenlet), beside row 4's targeted baseline (never the plain
   hop), the plain prefork task chaining from its soft limit: Celery's gevent pool has no soft
   limit to chain from. Unpaired (the rounds run after the prefork ones): the ratio of the medians.

Run from the project root: ``.venv/bin/python -m bench.celery_bench [--quick]`` (or through
``python -m bench``, which prints every row in one table).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.celery_worker import WORKER_CONCURRENCY, CeleryPlan, running_worker, wait_turns
from bench.harness import GEVENT, Row, loadavg, private_redis, table_lines, write_result
from bench.resume_bench import (
    SOFT_ROW,
    ResumeRound,
    bench_resume,
    dres_resume_round,
    gevent_resume_row,
    plain_hop_round,
    resume_script,
)
from bench.throughput_bench import bench_throughput, plain_task_batch, throughput_script
from rigs import write_script
from worker.edges.runtime import Runtime

FULL = CeleryPlan(
    resume_rounds=5,
    boundaries=50,
    hops=100,
    soft_hops=20,
    throughput_rounds=3,
    turns=200,
    calls_per_turn=5,
    plain_info=1000,
    gevent_rounds=2,
)
QUICK = CeleryPlan(
    resume_rounds=1,
    boundaries=8,
    hops=30,
    soft_hops=5,
    throughput_rounds=1,
    turns=40,
    calls_per_turn=5,
    plain_info=0,
    gevent_rounds=1,
)


def warm_up(rt: Runtime, resume_model: str, turn_model: str) -> None:
    """Every pool process builds its runtime and imports what it needs before anything counts."""
    ids = [
        rt.lifecycle.enqueue(f"warm-up {i}", mode="background", model=turn_model).turn_id
        for i in range(4)
    ]
    wait_turns(rt, ids, 120)
    plain_task_batch(rt, 20)
    plain_hop_round(rt, 10)
    dres_resume_round(rt, resume_model, 2)


def measure(redis_url: str, plan: CeleryPlan) -> tuple[list[Row], dict[str, Any]]:
    """Rows 4 and 5 against the Redis at ``redis_url`` (a worker is started and stopped here)."""
    info: dict[str, Any] = {}
    with running_worker(redis_url) as (rt, worker, tmp):
        info["worker_pid"] = worker.pid
        resume_model = write_script(tmp / "resume.json", resume_script(plan.boundaries))
        warm_model = write_script(tmp / "warm.json", resume_script(2))
        turn_model = write_script(tmp / "turn.json", throughput_script(plan.calls_per_turn))
        started = time.monotonic()
        warm_up(rt, warm_model, turn_model)
        info["warm_up_s"] = round(time.monotonic() - started, 1)
        started = time.monotonic()
        info["loadavg_before_resume"] = loadavg()
        rows = bench_resume(rt, plan, resume_model)
        info["resume_s"] = round(time.monotonic() - started, 1)
        started = time.monotonic()
        info["loadavg_before_throughput"] = loadavg()
        rows += bench_throughput(rt, plan, turn_model)
        info["throughput_s"] = round(time.monotonic() - started, 1)
        info["loadavg_end"] = loadavg()
    if plan.gevent_rounds:
        soft = soft_limit_row(rows)
        info["gevent"] = {"loadavg_before": loadavg()}
        rounds = gevent_resume_rounds(redis_url, plan, info["gevent"])
        at = max(i for i, row in enumerate(rows) if row.number == "4") + 1
        on = f"dres worker {' '.join(GEVENT)} -c {WORKER_CONCURRENCY}"
        rows.insert(at, gevent_resume_row(rounds, soft, on))
    return rows, info


def soft_limit_row(rows: Sequence[Row]) -> Row:
    """Row 4's row against a plain task chaining from its own soft limit: row 4g's baseline
    (whatever the rows' targets say: the plain hop's row carries none since issue 27)."""
    return next(row for row in rows if row.number == "4" and row.name == SOFT_ROW)


def gevent_resume_rounds(
    redis_url: str, plan: CeleryPlan, info: dict[str, Any]
) -> list[ResumeRound]:
    """Row 4g's rounds, on a gevent worker of the prefork one's settings and concurrency."""
    with running_worker(redis_url, GEVENT) as (rt, worker, tmp):
        info["worker_pid"] = worker.pid
        model = write_script(tmp / "resume.json", resume_script(plan.boundaries))
        started = time.monotonic()
        dres_resume_round(rt, write_script(tmp / "warm.json", resume_script(2)), 2)
        info["warm_up_s"] = round(time.monotonic() - started, 1)
        started = time.monotonic()
        rounds = [dres_resume_round(rt, model, plan.boundaries) for _ in range(plan.gevent_rounds)]
        info["resume_s"] = round(time.monotonic() - started, 1)
        info["loadavg_end"] = loadavg()
    return rounds


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.celery_bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="few, short rounds: a smoke test")
    parser.add_argument("--json", metavar="PATH", type=Path, help="also write results as JSON")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    started = time.monotonic()
    with private_redis() as server:
        rows, info = measure(server.url, plan)
    info["elapsed_s"] = round(time.monotonic() - started, 1)
    print("\n".join(table_lines(rows)))
    print(f"\nelapsed {info['elapsed_s']} s")
    if args.json:
        write_result(args.json, plan, info, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
