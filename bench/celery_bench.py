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
   ``apply_async``. For information, a second baseline: ``bench.soft_hop``, a plain task cut by
   the same soft limit that sends the next one from its ``SoftTimeLimitExceeded`` handler —
   what Celery itself adds to any chain made at a soft limit (signal, the pool's timeout
   handling), so that the part of the boundary that is dres's own can be read off.
5. Throughput. N turns (scripted: five steps with one ``record(n)`` call each, then a text step),
   enqueued by this process as fast as it can, timed from the first enqueue to the last
   ``turn_ended`` ``ts``; turns/s and tool calls/s. Baseline: N plain ``bench.noop`` tasks sent
   as fast as possible, timed from the first send to the last task's finish (it stores its
   time); for information also a larger batch of plain tasks.

Rounds alternate (dres, plain, plain, dres, ...) so that noise from the shared cores falls on
both sides; row figures are medians over rounds with [min..max] and per-round ratios.

Run from the project root: ``.venv/bin/python -m bench.celery_bench [--quick]`` (or through
``python -m bench``, which prints every row in one table).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.ledger_bench import Row, summary, table_lines
from ledger import keys
from ledger.events import Event, ModelStart, RunEnded, RunStarted, ToolDone, TurnEnded
from tests.support import ROOT, WorkerProcess, wait_until, write_script
from worker.base.settings import Settings, load_settings
from worker.dev.redis_server import RedisServer
from worker.edges.client import enqueue
from worker.edges.runtime import Runtime

RESUME_TARGET = 3.0
#: seconds: the foreground chunk limits of the worker (row 4 cuts at the soft one)
SOFT_LIMIT_S = 0.3
HARD_LIMIT_S = 5.0
#: seconds: the background chunk limits (row 5's turns never reach them)
BG_SOFT_LIMIT_S = 60.0
BG_HARD_LIMIT_S = 90.0
#: seconds each resume step "thinks" on its first attempt: far past the soft limit
STEP_DELAY_S = 3.0
#: a handoff may wait this long unclaimed before the reaper re-dispatches it; row 5's queued
#: turns wait for a free process and must not be re-dispatched as lost
HANDOFF_GRACE_S = 120.0
WORKER_CONCURRENCY = 2
WORKER_READY_S = 60.0
#: Celery's per-task INFO lines (two structlog-rendered lines per task, on both sides) would
#: weigh on a no-op baseline; the benchmark measures dres, not log rendering
WORKER_ARGS = ("--loglevel=WARNING",)
#: turn statuses after turn_ended
ENDED = frozenset({"completed", "stopped"})


@dataclass(frozen=True)
class CeleryPlan:
    resume_rounds: int
    #: chunk boundaries of each round's dres turn
    boundaries: int
    #: hops of each round's plain chain
    hops: int
    #: hops of each round's chain of plain tasks cut by their soft limit (information row)
    soft_hops: int
    throughput_rounds: int
    turns: int
    calls_per_turn: int
    #: plain tasks of the information-only larger batch (0: none)
    plain_info: int


FULL = CeleryPlan(
    resume_rounds=5,
    boundaries=50,
    hops=100,
    soft_hops=20,
    throughput_rounds=3,
    turns=200,
    calls_per_turn=5,
    plain_info=1000,
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
)


# -- the worker ---------------------------------------------------------------------------------


def worker_env(redis_url: str) -> dict[str, str]:
    values: dict[str, object] = {
        "REDIS_URL": redis_url,
        "CELERY_INCLUDE": "bench.hop_tasks",
        "TOOLS": "worker.dev.demo_tools,bench.bench_tools",
        "SOFT_LIMIT_S": SOFT_LIMIT_S,
        "HARD_LIMIT_S": HARD_LIMIT_S,
        "BG_SOFT_LIMIT_S": BG_SOFT_LIMIT_S,
        "BG_HARD_LIMIT_S": BG_HARD_LIMIT_S,
        "MAX_CHUNKS": 1000,
        "MAX_MODEL_CALLS": 1000,
        "HANDOFF_GRACE_S": HANDOFF_GRACE_S,
    }
    return {f"DRES_{name}": str(value) for name, value in values.items()}


