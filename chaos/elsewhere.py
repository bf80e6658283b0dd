"""Chaos trials of tools from elsewhere (``make chaos KINDS=elsewhere``; never mixed with the
others: they need servers of their own).

The same restartable prefork worker and redis-server as ``chaos.cluster``'s, plus two real
servers beside them: the rigs' MCP server over streamable HTTP (``x``, DRES_MCP_SERVERS) and
the rigs' FastAPI app (``api``, DRES_OPENAPI). Each trial runs one turn under a ``restart``-mode
model that calls a plain MCP write (``x__send``), a plain HTTP POST (``api__create_item``), an
idempotent MCP write (``x__charge``), an idempotent PUT (``api__put_item``) and two reads, and
injects one fault: a SIGKILL of the pool child or the worker at a failpoint, a soft limit inside
a tool, a server whose next write does its work and then never answers in time (``*_hang``: an
unknown outcome), or one that dies mid-write and comes back on the same port (``*_die``).

What must hold, from the ledger and from what the servers saw (``check``): a plain write reached
its server at most once per input, and an interrupted one was never started again; every attempt
at an idempotent write carried the same key; every request a server saw carried the key of a
recorded ``tool_start`` (no effect without its record); and the turn's stream is well formed,
its end agreeing with its metadata (``chaos.invariants.other_checks``).
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos import invariants
from chaos.cluster import Cluster, Profile
from chaos.report import Outcome, TurnResult, table
from chaos.runner import POLL_S, Watch, answered, arm
from chaos.trial import Trial
from ledger import keys
from ledger.events import ToolBlocked, ToolDone, ToolStart
from ledger.journal import build_journal
from rigs import write_script
from rigs.mcp_servers import McpHttpServer, calls
from rigs.openapi_app import ApiServer, requests
from worker.engine.tools.context import idempotency_key

KIND = "elsewhere"
#: (action, failpoint), drawn with equal weights
FAULTS: list[tuple[str, str]] = [
    *[
        (action, point)
        for action in ("kill_child", "kill_worker")
        for point in ("tool.before_start", "tool.after_effect", "tool.after_done", "chunk.handoff")
    ],
    ("soft_limit", "tool.after_effect"),
    *[(f"{server}_{how}", "-") for server in ("mcp", "api") for how in ("hang", "die")],
]
#: a call to a server may take this long (seconds) before its outcome counts as unknown; the
#: hard limits leave room for it past the soft limit
CALL_S = 1.0
PROFILE = Profile(
    env=(
        ("DRES_HARD_LIMIT_S", "5"),
        ("DRES_BG_HARD_LIMIT_S", "5"),
        ("DRES_VISIBILITY_TIMEOUT_S", "10"),
    )
)
#: seconds a trial's turn has to end
BOUND_S = 60.0
PLAIN = {"x__send": "send", "api__create_item": "create_item"}
IDEMPOTENT = {"x__charge": "charge", "api__put_item": "put_item"}
SEND = {"to": "ada@example.com", "text": "launch at 10"}
STEPS: list[dict[str, Any]] = [
    {"text": "Sending.", "tool_calls": [{"name": "x__send", "input": SEND}]},
    {"tool_calls": [{"name": "api__create_item", "input": {"name": "launch"}}]},
    # over the soft limit (0.5 s): every turn takes two chunks at least
    {"delay_s": 1.0, "tool_calls": [{"name": "x__charge", "input": {"amount": 5}}]},
    {
        "tool_calls": [
            {"name": "api__put_item", "input": {"item_id": "it_9", "name": "final"}},
            {"name": "x__lookup", "input": {"key": "launch"}},
            {"name": "api__get_item", "input": {"item_id": "it_9"}},
        ]
    },
    {"text": "All done."},
]


@dataclass
class ElsewhereCluster(Cluster):
    """``Cluster`` with the MCP server and the HTTP API the worker's tools call."""

    mcp: McpHttpServer = field(init=False)
    api: ApiServer = field(init=False)

    def start_store(self) -> dict[str, str]:
        env = super().start_store()
        self.mcp = McpHttpServer(self.tmp / "mcp.jsonl", hang=self.tmp / "mcp.hang").start()
        self.api = ApiServer(self.tmp / "api.jsonl", hang=self.tmp / "api.hang").start()
        servers = {"x": self.mcp.entry(timeout_s=CALL_S)}
        apis = {"api": self.api.entry(timeout_s=CALL_S)}
        return {**env, "DRES_MCP_SERVERS": json.dumps(servers), "DRES_OPENAPI": json.dumps(apis)}

    def source(self, action: str) -> McpHttpServer | ApiServer:
        return self.mcp if action.startswith("mcp") else self.api

    def fresh(self) -> None:
        """Each trial's servers saw nothing yet, and hang no write."""
        for server in (self.mcp, self.api):
            server.log.unlink(missing_ok=True)
            if server.hang is not None:
                server.hang.unlink(missing_ok=True)

    def stop_store(self) -> None:
        self.mcp.stop()
        self.api.stop()
        super().stop_store()


