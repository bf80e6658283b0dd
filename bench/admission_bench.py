"""Row Q2 of ``make bench`` (issue 47, tenants: docs/semantics.md): what admission costs. A new
turn's enqueue -> its first ``run_started`` through dres's admission with the tenant limits set,
beside the plain Celery dispatch of the same turn (recorded ready, its message sent at once, as
dres did before admission), interleaved in the same run on an idle worker.

Setup: a private redis-server (AOF on, ``appendfsync everysec``) and one real ``dres worker -c 2``
(prefork, ``bench.scale_support.workers``). ``DRES_TENANT_CONCURRENCY`` and ``DRES_TENANT_RATE``
are set (``LIMITS``) in the bench process and the worker alike, far above what one turn at a time
reaches, so every check runs and none binds; ``DRES_TENANT_MAX_QUEUED`` too on a second runtime
of the bench process (``BOUNDED``: only the enqueuing process reads it). A scripted model that
answers at once.

A sample: ``time.time()`` just before the call, then one of
- admitted: ``Lifecycle.enqueue(message, mode="background", model=..., tenant="t")``, as the API
  does it: ``Tenancy.start`` (``lua/tenants.lua``'s start, then the broker's backlog,
  ``CeleryDispatcher.backlog``: one ``LLEN`` per chunk queue on a pooled broker connection),
  ``Lifecycle.create``, ``Lifecycle.launch``;
- bounded: the same with ``DRES_TENANT_MAX_QUEUED`` set: ``Tenancy.refuse`` reads the tenant's
  queued count first;
- plain: ``Lifecycle.create`` (not held) and ``Lifecycle.launch`` of the same turn (same message,
  model, tenant), bypassing the gate;
and the figure is the ``ts`` of the turn's first ``run_started`` in the ledger (the worker's claim)
minus that time. Also per sample, for information: the call's own time. The bench waits for the
turn's end and ``SETTLE_S`` before the next sample (the worker idle again, its end's steps done).
A round takes one sample of each kind, in an order that turns round from round to round; a
round's admitted (or bounded) sample pairs with its plain one.

Rows: enqueue -> run_started, admitted / plain, p50 (the median of the pairs' ratios, as every
paired row; the ratio of the medians beside it in the JSON and the summary; target <= 1.2) and
p90 (information); bounded / plain p50 (information); each call alone (information).

Run alone: ``python -m bench --only admission [--quick]`` or ``python -m bench.admission_bench``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.celery_worker import ENDED, bench_settings, process_env, turn_statuses
from bench.harness import Group, Row, loadavg, percentile, private_redis
from bench.scale_support import workers
from ledger.events import RunStarted
from rigs import write_script
from worker.base.logging import configure_logging
from worker.edges.runtime import Runtime

ABOUT = "row Q2: a new turn's enqueue -> run_started through admission vs a plain dispatch"
#: admitted / plain, enqueue -> run_started, ratio of the medians (issue 47)
TARGET = 1.2
#: the limits on a turn's start, none reached by one turn at a time (a rate of 1,000/s spaces
#: starts 1 ms apart: the rate's check runs, the samples are further apart than that)
LIMITS: dict[str, object] = {"tenant_concurrency": 1000, "tenant_rate": "1000/s"}
#: the bound on queued turns too: checked by the enqueuing process alone (``Tenancy.refuse``),
#: so a second runtime of this process has it and the worker's setting is moot
BOUNDED: dict[str, object] = {**LIMITS, "tenant_max_queued": 100_000}
#: seconds between a turn's end and the next sample
SETTLE_S = 0.02
#: seconds one sample's turn may take to end
END_S = 30.0
KINDS = ("admitted", "bounded", "plain")
MODE = "background"
TENANT = "t"


@dataclass(frozen=True)
class AdmissionPlan:
    #: samples of each kind (in pairs)
    samples: int
    #: uncounted pairs first
    warm: int = 10


FULL = AdmissionPlan(samples=200)
QUICK = AdmissionPlan(samples=20, warm=4)


def admitted(rt: Runtime, message: str, model: str) -> str:
    return rt.lifecycle.enqueue(message, mode=MODE, model=model, tenant=TENANT).turn_id


#: how each kind of sample sends its turn, on which of the bench's two runtimes
SEND = {"admitted": (admitted, "limits"), "bounded": (admitted, "bounded")}


def plain(rt: Runtime, message: str, model: str) -> str:
    """The same turn dispatched as dres did before admission: recorded ready, its message sent."""
    turn = rt.lifecycle.create(message, mode=MODE, model=model, tenant=TENANT)
    rt.lifecycle.launch(turn.turn_id, turn.run_id, MODE)
    return turn.turn_id


def wait_end(rt: Runtime, turn_id: str) -> None:
    deadline = time.monotonic() + END_S
    while turn_statuses(rt, [turn_id])[0] not in ENDED:
        if time.monotonic() > deadline:
            raise TimeoutError(f"turn {turn_id} did not end within {END_S:.0f} s")
        time.sleep(0.002)  # the figure comes from the ledger's ts, not from this poll
    time.sleep(SETTLE_S)


def sample(rts: dict[str, Runtime], kind: str, model: str) -> tuple[float, float]:
    """(enqueue -> run_started, the call alone), in ms."""
    send, which = SEND.get(kind, (plain, "limits"))
    rt = rts[which]
    t0 = time.time()
    turn_id = send(rt, "benchmark: a new turn", model)
    called = time.time()
    wait_end(rt, turn_id)
    run = next(e for e in rt.ledger.events(turn_id) if isinstance(e, RunStarted))
    return (run.ts - t0) * 1000, (called - t0) * 1000


def bench_admission(
    rts: dict[str, Runtime], plan: AdmissionPlan, model: str
) -> dict[str, dict[str, list[float]]]:
    """Each kind's samples; a round takes one of each, in an order that turns round."""
    out: dict[str, dict[str, list[float]]] = {k: {"run_started": [], "call": []} for k in KINDS}
    for n in range(plan.warm + plan.samples):
        shift = n % len(KINDS)
        for kind in KINDS[shift:] + KINDS[:shift]:
            to_run, call = sample(rts, kind, model)
            if n >= plan.warm:
                out[kind]["run_started"].append(to_run)
                out[kind]["call"].append(call)
    return out