def bench_settings(redis_url: str) -> Settings:
    """The settings the worker reads from ``worker_env``, for this (the producer's) process."""
    return load_settings(
        redis_url=redis_url,
        celery_include="bench.hop_tasks",
        tools="worker.dev.demo_tools,bench.bench_tools",
        soft_limit_s=SOFT_LIMIT_S,
        hard_limit_s=HARD_LIMIT_S,
        bg_soft_limit_s=BG_SOFT_LIMIT_S,
        bg_hard_limit_s=BG_HARD_LIMIT_S,
        max_chunks=1000,
        max_model_calls=1000,
        handoff_grace_s=HANDOFF_GRACE_S,
    )


# -- helpers ------------------------------------------------------------------------------------


def resume_script(boundaries: int) -> list[dict[str, Any]]:
    """B thinking steps with one write each (one chunk boundary per step), then the answer."""
    steps: list[dict[str, Any]] = [
        {"delay_s": STEP_DELAY_S, "tool_calls": [{"name": "record", "input": {"n": k}}]}
        for k in range(boundaries)
    ]
    return [*steps, {"text": "done"}]


def throughput_script(calls: int) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "record", "input": {"n": k}}]} for k in range(calls)
    ]
    return [*steps, {"text": "done"}]


def turn_statuses(rt: Runtime, turn_ids: Sequence[str]) -> list[str]:
    pipe = rt.redis.pipeline(transaction=False)
    for turn_id in turn_ids:
        pipe.hget(keys.turn_meta(turn_id), "status")
    return [(s or b"").decode() for s in pipe.execute()]


def wait_turns(rt: Runtime, turn_ids: Sequence[str], timeout: float) -> None:
    pending = list(turn_ids)
    deadline = time.monotonic() + timeout
    while pending:
        statuses = turn_statuses(rt, pending)
        pending = [t for t, s in zip(pending, statuses, strict=True) if s not in ENDED]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(pending)} turn(s) did not end within {timeout:.0f} s")
        time.sleep(0.1)  # the figures come from ledger timestamps, not from this poll


def _median_ms(values: Sequence[float]) -> float:
    return statistics.median(values) * 1000


# -- 4. resume latency --------------------------------------------------------------------------


@dataclass
class ResumeRound:
    #: seconds per boundary: next chunk's first model_start - run_ended(soft_limit)
    latency: list[float]
    #: run_started of the next chunk - run_ended (handover, message, claim)
    handoff: list[float]
    #: first model_start - run_started (ledger read, journal, note, resumed, prompt)
    startup: list[float]
    chunks: int
    events: int


def resume_boundaries(events: Sequence[Event]) -> ResumeRound:
    ended: dict[int, float] = {}
    started: dict[int, float] = {}
    first_model: dict[int, float] = {}
    for event in events:
        if isinstance(event, RunEnded) and event.reason == "soft_limit":
            ended.setdefault(event.chunk, event.ts)
        elif isinstance(event, RunStarted):
            started.setdefault(event.chunk, event.ts)
        elif isinstance(event, ModelStart):
            first_model.setdefault(event.chunk, event.ts)
    latency, handoff, startup = [], [], []
    for chunk, ts in sorted(ended.items()):
        nxt = chunk + 1
        if nxt in first_model and nxt in started:
            latency.append(first_model[nxt] - ts)
            handoff.append(started[nxt] - ts)
            startup.append(first_model[nxt] - started[nxt])
    chunks = len({e.chunk for e in events})
    return ResumeRound(latency, handoff, startup, chunks, len(events))