@dataclass
class ElsewhereWatch(Watch):
    """Follows the trial's turn; for a ``*_die`` fault, kills the server once its hung write
    arrived, and starts it again on the same port."""

    def strikes(self) -> bool:
        trial, cluster = self.trial, self.cluster
        if self.fired or not trial.action.endswith("_die"):
            return False
        assert isinstance(cluster, ElsewhereCluster)
        server = cluster.source(trial.action)
        if server.hang is None or server.hang.exists():
            return False  # the write to hang has not arrived yet (it uses the flag up)
        self.fired = True
        server.stop()
        server.start()
        return True


def seen(cluster: ElsewhereCluster) -> list[dict[str, Any]]:
    """What the servers saw this trial: ``{"tool", "key", "input"}`` per request, by dres's
    tool names."""
    rows = [
        {"tool": f"x__{c['tool']}", "key": c["key"], "input": c["arguments"]}
        for c in calls(cluster.mcp.log)
    ]
    rows += [
        {"tool": f"api__{r['operation']}", "key": r["key"], "input": r["body"]}
        for r in requests(cluster.api.log)
    ]
    return rows


def check(events: Sequence[Any], rows: Sequence[dict[str, Any]], turn_id: str) -> list[str]:
    """The invariants of tools from elsewhere (the module's docstring)."""
    out = []
    plain = Counter((r["tool"], json.dumps(r["input"], sort_keys=True)) for r in rows)
    out += [
        f"{t} reached its server {n} times: {i}"
        for (t, i), n in plain.items()
        if n > 1 and t in PLAIN
    ]
    keys: dict[tuple[str, str], set[str]] = {}
    for r in rows:
        if r["tool"] in IDEMPOTENT:
            keys.setdefault((r["tool"], json.dumps(r["input"], sort_keys=True)), set()).add(
                r["key"]
            )
    out += [f"{t} was sent under {len(k)} keys: {i}" for (t, i), k in keys.items() if len(k) > 1]
    starts = [e for e in events if isinstance(e, ToolStart)]
    tried = Counter((e.tool, e.signature) for e in starts if e.tool in PLAIN)
    out += [f"{t} started {n} times with one input" for (t, _), n in tried.items() if n > 1]
    recorded = {idempotency_key(turn_id, e.tool, e.signature, k) for e in starts for k in range(4)}
    out += [
        f"{r['tool']} request with no tool_start (key {r['key']})"
        for r in rows
        if r["tool"] in PLAIN | IDEMPOTENT and r["key"] not in recorded
    ]
    return out


def paths(events: Sequence[Any]) -> Counter[str]:
    """What the trial exercised: writes left interrupted, retries refused by the guard, repeats
    blocked by layer 2, idempotent retries run again under their key."""
    found: Counter[str] = Counter()
    found["left interrupted"] = len(build_journal(events).interrupted)
    for e in events:
        if isinstance(e, ToolBlocked):
            found["blocked" if e.reason == "completed" else f"refused ({e.reason})"] += 1
        elif isinstance(e, ToolDone) and isinstance(e.result, dict) and "superseded_by" in e.result:
            found["idempotent retries run again"] += 1
    return +found


def draw(rng: random.Random, naive: bool = False) -> Trial:
    action, point = rng.choice(FAULTS)
    mode = rng.choice(["background", "background", "foreground"])
    skip = rng.randrange(4) if point.startswith("tool.") else rng.randrange(2)
    return Trial(action, point, mode, skip, None, naive=naive)


