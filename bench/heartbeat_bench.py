"""The cost of a short lease: Redis commands per second per idle worker and per running turn.

Issue 27 shortens the lease and the reaper's interval so that a dead worker's turn is picked up
sooner (row 7); this states what that costs. Before: the old defaults, ``DRES_LEASE_S=8``
(renewed every third of it) and ``DRES_REAPER_INTERVAL_S=2``, set explicitly; after: the defaults
of this commit (no ``DRES_*`` but the Redis URL and the tools).

For each of the two, on a private redis-server of its own (no persistence: it counts commands,
not their cost), one real dres worker (``python -m worker.edges.cli worker -c 1``, prefork, one
pool process, the reaper on; ``rigs.WorkerProcess``):

1. idle: once the worker is ready and has settled, every command Redis runs in ``window_s``, read
   from ``MONITOR`` (Celery's broker polling, the reaper's sweeps), per second;
2. one running turn: a background turn whose first step calls ``hold`` (``bench.heartbeat_tools``),
   a tool that waits without a Redis command of its own; once the ledger holds its
   ``tool_start``, the same window again. The figure is the second window minus the first: what
   one running turn adds (its heartbeat's lease renewals and looks at the Stop flag, the reapers'
   looks at its lease).

"Commands sent" are what clients send (round trips; a pipeline's commands each counted); a
script's own commands (a renewal is one EVALSHA of the turn's state machine, whose ``HGET``,
``HSET`` ... run inside it, marked ``lua`` by ``MONITOR``) are counted apart, and together with
the others in "commands run". The bench sends nothing during a window.

Run from the project root: ``.venv/bin/python -m bench.heartbeat_bench [--quick] [--json PATH]``.
``measure(quick)`` returns the rows as plain dicts (row, before, after, unit).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.events import ToolStart
from rigs import ROOT, WorkerProcess, poll, subprocess_env, write_script
from worker.base.settings import Settings, load_settings
from worker.dev.redis_server import RedisServer
from worker.edges.runtime import Runtime

TOOLS = "bench.heartbeat_tools"
#: the settings before issue 27 (the defaults then), and after (this commit's defaults)
CONFIGS: dict[str, dict[str, str]] = {
    "before": {"DRES_LEASE_S": "8", "DRES_REAPER_INTERVAL_S": "2"},
    "after": {},
}
#: seconds a worker may take to log "ready."
READY_S = 60.0
#: seconds between "ready." and the first window: the worker's start-up commands are over
SETTLE_S = 3.0
#: seconds a turn may take to reach its ``hold`` tool
START_S = 30.0
POLL_S = 0.05
#: commands named in rows of their own: (command, what it is)
NAMED = (
    ("evalsha", "scripts (a lease renewal is one)"),
    ("exists", "looks at the Stop flag"),
    ("zrangebyscore", "reaper sweeps (the due turns)"),
    ("hgetall", "reads of a turn's metadata (the reaper's looks)"),
)


@dataclass(frozen=True)
class Plan:
    #: seconds of each counting window
    window_s: float


FULL = Plan(window_s=30.0)
QUICK = Plan(window_s=10.0)


@dataclass(frozen=True)
class Calls:
    #: commands clients sent (round trips, a pipeline's commands each counted)
    sent: Counter[str]
    #: commands scripts ran (a lease renewal's HGETs and HSET, inside its one EVALSHA)
    scripted: Counter[str]

    def total(self) -> Counter[str]:
        return self.sent + self.scripted


def parse_monitor(raw: bytes) -> Calls:
    """Commands per name in ``MONITOR`` output: (sent by clients, run inside scripts)."""
    sent: Counter[str] = Counter()
    scripted: Counter[str] = Counter()
    # the last piece is empty, or a line the window's end cut off
    for line in raw.split(b"\r\n")[:-1]:
        # +1700000000.123456 [0 127.0.0.1:40000] "EXISTS" "key"; a script's: [0 lua] "HGET" ...
        source, sep, rest = line.partition(b'] "')
        if not line.startswith(b"+") or not sep:
            continue  # +OK
        name = rest.partition(b'"')[0].decode(errors="replace").lower()
        (scripted if source.endswith(b" lua") else sent)[name] += 1
    return Calls(sent, scripted)


def window(server: RedisServer, seconds: float) -> Calls:
    """Every command Redis runs in the next ``seconds``, read from ``MONITOR`` on a socket of
    its own (the bench sends nothing else meanwhile)."""
    raw = bytearray()
    with socket.create_connection(("127.0.0.1", server.port), timeout=POLL_S) as sock:
        sock.sendall(b"MONITOR\r\n")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                data = sock.recv(1 << 16)
            except TimeoutError:
                continue
            if not data:
                raise RuntimeError("redis-server closed the MONITOR connection")
            raw += data
    return parse_monitor(bytes(raw))


def producer_settings(redis_url: str) -> Settings:
    """The worker's settings, for this process (which enqueues the turn): no ``DRES_*`` from the
    environment."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("DRES_")}
    for name in saved:
        del os.environ[name]
    try:
        return load_settings(redis_url=redis_url, tools=TOOLS)
    finally:
        os.environ.update(saved)


def _holding(rt: Runtime, turn_id: str) -> bool | None:
    events = rt.ledger.events(turn_id)
    return True if any(isinstance(e, ToolStart) and e.tool == "hold" for e in events) else None


