"""Rows M1-M2 of ``make bench`` (issue 37): many turns per worker process (docs/deploy.md).

M1. 1,000 turns (background mode), each waiting 5 s on its model (the scripted model's
    ``delay_s``) and then streaming its answer for 2 s (100 deltas of 4 characters, 20 ms apart),
    enqueued by this process as fast as it can to one ``dres worker -P gevent -c 500`` per core
    (2 on this machine): the wall time from the first enqueue to the last ``turn_ended`` ``ts``,
    as a ratio to the ideal 7 s (target <= 1.5). Beside it, in the same run, one prefork
    ``dres worker -c 2`` and then one of ``-c 16``: a prefork process holds one turn for its
    7 s, so 1,000 turns would take them minutes; each gets a batch of ``WAVES`` turns per
    process instead (about 60 s), and its row gives its turns/s and the ratio 1,000 turns would
    take at that rate: extrapolated, not measured.
M2. The workers' memory per turn in flight at M1's peak: every ``SAMPLE_S`` the bench sums
    ``Pss`` of ``/proc/PID/smaps_rollup`` over each worker's process group (the main process and
    its pool children) and counts the batch's turns that are ``running``; the figure is the PSS
    over the turns running at the sample that saw the most (target <= 1 MiB per turn). Prefork's
    figure beside it is per process: one turn runs in each.

``python -m bench --only many-turns`` (or ``python -m bench.many_turns_bench``) runs them alone.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.celery_worker import bench_settings, process_env, turn_statuses, wait_turns
from bench.harness import Group, Row, info_line, loadavg, private_redis
from bench.scale_support import workers
from ledger.events import RunStarted, TurnEnded
from rigs import WorkerProcess, write_script
from worker.edges.runtime import Runtime

#: seconds each turn waits on its model, then streams (issue 37)
WAIT_S = 5.0
STREAM_S = 2.0
IDEAL_S = WAIT_S + STREAM_S
#: the answer's deltas: ``DELTAS`` of ``DELTA_CHARS`` characters, ``STREAM_S`` in all
DELTAS = 100
DELTA_CHARS = 4
#: M1's bound: the batch's wall time over the ideal 7 s
RATIO_LIMIT = 1.5
#: M2's bound: MiB of the workers' PSS per turn in flight
PSS_LIMIT_MIB = 1.0
#: seconds between two samples of the workers' PSS and the turns running
SAMPLE_S = 0.5
#: turns per prefork process in its batch: that many 7 s waves, about a minute
WAVES = 8


@dataclass(frozen=True)
class ManyTurnsPlan:
    #: M1's batch, on ``gevent_workers`` gevent workers of ``greenlets`` each
    turns: int
    gevent_workers: int
    greenlets: int
    #: the prefork workers beside it (one worker each, ``-c N``) and their waves
    prefork: tuple[int, ...]
    waves: int


FULL = ManyTurnsPlan(
    turns=1000, gevent_workers=os.cpu_count() or 2, greenlets=500, prefork=(2, 16), waves=WAVES
)
QUICK = ManyTurnsPlan(turns=100, gevent_workers=2, greenlets=100, prefork=(2,), waves=2)


def steps() -> list[dict[str, Any]]:
    """One step: ``WAIT_S`` on the model, then ``DELTAS`` deltas over ``STREAM_S``."""
    pace = STREAM_S / DELTAS
    text = "tok " * (DELTAS * DELTA_CHARS // 4)
    return [{"delay_s": WAIT_S, "text": text, "chunk_chars": DELTA_CHARS, "stream_delay_s": pace}]


def group_pss_kib(pgid: int) -> int:
    """KiB of PSS of every process of the process group ``pgid`` (a worker and its children)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # the command name may hold spaces and parentheses: the fields follow the last ")"
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            rollup = (entry / "smaps_rollup").read_text()
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        total += next(
            int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:")
        )
    return total


