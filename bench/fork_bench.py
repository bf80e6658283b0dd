"""Row F1 of ``make bench`` (forks, docs/semantics.md): what a fork costs, from the request to the
fork's first ``run_started``, with 100 and 10,000 events in the turn it replaces, beside a plain
new turn (a new message in a conversation) measured the same way.

Setup: a private redis-server (AOF on, ``appendfsync everysec``) and one real dres worker,
``dres worker -c 2`` (prefork, ``bench.celery_worker.running_worker``, rows 4-5's), which runs
every turn of the row; a scripted model that answers at once.

A trial: a fresh conversation of one ended turn of N events (N = 100 or 10,000, the whole stream:
``turn_started``, ``run_started``, N - 4 tool events of ~540 B of JSON alternating ``tool_start``
/ ``tool_done``, ``run_ended``, ``turn_ended``), written straight to the ledger through the
lifecycle's own steps (``create``, ``claim``, ``Ledger.append_many`` under the run's lease,
``finish``: a real turn's stream, metadata and place in its conversation, without running its
calls). Then, in this process as the API does it, either ``Lifecycle.fork(turn_id)`` (a
regenerate: it replaces that turn) or ``Lifecycle.enqueue(message, conversation_id=...)`` (a
plain new message after it), timed from ``time.time()`` just before the call to the ``ts`` of
the new turn's first ``run_started`` in the ledger, which the worker's claim writes: the call
(the fork's reads and steps, or the new message's; the release through the conversation's line,
its context read, the Celery message), the worker taking the message, and its claim. Also per
trial, for information: the call's own time, and the new turn's first ``model_start`` (a fork's
first run reads the inherited turns' events before it: that read grows with N, after the row's
end point). After the trial the conversation is erased.

Rounds: each round measures both lengths (their order alternating) and at each length the fork
and the plain turn (their order alternating), each on its own fresh conversation; a round's
samples pair. Rows: the fork / the plain turn at each length (paired by round; the target on the
10,000-event row), and the fork at 10,000 events / the fork at 100 (its growth, information).

Run alone: ``python -m bench --only fork [--quick]`` or ``python -m bench.fork_bench``.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.celery_worker import running_worker, wait_turns
from bench.harness import Group, Row, loadavg, private_redis
from bench.ledger_turns import tool_event
from ledger import keys
from ledger.codec import FIELD
from ledger.events import Event, ModelStart, RunStarted, TurnStarted
from ledger.turn import TurnStatus
from rigs import write_script
from worker.edges.runtime import Runtime
from worker.engine.loop import RunResult

ABOUT = "row F1: a fork's request -> its first run_started, beside a plain new turn (forks)"
#: the fork / the plain new turn at 10,000 events (the fork's request -> its first run_started)
FORK_TARGET = 1.5
#: events in the replaced turn's stream (and in the turn the plain message follows)
LENGTHS = (100, 10_000)
#: seconds the bench waits after writing a trial's conversation, before the request
SETTLE_S = 0.2
#: seconds a trial's new turn may take to end
END_S = 60.0
KINDS = ("fork", "plain")


@dataclass(frozen=True)
class ForkPlan:
    #: rounds; each measures both lengths, a fork and a plain turn at each
    rounds: int
    lengths: tuple[int, ...] = LENGTHS
    #: uncounted rounds first (every pool process builds its runtime, imports its tools)
    warm_rounds: int = 1


FULL = ForkPlan(rounds=20)
QUICK = ForkPlan(rounds=3)


@dataclass
class Sample:
    """One trial's figures, in ms after ``time.time()`` just before the request."""

    kind: str
    length: int
    #: the new turn's first run_started (the row's figure)
    run_started_ms: float
    #: the request's own call (``fork`` or ``enqueue``) returned
    call_ms: float
    #: the new turn's first model_start
    model_start_ms: float
    turn_id: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


# -- a conversation of one ended turn of N events --------------------------------------------

#: events of each model call in a crafted turn: its model_start, then tool events
RESPONSE = 5