Windows = dict[str, Calls]


def one_config(overrides: Mapping[str, str], plan: Plan, tmp: Path) -> Windows:
    """The idle and the running windows of one worker with ``overrides`` on a Redis of its own."""
    with RedisServer(appendfsync="no") as server:
        env = subprocess_env({"DRES_REDIS_URL": server.url, "DRES_TOOLS": TOOLS, **overrides}, ROOT)
        name = "-".join(f"{k}={v}" for k, v in overrides.items()) or "defaults"
        worker = WorkerProcess.start(env, tmp / f"worker-{name}.log", concurrency=1, ready=False)
        rt = Runtime.from_settings(producer_settings(server.url))
        try:
            worker.wait_ready(timeout=READY_S)
            time.sleep(SETTLE_S)  # start-up over: the idle window counts the steady state
            idle = window(server, plan.window_s)
            hold_s = plan.window_s + START_S + 30
            script = [{"tool_calls": [{"name": "hold", "input": {"seconds": hold_s}}]}]
            model = write_script(tmp / f"hold-{name}.json", [*script, {"text": "Done."}])
            turn_id = rt.lifecycle.enqueue("hold", mode="background", model=model).turn_id
            if poll(lambda: _holding(rt, turn_id), START_S, POLL_S) is None:
                raise RuntimeError(f"the turn did not reach its tool:\n{worker.log()[-3000:]}")
            running = window(server, plan.window_s)
        finally:
            worker.kill_group()
            rt.app.close()
            rt.redis.close()
    return {"idle": idle, "running": running}


def run(plan: Plan) -> dict[str, Windows]:
    """Both configurations' windows: {"before"|"after": {"idle"|"running": calls}}."""
    with tempfile.TemporaryDirectory(prefix="dres-heartbeat-") as tmp:
        return {label: one_config(env, plan, Path(tmp)) for label, env in CONFIGS.items()}


def rows_of(counts: Mapping[str, Windows], window_s: float) -> list[dict[str, Any]]:
    """The rows: per idle worker, and what one running turn adds, in commands per second."""

    def figure(label: str, kind: str, name: str) -> float:
        """``kind``: idle (the idle window) or turn (running minus idle); ``name``: a command,
        "sent" (every command clients sent) or "all" (with those scripts ran)."""

        def of(calls: Calls) -> int:
            if name == "sent":
                return sum(calls.sent.values())
            if name == "all":
                return sum(calls.total().values())
            return calls.total()[name]

        windows = counts[label]
        extra = of(windows["running"]) - of(windows["idle"]) if kind == "turn" else 0
        return (extra if kind == "turn" else of(windows["idle"])) / window_s

    def row(text: str, kind: str, name: str) -> dict[str, Any]:
        before, after = (round(figure(label, kind, name), 2) for label in CONFIGS)
        return {"row": text, "before": before, "after": after, "unit": "cmd/s"}

    return [
        row("idle worker: commands sent", "idle", "sent"),
        row("idle worker: reaper sweeps (ZRANGEBYSCORE)", "idle", "zrangebyscore"),
        row("running turn, added: commands sent", "turn", "sent"),
        row("running turn, added: commands run, in scripts too", "turn", "all"),
        *[
            row(f"running turn, added: {what} ({name.upper()})", "turn", name)
            for name, what in NAMED
        ],
    ]


def measure(quick: bool) -> list[dict[str, Any]]:
    """The rows, before (lease 8 s, sweep 2 s) and after (this commit's defaults)."""
    plan = QUICK if quick else FULL
    return rows_of(run(plan), plan.window_s)


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    width = max(len(r["row"]) for r in rows)
    lines = [f"{'row':<{width}}  {'before':>8}  {'after':>8}  unit"]
    for r in rows:
        lines.append(f"{r['row']:<{width}}  {r['before']:>8.2f}  {r['after']:>8.2f}  {r['unit']}")
    return "\n".join(lines)


def breakdown(counts: Mapping[str, Windows], window_s: float) -> str:
    """Every command of every window, per second (a script's own after "in scripts")."""

    def per_s(calls: Counter[str]) -> str:
        return ", ".join(f"{k} {v / window_s:.2f}" for k, v in calls.most_common()) or "none"

    lines = []
    for label, windows in counts.items():
        for phase, calls in windows.items():
            lines.append(f"{label:<6} {phase:<7}: {per_s(calls.sent)}")
            lines.append(f"{'':<16}in scripts: {per_s(calls.scripted)}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.heartbeat_bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK.window_s:.0f} s windows")
    parser.add_argument("--json", metavar="PATH", type=Path, help="also write results as JSON")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    started = time.monotonic()
    counts = run(plan)
    rows = rows_of(counts, plan.window_s)
    print(table(rows))
    print(f"\nper command ({plan.window_s:.0f} s windows):\n{breakdown(counts, plan.window_s)}")
    print(f"\nbefore: {CONFIGS['before']}; after: this commit's defaults")
    print(f"elapsed {time.monotonic() - started:.1f} s")
    if args.json:
        raw = {
            label: {phase: {"sent": c.sent, "scripted": c.scripted} for phase, c in w.items()}
            for label, w in counts.items()
        }
        result = {"window_s": plan.window_s, "rows": rows, "counts": raw}
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