def dres_resume_round(rt: Runtime, model: str, boundaries: int) -> ResumeRound:
    turn = enqueue(rt, "benchmark: one chunk boundary per step", model=model)
    timeout = boundaries * (SOFT_LIMIT_S + 2.0) + 60
    wait_turns(rt, [turn.turn_id], timeout)
    events = rt.ledger.events(turn.turn_id)
    ended = [e for e in events if isinstance(e, TurnEnded)]
    if not ended or ended[-1].status != "completed":
        raise RuntimeError(f"resume turn {turn.turn_id} did not complete: {ended[-1:]}")
    result = resume_boundaries(events)
    if len(result.latency) != boundaries:
        raise RuntimeError(
            f"resume turn {turn.turn_id}: {len(result.latency)} measured boundaries of "
            f"{boundaries} expected ({result.chunks} chunks)"
        )
    return result


def _hop_chain(rt: Runtime, task: str, hops: int, extra: list[Any], **options: Any) -> list[float]:
    """Run one chain of ``hops`` plain hops of ``task``; start(i+1) - end(i) for each hop."""
    key = f"bench:{task}:{uuid.uuid4().hex}"
    queue = rt.settings.foreground_queue
    rt.app.send_task(task, args=[key, 0, hops, queue, *extra], queue=queue, **options)
    timeout = 60 + hops * (1 + options.get("soft_time_limit", 0))
    wait_until(lambda: rt.redis.hexists(key, "done"), timeout, f"the {task} chain")
    fields = {k.decode(): float(v) for k, v in rt.redis.hgetall(key).items()}
    rt.redis.delete(key)
    return [fields[f"start:{i + 1}"] - fields[f"end:{i}"] for i in range(hops)]


def plain_hop_round(rt: Runtime, hops: int) -> list[float]:
    return _hop_chain(rt, "bench.hop", hops, [])


def soft_hop_round(rt: Runtime, hops: int) -> list[float]:
    """Hops cut by the chunks' soft limit, each sending the next from its handler."""
    limits = {"soft_time_limit": SOFT_LIMIT_S, "time_limit": HARD_LIMIT_S}
    return _hop_chain(rt, "bench.soft_hop", hops, [SOFT_LIMIT_S, HARD_LIMIT_S], **limits)


