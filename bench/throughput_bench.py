"""Row 5 of ``make bench``: throughput, N turns on a prefork worker beside N plain Celery tasks
(``bench.celery_bench`` runs it; its docstring says how).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from bench.celery_worker import WORKER_CONCURRENCY, CeleryPlan, wait_turns
from bench.harness import Row, summary
from ledger.events import ToolDone, TurnEnded
from rigs import wait_until
from worker.edges.runtime import Runtime


def throughput_script(calls: int) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "record", "input": {"n": k}}]} for k in range(calls)
    ]
    return [*steps, {"text": "done"}]


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
        rt.lifecycle.enqueue(f"benchmark turn {i}", mode="background", model=model).turn_id
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