def run_trial(
    cluster: ElsewhereCluster, trial: Trial, script: str, seen_paths: Counter[str]
) -> Outcome:
    client = cluster.runtime.redis
    cluster.fresh()
    answered(lambda: arm(client, trial))
    if trial.action.endswith(("_hang", "_die")):
        hang = cluster.source(trial.action).hang
        assert hang is not None
        hang.write_text(str(trial.skip))  # the first write hangs, or the second
    cluster.ensure_worker(PROFILE)
    started = time.monotonic()
    turn = cluster.runtime.lifecycle.enqueue(
        "Send, create, charge, put.", mode=trial.mode, model=script
    )
    turn_id = turn.turn_id
    watch = ElsewhereWatch(cluster, [turn_id], trial, max_continues=2)
    deadline = time.monotonic() + BOUND_S
    while watch.done != {turn_id} and time.monotonic() < deadline:
        cluster.ensure_worker(PROFILE)
        watch.strikes()
        answered(watch.look)
        time.sleep(POLL_S)
    point_fired = answered(lambda: client.hget(keys.chaos_fault(), "fired")) is not None
    hung = trial.action.endswith(("_hang", "_die"))
    hang = cluster.source(trial.action).hang if hung else None
    fired = point_fired or (hung and hang is not None and not hang.exists())
    outcome = Outcome(trial.fault, [], 0.0, bool(fired))
    ledger = cluster.runtime.ledger
    meta = answered(lambda: ledger.meta(turn_id))
    envelopes = answered(lambda: ledger.read_turn(turn_id))
    events = [env.event for env in envelopes]
    status, code = str(meta.status), meta.code
    outcome.violations += invariants.other_checks(
        envelopes, [], status=status, code=code, soft_limit_in_tool=False
    )
    duplicates = check(events, seen(cluster), turn_id)
    if trial.naive:  # expected: naive resume repeats interrupted writes
        outcome.duplicate_notes = duplicates
    else:
        outcome.violations += duplicates
    outcome.duplicate_notes.insert(
        0, ", ".join(f"{n} {w}" for w, n in sorted(paths(events).items()))
    )
    seen_paths.update(paths(events))
    if turn_id not in watch.done:
        outcome.violations.append(f"the turn did not end within {BOUND_S:.0f} s")
    end = invariants.last_turn_ended(events)
    outcome.turns.append(
        TurnResult(
            status=status,
            code=code,
            can_continue=bool(end and end.can_continue),
            continues=watch.continues.get(turn_id, 0),
            timed_out=turn_id not in watch.done,
            duplicates=len(duplicates) if trial.naive else 0,
        )
    )
    outcome.seconds = time.monotonic() - started
    return outcome


def main(trials: int, seed: int, naive: bool = False) -> int:
    """Run the trials and print the table; 1 if any invariant broke (``naive``: the worker
    resumes with neither layer nor the guard, and the duplicate checks' findings are counted,
    not failed)."""
    began = time.monotonic()
    rng = random.Random(seed)
    tmp = Path(tempfile.mkdtemp(prefix="dres-chaos-elsewhere-"))
    script = write_script(tmp / "script.json", STEPS, on_resume="restart")
    cluster = ElsewhereCluster(tmp, naive=naive)
    outcomes = []
    exercised: Counter[str] = Counter()
    try:
        for index in range(trials):
            outcome = run_trial(cluster, draw(rng, naive), script, exercised)
            outcomes.append(outcome)
            mark = "VIOLATION" if outcome.violations else "ok"
            print(
                f"[{index + 1:>3}/{trials}] {outcome.fault:<44} -> {outcome.status:<10} "
                f"{outcome.seconds:5.1f} s  {mark}",
                flush=True,
            )
            for violation in outcome.violations:
                print(f"        ! {violation}", flush=True)
            print(f"        = {outcome.duplicate_notes[0] or 'no call was cut'}", flush=True)
            for note in outcome.duplicate_notes[1:]:
                print(f"        x {note}", flush=True)
    finally:
        cluster.close()
    print()
    print(table(outcomes))
    violations = sum(bool(o.violations) for o in outcomes)
    print(
        f"\n{len(outcomes)} trials ({KIND}, {'naive resume' if naive else 'dres'}), seed {seed}, "
        f"{violations} with violations, {sum(o.duplicates for o in outcomes)} duplicate effects, "
        f"{cluster.restarts} worker restarts, {time.monotonic() - began:.0f} s"
    )
    print("calls: " + ", ".join(f"{n} {what}" for what, n in sorted(exercised.items())))
    return 1 if violations else 0
