"""A peer for row 6 of ``make bench``: DBOS Transact (SQLite system database) measured here.

Run by ``make bench-peers`` inside its own virtualenv (``.venv-peers``, ``pip install dbos``);
dres itself never imports DBOS. Writes ``bench/peers/dbos.json``, which ``python -m bench`` reads.

What it measures, each in fresh child processes on a fresh SQLite file in a temp dir (DBOS's
default SQLite settings: every step's record is committed, and fsynced, before the next step):

1. Per-step overhead: a workflow of N no-op steps (``@DBOS.step`` returning None) beside an empty
   workflow, alternating in one process after a warm-up; per workflow,
   ``(workflow time - median empty workflow time) / N``.
2. Recovery of N completed steps: a child runs a workflow's N steps and then ``os._exit(0)``
   before the workflow returns, leaving it PENDING with N recorded step outputs; a second child
   calls ``DBOS.launch()``, whose startup recovery runs the workflow again. The body's own clock
   times the replay of the N recorded steps (each returns its stored output without running).
   Launch-to-body and launch-to-result times are also kept: they are set by DBOS's ~1 s queue
   polling, not by the replay, and are reported for information only.

Usage: ``.venv-peers/bin/python bench/peers/dbos_bench.py [--quick] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "dbos.json"
WORKFLOW_ID = "bench-recovery"
#: seconds a recovery child may take before it is stopped
CHILD_TIMEOUT_S = 180


# -- the child: everything that imports dbos ----------------------------------------------------


def child(mode: str, db: str, steps: int, workflows: int) -> None:
    started = time.perf_counter()
    from dbos import DBOS, DBOSConfig, SetWorkflowID

    import_s = time.perf_counter() - started
    config: DBOSConfig = {
        "name": "dres-bench-peer",
        "system_database_url": f"sqlite:///{db}",
        "application_version": "bench-v1",
    }
    DBOS(config=config)
    crash = mode == "crash"

    @DBOS.step()
    def noop_step(i: int) -> None:
        return None

    @DBOS.workflow()
    def empty_workflow() -> int:
        return 0

    @DBOS.workflow()
    def steps_workflow(n: int) -> dict[str, float]:
        body = time.time()
        for i in range(n):
            noop_step(i)
        after = time.time()
        if crash:
            print(json.dumps({"steps_done": time.time()}), flush=True)
            os._exit(0)  # the process dies before the workflow returns: it stays PENDING
        return {"body": body, "after_steps": after}

    t0 = time.perf_counter()
    DBOS.launch()
    launched = time.time()
    launch_ms = (time.perf_counter() - t0) * 1000
    out: dict[str, Any] = {"import_s": import_s, "launch_ms": launch_ms}
    if mode == "steps":
        out.update(_steps(empty_workflow, steps_workflow, steps, workflows))
        out["journal_mode"] = sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0]
    elif mode == "crash":
        with SetWorkflowID(WORKFLOW_ID):
            steps_workflow(steps)
        raise RuntimeError("the crash child returned from its workflow")
    elif mode == "recover":
        result = DBOS.retrieve_workflow(WORKFLOW_ID).get_result()
        done = time.time()
        out.update(
            replay_ms=(result["after_steps"] - result["body"]) * 1000,
            launch_to_body_ms=(result["body"] - launched) * 1000,
            launch_to_result_ms=(done - launched) * 1000,
        )
    print(json.dumps(out), flush=True)
    DBOS.destroy()


def _steps(empty: Any, workflow: Any, steps: int, workflows: int) -> dict[str, Any]:
    empty()
    workflow(min(steps, 50))  # warm-up
    empty_ms: list[float] = []
    steps_ms: list[float] = []
    for _ in range(workflows):
        for kind in ("empty", "steps"):
            t0 = time.perf_counter()
            if kind == "empty":
                empty()
                empty_ms.append((time.perf_counter() - t0) * 1000)
            else:
                workflow(steps)
                steps_ms.append((time.perf_counter() - t0) * 1000)
    base = statistics.median(empty_ms)
    per_step = [(ms - base) / steps for ms in steps_ms]

    def plain(i: int) -> None:
        return None

    t0 = time.perf_counter()
    for i in range(steps):
        plain(i)
    plain_us = (time.perf_counter() - t0) * 1e6 / steps
    return {
        "empty_workflow_ms": empty_ms,
        "workflow_ms": steps_ms,
        "per_step_ms": per_step,
        "plain_call_us": plain_us,
    }


# -- the driver ----------------------------------------------------------------------------------


def _run_child(mode: str, db: Path, steps: int, workflows: int = 0) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", mode, "--db", str(db), "--steps", str(steps)]
    command += ["--workflows", str(workflows)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"dbos child {mode} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return dict(json.loads(lines[-1]))


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def measure(steps: int, workflows: int, recoveries: int) -> dict[str, Any]:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dres-dbos-") as tmp:
        fresh = _run_child("steps", Path(tmp) / "steps.sqlite", steps, workflows)
        recovered: list[dict[str, Any]] = []
        for n in range(recoveries):
            db = Path(tmp) / f"recover-{n}.sqlite"
            _run_child("crash", db, steps)
            recovered.append(_run_child("recover", db, steps))
    replay = [r["replay_ms"] for r in recovered]
    return {
        "peer": "DBOS Transact",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "versions": {
            "python": platform.python_version(),
            "dbos": metadata.version("dbos"),
            "sqlalchemy": metadata.version("sqlalchemy"),
            "sqlite": sqlite3.sqlite_version,
        },
        "machine": {"cpu_count": os.cpu_count(), "cpu_model": _cpu_model()},
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "steps": steps,
        "workflows": workflows,
        "recoveries": recoveries,
        "system_database": "sqlite (DBOS defaults), fresh file in a temp dir",
        "journal_mode": fresh["journal_mode"],
        "import_s": fresh["import_s"],
        "launch_ms": fresh["launch_ms"],
        "empty_workflow_ms": summary(fresh["empty_workflow_ms"]),
        "workflow_ms": summary(fresh["workflow_ms"]),
        "per_step_ms": summary(fresh["per_step_ms"]),
        "per_step_ms_samples": fresh["per_step_ms"],
        "plain_call_us": fresh["plain_call_us"],
        "recovery_replay_ms": summary(replay),
        "recovery_replay_ms_samples": replay,
        "recovery_replay_per_step_ms": statistics.median(replay) / steps,
        "recovery_launch_to_body_ms": summary([r["launch_to_body_ms"] for r in recovered]),
        "recovery_launch_to_result_ms": summary([r["launch_to_result_ms"] for r in recovered]),
        "elapsed_s": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few, short repeats: a smoke test")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--child", choices=("steps", "crash", "recover"), help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=1000, help=argparse.SUPPRESS)
    parser.add_argument("--workflows", type=int, default=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.db, args.steps, args.workflows)
        return 0
    steps, workflows, recoveries = (200, 2, 1) if args.quick else (1000, 5, 5)
    result = measure(steps, workflows, recoveries)
    result["mode"] = "quick" if args.quick else "full"
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    step, replay = result["per_step_ms"], result["recovery_replay_ms"]
    print(
        f"DBOS {result['versions']['dbos']} (SQLite {result['versions']['sqlite']}): "
        f"per step {step['median']:.3f} ms [{step['min']:.3f}..{step['max']:.3f}] over "
        f"{workflows} workflows of {steps} no-op steps; recovery replay of {steps} completed "
        f"steps {replay['median']:.1f} ms [{replay['min']:.1f}..{replay['max']:.1f}] "
        f"({recoveries} repeats); launch->result "
        f"{result['recovery_launch_to_result_ms']['median']:.0f} ms"
    )
    print(f"wrote {args.out} in {result['elapsed_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
