"""Row 4 of ``make bench``: resume latency, a chunk boundary at the soft limit beside a plain
Celery task-to-task hop (``bench.celery_bench`` runs it; its docstring says how); row 4g, the
same boundary on a gevent worker.
"""

from __future__ import annotations

import statistics
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.celery_worker import HARD_LIMIT_S, SOFT_LIMIT_S, CeleryPlan, wait_turns
from bench.harness import Row
from ledger.events import Event, ModelStart, RunEnded, RunStarted, TurnEnded
from rigs import wait_until
from worker.edges.runtime import Runtime

#: issue 27 restated it (was 3.0, then 2.0 against a plain hop): against a plain task that
#: chains from its own soft limit, which pays the same wake-up as a chunk boundary
RESUME_TARGET = 2.0
#: issue 37: row 4 restated for both pools, against a plain task chaining from its soft limit
GEVENT_RESUME_TARGET = 2.0
#: seconds: a row 4g boundary slower than this is counted apart (the median hides it)
SLOW_BOUNDARY_S = 0.1
#: seconds each resume step "thinks" on its first attempt: far past the soft limit
STEP_DELAY_S = 3.0
#: row 4's row against a plain task chaining from its own soft limit (row 4g's baseline too)
SOFT_ROW = "resume latency vs a plain task chaining from its soft limit"


def resume_script(boundaries: int) -> list[dict[str, Any]]:
    """B thinking steps with one write each (one chunk boundary per step), then the answer."""
    steps: list[dict[str, Any]] = [
        {"delay_s": STEP_DELAY_S, "tool_calls": [{"name": "record", "input": {"n": k}}]}
        for k in range(boundaries)
    ]
    return [*steps, {"text": "done"}]


def _median_ms(values: Sequence[float]) -> float:
    return statistics.median(values) * 1000


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
    turn = rt.lifecycle.enqueue("benchmark: one chunk boundary per step", model=model)
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
            None,
            extra,
            number="4",
            baseline="plain Celery task-to-task hop",
        ),
        Row(
            SOFT_ROW,
            "ms",
            dres_medians,
            [_median_ms(h) for h in soft_rounds],
            RESUME_TARGET,
            soft_extra,
            number="4",
            baseline="plain Celery task that sends the next one from its SoftTimeLimitExceeded",
        ),
    ]


def gevent_resume_row(rounds: Sequence[ResumeRound], soft: Row, worker: str) -> Row:
    """Row 4g: the boundaries of ``rounds`` (run on ``worker``, a gevent one, whose soft limit is
    dres's own timer) beside the prefork baseline of ``soft``, row 4's ``SOFT_ROW`` (never the
    plain hop's row, which the target of 4g is not set against): Celery's gevent pool has no soft
    limit, so no plain task there can chain from one. Taken after the prefork rounds, not beside
    them: unpaired, the ratio of the medians."""
    if soft.name != SOFT_ROW or soft.number != "4":
        raise ValueError(f"row 4g's baseline is row 4's {SOFT_ROW!r}, not {soft.name!r}")
    pooled = [x for r in rounds for x in r.latency]
    extra = {
        "unpaired": True,
        "rounds": len(rounds),
        "boundaries_per_round": len(rounds[0].latency) if rounds else 0,
        "soft_limit_s": SOFT_LIMIT_S,
        "worker": worker,
        "pooled_median_ms": _median_ms(pooled),
        "pooled_p90_ms": statistics.quantiles(pooled, n=10)[-1] * 1000 if len(pooled) > 1 else 0,
        # a boundary that waits for the consumer's next poll, not for dres: reported apart
        "boundaries_over_100_ms": sum(1 for x in pooled if x > SLOW_BOUNDARY_S),
        "boundaries": len(pooled),
        "dres_handoff_ms": _median_ms([x for r in rounds for x in r.handoff]),
        "dres_startup_ms": _median_ms([x for r in rounds for x in r.startup]),
    }
    return Row(
        f"resume latency, `{worker}` (dres's soft-limit timer), vs a plain task chaining from "
        "its soft limit on prefork",
        "ms",
        [_median_ms(r.latency) for r in rounds],
        list(soft.raw),
        GEVENT_RESUME_TARGET,
        extra,
        number="4g",
        baseline="row 4's plain task that sends the next one from its SoftTimeLimitExceeded, "
        "on prefork (Celery's gevent pool has no soft limit)",
    )