def admission_rows(samples: dict[str, dict[str, list[float]]], info: dict[str, Any]) -> list[Row]:
    what = "a new turn's enqueue -> run_started, admitted (concurrency, rate set)"
    a, b, p = samples["admitted"], samples["bounded"], samples["plain"]
    extra = {
        "samples": len(a["run_started"]),
        "worker": info["worker"],
        "limits": info["limits"],
    }
    base = "the same turn: create + launch (a plain Celery dispatch)"

    def p90(values: Sequence[float]) -> list[float]:
        return [percentile([round(v * 1000) for v in values], 0.9) / 1000]

    return [
        Row(f"{what}, p50", "ms", a["run_started"], p["run_started"], TARGET, extra,
            number="Q2", baseline=base),
        Row(f"{what}, p90", "ms", p90(a["run_started"]), p90(p["run_started"]), None, extra,
            number="Q2", baseline=base),
        Row(f"{what[:-1]}, max queued set), p50", "ms", b["run_started"], p["run_started"],
            None, extra, number="Q2", baseline=base),
        Row("the enqueue call alone, admitted (concurrency, rate set), p50", "ms", a["call"],
            p["call"], None, extra, number="Q2", baseline="create + launch, the call alone"),
        Row("the enqueue call alone, admitted (concurrency, rate, max queued set), p50", "ms",
            b["call"], p["call"], None, extra, number="Q2",
            baseline="create + launch, the call alone"),
    ]  # fmt: skip


def env_of(limits: dict[str, object]) -> dict[str, str]:
    return {f"DRES_{k.upper()}": str(v) for k, v in limits.items()}


def measure(plan: AdmissionPlan) -> tuple[list[Row], dict[str, Any]]:
    """Row Q2 on a redis-server and a prefork worker of its own."""
    info: dict[str, Any] = {
        "worker": "dres worker -c 2 (prefork)",
        "limits": env_of(LIMITS),
        "bounded": env_of(BOUNDED),
        "loadavg_start": loadavg(),
    }
    configure_logging("WARNING")
    with private_redis() as server, tempfile.TemporaryDirectory(prefix="dres-bench-") as tmp:
        rts = {
            "limits": Runtime.from_settings(bench_settings(server.url, **LIMITS)),
            "bounded": Runtime.from_settings(bench_settings(server.url, **BOUNDED)),
        }
        rt = rts["limits"]
        env = process_env(server.url, **info["bounded"])
        model = write_script(Path(tmp) / "answer.json", [{"text": "done"}])
        try:
            with workers(rt, 1, env, Path(tmp), concurrency=2):
                started = time.monotonic()
                samples = bench_admission(rts, plan, model)
                info["rounds_s"] = round(time.monotonic() - started, 1)
        finally:
            for each in rts.values():
                each.redis.close()
    info["samples"] = samples
    info["loadavg_end"] = loadavg()
    return admission_rows(samples, info), info


def summary(rows: list[Row], info: dict[str, Any]) -> list[str]:
    run = rows[0]
    medians = [round(statistics.median(x), 2) for x in (run.dres, run.raw)]
    return [
        "",
        f"p50 admitted / plain: {medians[0]} / {medians[1]} ms = {run.ratio_of_medians:.2f}; "
        f"limits {info['limits']}",
        f"load average {info['loadavg_start']} -> {info['loadavg_end']}",
    ]


GROUP = Group(
    "admission", ABOUT, measure, FULL, QUICK, __doc__,
    options=(("samples", f"samples of each kind (default {FULL.samples})"),), summary=summary,
)  # fmt: skip
main = GROUP.main


if __name__ == "__main__":
    sys.exit(main())