class Sampler(threading.Thread):
    """(turns running, KiB of the workers' PSS) every ``SAMPLE_S`` until ``halt``."""

    def __init__(self, rt: Runtime, started: list[WorkerProcess], turn_ids: list[str]) -> None:
        super().__init__(daemon=True)
        self.rt, self.pgids, self.turn_ids = rt, [w.pid for w in started], turn_ids
        self.samples: list[tuple[int, int]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(SAMPLE_S):
            running = turn_statuses(self.rt, list(self.turn_ids)).count("running")
            self.samples.append((running, sum(group_pss_kib(pgid) for pgid in self.pgids)))

    def peak(self) -> tuple[int, int]:
        """The sample with the most turns running (of those, the most PSS)."""
        return max(self.samples, default=(0, 0))


def batch(rt: Runtime, model: str, turns: int, started: list[WorkerProcess]) -> dict[str, Any]:
    """``turns`` turns enqueued at once; the wall time to the last ``turn_ended`` and M2's peak."""
    ids: list[str] = []
    idle_kib = sum(group_pss_kib(w.pid) for w in started)  # warmed up, no turn running
    sampler = Sampler(rt, started, ids)
    sampler.start()
    t0 = time.time()
    try:
        for i in range(turns):
            ids.append(
                rt.lifecycle.enqueue(f"wait and stream {i}", mode="background", model=model).turn_id
            )
        enqueued = time.time() - t0
        wait_turns(rt, ids, 120 + turns * IDEAL_S / 4)
    finally:
        sampler.halt.set()
        sampler.join()
    last, takeovers, statuses = 0.0, 0, turn_statuses(rt, ids)
    for turn_id in ids:
        events = rt.ledger.events(turn_id)
        end = events[-1]
        assert isinstance(end, TurnEnded), turn_id
        last = max(last, end.ts)
        takeovers += sum(1 for e in events if isinstance(e, RunStarted) and e.cause != "first")
    in_flight, pss_kib = sampler.peak()
    return {
        "turns": turns,
        "wall_s": last - t0,
        "enqueue_s": enqueued,
        "completed": statuses.count("completed"),
        "runs_after_the_first": takeovers,
        "peak_in_flight": in_flight,
        "peak_pss_mib": pss_kib / 1024,
        "pss_mib_per_turn": pss_kib / 1024 / in_flight if in_flight else float("nan"),
        # what the turns add to the warmed-up, idle workers, per turn
        "idle_pss_mib": idle_kib / 1024,
        "added_pss_mib_per_turn": (pss_kib - idle_kib) / 1024 / in_flight if in_flight else 0.0,
        "samples": len(sampler.samples),
    }


def run_case(
    rt: Runtime, env: dict[str, str], tmp: Path, model: str, turns: int, count: int, c: int,
    pool: tuple[str, ...],
) -> dict[str, Any]:  # fmt: skip
    """One case: ``count`` workers of ``c`` slots (``pool``), warmed up, then the batch."""
    warm = write_script(tmp / "warm.json", [{"text": "done"}])
    with workers(rt, count, env, tmp, concurrency=c, pool=pool) as started:
        wait_turns(
            rt,
            [rt.lifecycle.enqueue("warm", mode="background", model=warm).turn_id for _ in range(c)],
            120,
        )  # imports, connections, every pool process
        return {"workers": count, "concurrency": c, **batch(rt, model, turns, started)}


def measure(plan: ManyTurnsPlan) -> tuple[list[Row], dict[str, Any]]:
    """Rows M1-M2 on a redis-server of their own: the gevent batch, then each prefork one."""
    info: dict[str, Any] = {"loadavg_start": loadavg()}
    with private_redis() as server, tempfile.TemporaryDirectory(prefix="dres-bench-") as tmp:
        rt = Runtime.from_settings(bench_settings(server.url))
        env = process_env(server.url)
        model = write_script(Path(tmp) / "wait.json", steps())
        try:
            gevent = run_case(
                rt, env, Path(tmp), model, plan.turns, plan.gevent_workers, plan.greenlets,
                ("-P", "gevent"),
            )  # fmt: skip
            prefork = {
                c: run_case(rt, env, Path(tmp), model, c * plan.waves, 1, c, ())
                for c in plan.prefork
            }
        finally:
            rt.redis.close()
    info.update(gevent=gevent, prefork={str(c): case for c, case in prefork.items()})
    info["loadavg_end"] = loadavg()
    return rows(plan, gevent, prefork), info


def rows(
    plan: ManyTurnsPlan, gevent: dict[str, Any], prefork: dict[int, dict[str, Any]]
) -> list[Row]:
    what = f"{plan.turns:,} turns (5 s wait + 2 s stream)"
    workers_text = f"{plan.gevent_workers} `dres worker -P gevent -c {plan.greenlets}`"
    out = [
        Row(f"{what}, {workers_text}: wall / ideal 7 s", "x", [gevent["wall_s"] / IDEAL_S], [],
            extra=gevent, number="M1", limit=RATIO_LIMIT),
        Row(f"{what}, {workers_text}: turns/s", "turns/s",
            [gevent["turns"] / gevent["wall_s"]], [], number="M1", higher_is_better=True),
    ]  # fmt: skip
    for c, case in prefork.items():
        rate = case["turns"] / case["wall_s"]
        extra = {**case, "turns_per_s": rate, "extrapolated_wall_s": plan.turns / rate}
        out.append(
            Row(f"prefork `-c {c}`, {case['turns']} turns: turns/s {rate:.2f}; {plan.turns:,} "
                "turns at that rate / ideal 7 s (extrapolated)", "x",
                [plan.turns / rate / IDEAL_S], [], extra=extra, number="M1")
        )  # fmt: skip
    out.append(
        Row(f"workers' PSS per turn in flight at M1's peak ({gevent['peak_in_flight']} turns, "
            f"{workers_text})", "MiB", [gevent["pss_mib_per_turn"]], [], number="M2",
            limit=PSS_LIMIT_MIB)
    )  # fmt: skip
    for c, case in prefork.items():
        out.append(
            Row(f"prefork `-c {c}`: PSS per turn in flight, i.e. per process "
                f"({case['peak_in_flight']} turns)", "MiB", [case["pss_mib_per_turn"]], [],
                number="M2")
        )  # fmt: skip
    return out


GROUP = Group(
    "many-turns",
    "rows M1-M2: 1,000 turns waiting on their models, gevent workers beside prefork (issue 37)",
    measure, FULL, QUICK, __doc__,
    summary=info_line,
)  # fmt: skip
main = GROUP.main


if __name__ == "__main__":
    sys.exit(main())