def bench_resume(rt: Runtime, plan: CeleryPlan, model: str) -> list[Row]:
    rounds: list[ResumeRound] = []
    hop_rounds: list[list[float]] = []
    soft_rounds: list[list[float]] = []
    for n in range(plan.resume_rounds):
        order = ("dres", "plain", "soft") if n % 2 == 0 else ("soft", "plain", "dres")
        for side in order:
            if side == "dres":
                rounds.append(dres_resume_round(rt, model, plan.boundaries))
            elif side == "plain":
                hop_rounds.append(plain_hop_round(rt, plan.hops))
            else:
                soft_rounds.append(soft_hop_round(rt, plan.soft_hops))
    pooled = [x for r in rounds for x in r.latency]
    hops = [x for h in hop_rounds for x in h]
    tenth = max(1, plan.boundaries // 10)
    early = [x for r in rounds for x in r.latency[:tenth]]
    late = [x for r in rounds for x in r.latency[-tenth:]]
    extra = {
        "rounds": plan.resume_rounds,
        "boundaries_per_round": plan.boundaries,
        "hops_per_round": plan.hops,
        "soft_limit_s": SOFT_LIMIT_S,
        "pooled_median_ms": {"dres": _median_ms(pooled), "raw": _median_ms(hops)},
        "pooled_ratio": statistics.median(pooled) / statistics.median(hops),
        "pooled_p90_ms": {
            "dres": statistics.quantiles(pooled, n=10)[-1] * 1000,
            "raw": statistics.quantiles(hops, n=10)[-1] * 1000,
        },
        "dres_handoff_ms": _median_ms([x for r in rounds for x in r.handoff]),
        "dres_startup_ms": _median_ms([x for r in rounds for x in r.startup]),
        f"dres_first_{tenth}_boundaries_ms": _median_ms(early),
        f"dres_last_{tenth}_boundaries_ms": _median_ms(late),
        "dres_turn_events": [r.events for r in rounds],
    }
    dres_medians = [_median_ms(r.latency) for r in rounds]
    soft_extra = {
        "rounds": plan.resume_rounds,
        "hops_per_round": plan.soft_hops,
        "soft_limit_s": SOFT_LIMIT_S,
    }
    return [
        Row(
            "resume latency",
            "ms",
            dres_medians,
            [_median_ms(h) for h in hop_rounds],
            RESUME_TARGET,
            extra,
            number="4",
            baseline="plain Celery task-to-task hop",
        ),
        Row(
            "resume latency vs a plain task chaining from its soft limit",
            "ms",
            dres_medians,
            [_median_ms(h) for h in soft_rounds],
            None,
            soft_extra,
            number="4",
            baseline="plain Celery task that sends the next one from its SoftTimeLimitExceeded",
        ),
    ]


# -- 5. throughput ------------------------------------------------------------------------------


@dataclass
class TurnBatch:
    #: seconds from the first enqueue to the last turn_ended
    elapsed: float
    #: seconds the producer took to enqueue them all
    enqueue: float
    chunks: int
    tool_calls: int


def dres_turn_batch(rt: Runtime, model: str, turns: int, calls: int) -> TurnBatch:
    t0 = time.time()
    ids = [
        enqueue(rt, f"benchmark turn {i}", mode="background", model=model).turn_id
        for i in range(turns)
    ]
    enqueued = time.time() - t0
    wait_turns(rt, ids, 120 + turns * 2.0)
    last = 0.0
    chunks = done = 0
    for turn_id in ids:
        events = rt.ledger.events(turn_id)
        ended = [e for e in events if isinstance(e, TurnEnded)]
        if not ended or ended[-1].status != "completed":
            raise RuntimeError(f"throughput turn {turn_id} did not complete")
        last = max(last, ended[-1].ts)
        chunks += len({e.chunk for e in events})
        done += sum(1 for e in events if isinstance(e, ToolDone) and not e.is_error)
    if done != turns * calls:
        raise RuntimeError(f"throughput: {done} completed tool calls, expected {turns * calls}")
    return TurnBatch(last - t0, enqueued, chunks, done)


def plain_task_batch(rt: Runtime, tasks: int) -> tuple[float, float]:
    """(seconds from the first send to the last task's finish, seconds spent sending)."""
    key = f"bench:noop:{uuid.uuid4().hex}"
    queue = rt.settings.background_queue
    t0 = time.time()
    for _ in range(tasks):
        rt.app.send_task("bench.noop", args=[key, tasks], queue=queue)
    sent = time.time() - t0
    wait_until(lambda: rt.redis.exists(f"{key}:done"), 60 + tasks * 0.05, "plain tasks")
    finished = float(rt.redis.get(f"{key}:done") or 0)
    rt.redis.delete(key, f"{key}:done")
    return finished - t0, sent


def bench_throughput(rt: Runtime, plan: CeleryPlan, model: str) -> list[Row]:
    batches: list[TurnBatch] = []
    plain: list[tuple[float, float]] = []
    for n in range(plan.throughput_rounds):
        order = ("dres", "plain") if n % 2 == 0 else ("plain", "dres")
        for side in order:
            if side == "dres":
                batches.append(dres_turn_batch(rt, model, plan.turns, plan.calls_per_turn))
            else:
                plain.append(plain_task_batch(rt, plan.turns))
    info = plain_task_batch(rt, plan.plain_info) if plan.plain_info else None
    turns_s = [plan.turns / b.elapsed for b in batches]
    calls_s = [b.tool_calls / b.elapsed for b in batches]
    plain_s = [plan.turns / elapsed for elapsed, _ in plain]
    extra: dict[str, Any] = {
        "rounds": plan.throughput_rounds,
        "turns": plan.turns,
        "calls_per_turn": plan.calls_per_turn,
        "worker_processes": WORKER_CONCURRENCY,
        "dres_enqueue_per_s": summary([plan.turns / b.enqueue for b in batches]),
        "plain_send_per_s": summary([plan.turns / sent for _, sent in plain]),
        "dres_chunks_per_turn": [b.chunks / plan.turns for b in batches],
        "dres_elapsed_s": [b.elapsed for b in batches],
        "plain_elapsed_s": [elapsed for elapsed, _ in plain],
    }
    if info:
        extra["plain_info_tasks"] = plan.plain_info
        extra["plain_info_tasks_per_s"] = plan.plain_info / info[0]
    base = f"plain Celery tasks/s ({plan.turns} noop tasks)"
    name = f"throughput {plan.turns} turns x {plan.calls_per_turn} calls"
    return [
        Row(
            name, "turns/s", turns_s, plain_s, None, extra,
            higher_is_better=True, number="5", baseline=base,
        ),
        Row(
            "throughput tool calls", "calls/s", calls_s, plain_s, None, extra,
            higher_is_better=True, number="5", baseline=base,
        ),
    ]  # fmt: skip


# -- running ------------------------------------------------------------------------------------


def warm_up(rt: Runtime, resume_model: str, turn_model: str) -> None:
    """Every pool process builds its runtime and imports what it needs before anything counts."""
    ids = [
        enqueue(rt, f"warm-up {i}", mode="background", model=turn_model).turn_id for i in range(4)
    ]
    wait_turns(rt, ids, 120)
    plain_task_batch(rt, 20)
    plain_hop_round(rt, 10)
    dres_resume_round(rt, resume_model, 2)


@contextmanager
def running_worker(redis_url: str) -> Iterator[tuple[Runtime, WorkerProcess, Path]]:
    """A dres worker, ready once a plain task has made the round trip; stopped whatever happens."""
    with tempfile.TemporaryDirectory(prefix="dres-bench-") as tmp:
        rt = Runtime.from_settings(bench_settings(redis_url))
        key = f"bench:probe:{uuid.uuid4().hex}"
        env = {**os.environ, **worker_env(redis_url)}
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
        )
        worker: WorkerProcess | None = None
        try:
            rt.app.send_task("bench.noop", args=[key, 1], queue=rt.settings.foreground_queue)
            worker = WorkerProcess.start(
                env,
                Path(tmp) / "worker.log",
                concurrency=WORKER_CONCURRENCY,
                extra=WORKER_ARGS,
                ready=False,
            )
            worker.wait(lambda: bool(rt.redis.exists(f"{key}:done")), WORKER_READY_S)
            yield rt, worker, Path(tmp)
        except BaseException:
            if worker is not None:
                print(f"worker log tail:\n{worker.log()[-3000:]}", file=sys.stderr)
            raise
        finally:
            if worker is not None:
                worker.stop()
            rt.redis.close()


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
        info["loadavg_before_resume"] = [round(x, 2) for x in os.getloadavg()]
        rows = bench_resume(rt, plan, resume_model)
        info["resume_s"] = round(time.monotonic() - started, 1)
        started = time.monotonic()
        info["loadavg_before_throughput"] = [round(x, 2) for x in os.getloadavg()]
        rows += bench_throughput(rt, plan, turn_model)
        info["throughput_s"] = round(time.monotonic() - started, 1)
        info["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    return rows, info


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.celery_bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="few, short rounds: a smoke test")
    parser.add_argument("--json", metavar="PATH", type=Path, help="also write results as JSON")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    started = time.monotonic()
    with RedisServer(appendfsync="everysec") as server:
        rows, info = measure(server.url, plan)
    info["elapsed_s"] = round(time.monotonic() - started, 1)
    print("\n".join(table_lines(rows)))
    print(f"\nelapsed {info['elapsed_s']} s")
    if args.json:
        result = {"plan": asdict(plan), "info": info, "rows": [r.as_dict() for r in rows]}
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