def long_turn(rt: Runtime, length: int, model: str) -> tuple[str, str]:
    """A new conversation whose one turn ended (completed) with ``length`` events in its stream,
    written through the lifecycle's steps; (conversation id, turn id)."""
    turn = rt.lifecycle.create(
        "benchmark: the turn a fork replaces", mode="background", model=model
    )
    run = rt.lifecycle.claim(turn.turn_id, turn.run_id)
    if run is None:
        raise RuntimeError(f"could not claim {turn.turn_id}")
    now = time.time()
    header = {"run_id": run.run_id, "chunk": run.chunk, "ts": now}
    # as a real turn's: each model call's start before its tool events (a new message's history
    # reads the replaced-or-not turn's last response, from its last model_start)
    events: list[Event] = [
        ModelStart(
            event_id=f"{turn.turn_id}:m{n}", turn_id=turn.turn_id, step=n // RESPONSE, **header
        )
        if n % RESPONSE == 0
        else tool_event(turn.turn_id, n).model_copy(update=header)
        for n in range(length - 4)
    ]
    rt.ledger.append_many(events, lease=run.lease)
    rt.lifecycle.finish(run, RunResult(TurnStatus.COMPLETED.value))
    written = rt.redis.xlen(keys.turn_events(turn.turn_id))
    if written != length:
        raise RuntimeError(f"turn {turn.turn_id} has {written} events, not {length}")
    return turn.conversation_id, turn.turn_id


def entry_sizes(rt: Runtime, model: str) -> dict[str, int]:
    """The stored JSON of a written turn's tool events (a probe turn, erased after): their
    smallest and largest, in bytes."""
    conversation_id, turn_id = long_turn(rt, 100, model)
    entries: Any = rt.redis.xrange(keys.turn_events(turn_id))
    sizes = [len(fields[FIELD.encode()]) for _, fields in entries[2:-2]]
    rt.lifecycle.store.conversations.erase(conversation_id)
    return {"min": min(sizes), "max": max(sizes)}


