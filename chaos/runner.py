"""Chaos trials on a real prefork worker and a real redis-server (``make chaos``).

Each trial runs one turn of several write tools (one idempotent, one with ``identity``) under a
``restart``-mode model, and injects one fault at a random point: SIGKILL of the pool child or of
the whole worker (before tool_start, between the side effect and tool_done, after tool_done,
during the handoff to the next chunk), a soft limit inside a tool, a duplicated or dropped
successor message, or ``kill -9`` of redis-server with an AOF restart. Then it checks the
invariants of ``chaos.invariants``. A stopped foreground turn is continued, as a person would,
at most twice.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import redis

from chaos import invariants
from chaos.tools import effects_key
from ledger import keys
from worker.client import enqueue
from worker.redis_server import RedisServer
from worker.runtime import Runtime
from worker.settings import load_settings
from worker.worker_process import WorkerProcess

ROOT = Path(__file__).resolve().parents[1]
#: (action, failpoint); ``redis_kill`` is done by the runner itself
FAULTS: list[tuple[str, str]] = [
    *[
        (action, point)
        for action in ("kill_child", "kill_worker")
        for point in ("tool.before_start", "tool.after_effect", "tool.after_done", "chunk.handoff")
    ],
    ("soft_limit", "tool.after_effect"),
    ("duplicate", "chunk.handoff"),
    ("drop", "chunk.handoff"),
    ("redis_kill", "-"),
]
#: seconds a trial's turn has to reach a terminal state
BOUND_S = 40.0
ENV = {
    "DRES_SOFT_LIMIT_S": "0.5",
    "DRES_HARD_LIMIT_S": "2",
    "DRES_BG_SOFT_LIMIT_S": "0.5",
    "DRES_BG_HARD_LIMIT_S": "2",
    "DRES_VISIBILITY_TIMEOUT_S": "5",
    "DRES_LEASE_GRACE_S": "0.5",
    "DRES_HANDOFF_GRACE_S": "1",
    "DRES_REAPER_INTERVAL_S": "0.2",
    "DRES_MAX_REDISPATCHES": "3",
    "DRES_CANCEL_POLL_S": "0.05",
    "DRES_FAILPOINTS": "1",
    "DRES_TOOLS": "worker.demo_tools,chaos.tools",
    "DRES_JOURNAL_READ_BACKOFF_S": "0.2",
}
SCRIPT = {
    "on_resume": "restart",
    "steps": [
        {
            "text": "Sending.",
            "tool_calls": [
                {
                    "name": "chaos_send",
                    "input": {
                        "to": "ada@example.com",
                        "subject": "Launch",
                        "body": "Friday at 10.",
                    },
                }
            ],
        },
        {"tool_calls": [{"name": "chaos_charge", "input": {"amount": 5}}]},
        {"delay_s": 1.0, "tool_calls": [{"name": "chaos_note", "input": {"text": "charged"}}]},
        {"tool_calls": [{"name": "chaos_read", "input": {}}]},
        {"text": "All done."},
    ],
}


@dataclass
class Outcome:
    fault: str
    status: str
    can_continue: bool
    violations: list[str]
    seconds: float
    continues: int
    #: the fault really happened (its point was reached) during the trial
    fired: bool


@dataclass
class Cluster:
    """A restartable redis-server and prefork worker."""

    tmp: Path
    server: RedisServer = field(init=False)
    worker: WorkerProcess | None = None
    restarts: int = 0

    def __post_init__(self) -> None:
        self.server = RedisServer(data_dir=self.tmp / "redis").start()
        self.env = {**os.environ, **ENV, "DRES_REDIS_URL": self.server.url, "PYTHONPATH": str(ROOT)}
        os.environ.update({k: v for k, v in self.env.items() if k.startswith("DRES_")})
        self.runtime = Runtime.from_settings(load_settings())

    def ensure_worker(self) -> None:
        if self.worker is not None and self.worker.alive():
            return
        if self.worker is not None:
            self.restarts += 1
            self.worker.stop()
        log = self.tmp / f"worker-{self.restarts}.log"
        self.worker = WorkerProcess.start(self.env, log, concurrency=2, ready=False)
        self.worker.wait_ready(timeout=30)

    def kill_redis(self) -> None:
        self.server.kill()
        self.server.start()

    def close(self) -> None:
        if self.worker is not None:
            self.worker.stop()
        self.server.cleanup()


def run_trial(cluster: Cluster, rng: random.Random, script: str) -> Outcome:
    action, point = rng.choice(FAULTS)
    mode = rng.choice(["background", "background", "foreground"])
    skip = rng.randrange(3) if point.startswith("tool.") else 0
    client = cluster.runtime.redis
    client.delete(keys.chaos_fault())
    if action != "redis_kill":
        client.hset(
            keys.chaos_fault(), mapping={"point": point, "action": action, "skip": skip, "hits": 0}
        )
    cluster.ensure_worker()
    started = time.monotonic()
    turn = enqueue(
        cluster.runtime, "Send the launch email, charge 5, note it.", mode=mode, model=script
    )
    kill_after = rng.randrange(3, 20) if action == "redis_kill" else None
    status, can_continue, continues, killed = _await_end(cluster, turn.turn_id, kill_after)
    fired = killed or client.hget(keys.chaos_fault(), "fired") is not None
    client.delete(keys.chaos_fault())
    ledger = cluster.runtime.ledger
    envelopes = ledger.read_turn(turn.turn_id)
    effects = [json.loads(row) for row in client.lrange(effects_key(turn.turn_id), 0, -1)]
    violations = invariants.check(
        envelopes,
        effects,
        status=status,
        can_continue=can_continue,
        soft_limit_in_tool=action == "soft_limit",
    )
    fault = f"{action} {point} ({mode})" if point != "-" else f"{action} ({mode})"
    seconds = time.monotonic() - started
    return Outcome(fault, status, can_continue, violations, seconds, continues, fired)


def _await_end(
    cluster: Cluster, turn_id: str, kill_after: int | None
) -> tuple[str, bool, int, bool]:
    """Wait for a terminal state; continue a stopped turn (as a person would) at most twice.

    Returns the status, can_continue, the number of continues, and whether redis was killed.
    """
    deadline = time.monotonic() + BOUND_S
    continues, killed = 0, False
    while time.monotonic() < deadline:
        cluster.ensure_worker()
        try:
            meta = cluster.runtime.ledger.meta(turn_id)
            seen = cluster.runtime.redis.xlen(keys.turn_events(turn_id))
        except (redis.ConnectionError, redis.TimeoutError):
            time.sleep(0.05)  # redis-server is restarting
            continue
        if kill_after is not None and seen >= kill_after:
            kill_after, killed = None, True
            cluster.kill_redis()
            continue
        can_continue = meta.extra.get("can_continue") == "1"
        if meta.status in {"completed", "failed", "cancelled"}:
            return meta.status, can_continue, continues, killed
        if meta.status == "stopped":
            if not can_continue or continues >= 2:
                return meta.status, can_continue, continues, killed
            if cluster.runtime.control.continue_turn(turn_id, auto=False).ok:
                continues += 1
        time.sleep(0.05)
    meta = cluster.runtime.ledger.meta(turn_id)
    return f"{meta.status} (timed out)", False, continues, killed


def run(trials: int, seed: int) -> tuple[list[Outcome], Cluster]:
    rng = random.Random(seed)
    tmp = Path(tempfile.mkdtemp(prefix="dres-chaos-"))
    script_path = tmp / "script.json"
    script_path.write_text(json.dumps(SCRIPT))
    cluster = Cluster(tmp)
    outcomes = []
    try:
        for index in range(trials):
            outcome = run_trial(cluster, rng, f"scripted:{script_path}")
            outcomes.append(outcome)
            mark = "VIOLATION" if outcome.violations else "ok"
            print(
                f"[{index + 1:>3}/{trials}] {outcome.fault:<44} -> {outcome.status:<10} "
                f"{outcome.seconds:5.1f} s  {mark}",
                flush=True,
            )
            for violation in outcome.violations:
                print(f"        ! {violation}", flush=True)
    finally:
        cluster.close()
    return outcomes, cluster


def table(outcomes: list[Outcome]) -> str:
    rows: dict[str, Counter[str]] = defaultdict(Counter)
    for o in outcomes:
        stopped = o.status == "stopped" and o.can_continue
        ended = "stopped, can continue" if stopped else o.status
        rows[o.fault][ended] += 1
        rows[o.fault]["fired"] += o.fired
        rows[o.fault]["continued"] += bool(o.continues)
        rows[o.fault]["violations"] += bool(o.violations)
    columns = ["fired", "completed", "continued", "stopped, can continue", "violations"]
    others = sorted({k for c in rows.values() for k in c} - set(columns))
    header = ["fault", "trials", *columns, *others]
    lines = [header]
    for fault in sorted(rows):
        counts = rows[fault]
        trials = sum(v for k, v in counts.items() if k not in {"violations", "fired", "continued"})
        lines.append([fault, str(trials), *(str(counts[c]) for c in [*columns, *others])])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) for line in lines]
    out.insert(1, "-" * len(out[0]))
    return "\n".join(out)


def main(trials: int, seed: int) -> int:
    started = time.monotonic()
    outcomes, cluster = run(trials, seed)
    print()
    print(table(outcomes))
    violations = sum(bool(o.violations) for o in outcomes)
    print(
        f"\n{len(outcomes)} trials, seed {seed}, {violations} with violations, "
        f"{cluster.restarts} worker restarts, {time.monotonic() - started:.0f} s"
    )
    return 1 if violations else 0