def settle(rt: Runtime) -> None:
    """Before a request: no AOF rewrite or save under way, the bench's garbage collected."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        info = rt.redis.info("persistence")
        if not info.get("aof_rewrite_in_progress") and not info.get("rdb_bgsave_in_progress"):
            break
        time.sleep(0.05)
    gc.collect()
    time.sleep(SETTLE_S)


# -- a trial ----------------------------------------------------------------------------------


def trial(rt: Runtime, kind: str, length: int, model: str) -> Sample:
    conversation_id, turn_id = long_turn(rt, length, model)
    settle(rt)
    t0 = time.time()
    if kind == "fork":
        new = rt.lifecycle.fork(turn_id).turn_id
    else:
        new = rt.lifecycle.enqueue(
            "benchmark: a new message", conversation_id=conversation_id, mode="background",
            model=model,
        ).turn_id  # fmt: skip
    called = time.time()
    wait_turns(rt, [new], END_S)
    events = rt.ledger.events(new)
    run = next(e for e in events if isinstance(e, RunStarted))
    model_start = next(e for e in events if isinstance(e, ModelStart))
    started = events[0]
    assert isinstance(started, TurnStarted)
    sample = Sample(
        kind,
        length,
        (run.ts - t0) * 1000,
        (called - t0) * 1000,
        (model_start.ts - t0) * 1000,
        new,
        {"inherits": len(started.inherits), "events": len(events)},
    )
    erased = rt.lifecycle.store.conversations.erase(conversation_id)
    if not erased.ok:
        raise RuntimeError(f"conversation {conversation_id} not erased: {erased}")
    return sample


def bench_forks(rt: Runtime, plan: ForkPlan, model: str) -> list[list[Sample]]:
    """Every round's samples (the warm-up rounds' left out)."""
    rounds = []
    for n in range(plan.warm_rounds + plan.rounds):
        lengths = plan.lengths if n % 2 == 0 else plan.lengths[::-1]
        samples = []
        for i, length in enumerate(lengths):
            kinds = KINDS if (n + i) % 2 == 0 else KINDS[::-1]
            samples += [trial(rt, kind, length, model) for kind in kinds]
        if n >= plan.warm_rounds:
            rounds.append(samples)
    return rounds


# -- rows -------------------------------------------------------------------------------------


def figures(rounds: Sequence[Sequence[Sample]], kind: str, length: int, what: str) -> list[float]:
    return [getattr(s, what) for r in rounds for s in r if s.kind == kind and s.length == length]


def _median(values: Sequence[float]) -> float:
    return round(statistics.median(values), 2) if values else float("nan")


def fork_rows(rounds: Sequence[Sequence[Sample]], info: dict[str, Any]) -> list[Row]:
    """F1's rows: the fork beside the plain turn at each length, and the fork's growth."""
    lengths = sorted({s.length for r in rounds for s in r})
    rows = []
    for length in lengths:
        fork = figures(rounds, "fork", length, "run_started_ms")
        plain = figures(rounds, "plain", length, "run_started_ms")
        extra = {
            "rounds": len(rounds),
            "events": length,
            "median_call_ms": {k: _median(figures(rounds, k, length, "call_ms")) for k in KINDS},
            "median_to_first_model_start_ms": {
                k: _median(figures(rounds, k, length, "model_start_ms")) for k in KINDS
            },
            "entry_json_bytes": info.get("entry_json_bytes"),
            "worker": info.get("worker", ""),
        }
        rows.append(
            Row(
                f"fork -> its first run_started, {length:,} events replaced", "ms", fork, plain,
                FORK_TARGET if length == max(lengths) else None, extra, number="F1",
                baseline=f"a new message after a turn of {length:,} events -> its run_started",
            )
        )  # fmt: skip
    if len(lengths) > 1:
        short, long = min(lengths), max(lengths)
        plain_growth = _median(figures(rounds, "plain", long, "run_started_ms")) / _median(
            figures(rounds, "plain", short, "run_started_ms")
        )
        rows.append(
            Row(
                f"fork -> its first run_started, {long:,} events vs {short:,}", "ms",
                figures(rounds, "fork", long, "run_started_ms"),
                figures(rounds, "fork", short, "run_started_ms"),
                None, {"rounds": len(rounds), "plain_growth": round(plain_growth, 2)},
                number="F1", baseline=f"the same fork with {short:,} events replaced",
            )
        )  # fmt: skip
    return rows


def measure(redis_url: str, plan: ForkPlan) -> tuple[list[Row], dict[str, Any]]:
    """Row F1 against the Redis at ``redis_url`` (its worker is started and stopped here)."""
    info: dict[str, Any] = {"worker": "dres worker -c 2 (prefork)", "lengths": list(plan.lengths)}
    with running_worker(redis_url) as (rt, worker, tmp):
        info["worker_pid"] = worker.pid
        model = write_script(tmp / "answer.json", [{"text": "done"}])
        info["entry_json_bytes"] = entry_sizes(rt, model)
        info["loadavg_before"] = loadavg()
        started = time.monotonic()
        rounds = bench_forks(rt, plan, model)
        info["rounds_s"] = round(time.monotonic() - started, 1)
        info["loadavg_end"] = loadavg()
        info["samples"] = [vars(s) for r in rounds for s in r]
    return fork_rows(rounds, info), info


def on_private_redis(plan: ForkPlan) -> tuple[list[Row], dict[str, Any]]:
    with private_redis() as server:
        return measure(server.url, plan)


GROUP = Group(
    "fork", ABOUT, on_private_redis, FULL, QUICK, __doc__,
    options=(("rounds", f"rounds (default {FULL.rounds})"),),
    summary=lambda _, x: ["", f"load average {x['loadavg_before']} -> {x['loadavg_end']}"],
)  # fmt: skip
main = GROUP.main


if __name__ == "__main__":
    sys.exit(main())
