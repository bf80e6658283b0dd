"""Benchmark of the run ledger against raw redis-py, both measured in the same run.

What it measures, on a private redis-server (AOF on, ``appendfsync everysec``) started here:

1. Fenced single append: the latency of ``Ledger.append(event, lease=...)`` (encode the event,
   one XADD with the run's explicit, fencing stream id) beside a raw ``XADD key * e <json>`` of
   the same pre-serialised ~500-byte JSON. Only the call itself is timed (``perf_counter_ns``);
   events, their ids and the raw payloads are built before each block.
2. Tool-call recording: what the executor adds around one write tool call, the tool itself
   excluded — a call id, then inside ``DeferSignals`` a ``Recorder.record_unless_stopped(
   ToolStart)`` (event built with its id and timestamp; ``lua/append.lua`` with the turn's Stop
   flag as a third key, as ``ToolExecutor._start`` records a write's start) and a
   ``Recorder.make(ToolDone)`` appended with ``Recorder.record_many`` (the one-XADD path) —
   beside two raw XADDs of pre-serialised payloads of the same sizes (~500 bytes each). The
   tool's validated input, its signature and its result are computed before each block
   (validation and the tool are not recording).
3. Journal rebuild: ``build_journal(ledger.events(turn_id))`` (paged XRANGE, pydantic decode of
   every entry, the fold) beside a raw paged XRANGE (COUNT 1000, exclusive start ``(id``) of the
   same stream with ``json.loads`` of every entry's ``e`` field. Each stream (1k, 10k, 100k entries,
   and 2002 = 1000 tool calls for row 6's peer comparison: ``turn_started`` then alternating
   ``tool_start``/``tool_done`` of ~500 bytes) is written once with ``Ledger.append_many``.

2g. Row 2 again in a process patched for gevent, in a greenlet (``bench.gevent_tool_call``):
   both sides on gevent's cooperative sockets, as a ``dres worker -P gevent`` records a call.

Row 2 also times the parts of dres's own CPU per call with Redis stubbed out (``cpu_breakdown_us``
in the JSON), the evidence for where its overhead goes.

How: both sides share one process, one server and one ``redis.Redis`` client (hiredis parser,
bytes replies), and alternate within the run (dres block, raw block, raw block, dres block, ...)
so that noise from the shared cores falls on both. One unrecorded warm-up precedes each
measurement. Figures are medians over blocks or repeats with [min..max]; the ratio is
median(dres) / median(raw), with the range of the per-pair ratios beside it.

Run from the project root: ``.venv/bin/python -m bench.ledger_bench [--quick] [--json PATH]``.
It reports and never asserts: the exit status is 0 even when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis

from bench.append_bench import bench_append
from bench.harness import Row, environment, loadavg, misses, private_redis, table_lines

# row modules imported these from here before bench.harness, and still may (a new one imports
# bench.harness and bench.ledger_turns)
from bench.harness import summary as summary
from bench.harness import time_each as time_each
from bench.ledger_turns import open_turn as open_turn
from bench.rebuild_bench import CALLS_1000, bench_rebuild
from bench.tool_call_bench import bench_tool_call, gevent_tool_call_rows
from ledger.store import Ledger


@dataclass(frozen=True)
class Plan:
    append_blocks: int
    append_ops: int
    #: (stream entries, repeats per side)
    rebuild: tuple[tuple[int, int], ...]
    #: blocks x calls of the tool-call recording row (0 blocks: the row is left out)
    tool_blocks: int = 0
    tool_ops: int = 0
    #: row 2 again, as many blocks and calls, in a process patched for gevent (row 2g)
    gevent_tool: bool = False


FULL = Plan(
    append_blocks=20,
    append_ops=500,
    rebuild=((1_000, 7), (CALLS_1000, 7), (10_000, 7), (100_000, 3)),
    tool_blocks=20,
    tool_ops=250,
    gevent_tool=True,
)
QUICK = Plan(
    append_blocks=4,
    append_ops=200,
    rebuild=((1_000, 3), (CALLS_1000, 3), (10_000, 3), (100_000, 1)),
    tool_blocks=4,
    tool_ops=100,
    gevent_tool=True,
)


def render(env: dict[str, Any], rows: Sequence[Row], mode: str) -> str:
    parser = "hiredis parser" if env["hiredis_parser"] else "pure-Python parser"
    header = [
        f"dres ledger benchmark ({mode})  {env['date']}",
        f"python {env['python']} on {env['platform']}, cpu_count {env['cpu_count']}, "
        f"loadavg {env['loadavg_start']} -> {env['loadavg_end']}",
        f"redis-server {env['redis_server']} (AOF, appendfsync {env['appendfsync']}), "
        f"redis-py {env['redis_py']}, hiredis {env['hiredis']} ({parser}), "
        f"pydantic {env['pydantic']} (core {env['pydantic_core']})",
        "figures: median [min..max] over blocks/repeats; ratio = median of the per-pair ratios "
        "dres / raw [their range]",
        "",
    ]
    return "\n".join([*header, *table_lines(rows)])


def measure(client: redis.Redis, plan: Plan) -> list[Row]:
    """Rows 1-3 on a running server (``client``: hiredis parser, bytes replies)."""
    ledger = Ledger(client)
    rows = bench_append(ledger, client, plan.append_blocks, plan.append_ops)
    if plan.tool_blocks:
        rows += bench_tool_call(ledger, client, plan.tool_blocks, plan.tool_ops)
    if plan.tool_blocks and plan.gevent_tool:
        where = client.connection_pool.connection_kwargs
        host, port = where.get("host", "localhost"), where.get("port", 6379)
        rows += gevent_tool_call_rows(host, port, plan.tool_blocks, plan.tool_ops)
    for size, repeats in plan.rebuild:
        rows.append(bench_rebuild(ledger, client, size, repeats))
    return rows


def run(plan: Plan) -> tuple[dict[str, Any], list[Row]]:
    with private_redis() as server:
        client = redis.Redis(port=server.port)
        try:
            env = environment(client)
            rows = measure(client, plan)
            env["loadavg_end"] = loadavg()
        finally:
            client.close()
    return env, rows


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.ledger_bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="few repeats: a smoke test")
    parser.add_argument("--json", metavar="PATH", type=Path, help="also write results as JSON")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    plan, mode = (QUICK, "quick") if args.quick else (FULL, "full")
    started = time.monotonic()
    env, rows = run(plan)
    env["elapsed_s"] = round(time.monotonic() - started, 1)
    print(render(env, rows, mode))
    missed = misses(rows)
    print()
    print(f"MISSES: {'; '.join(missed)}" if missed else "all targets met")
    print(f"elapsed {env['elapsed_s']} s")
    if args.json:
        result = {"mode": mode, "plan": asdict(plan), "environment": env, "misses": missed}
        result["rows"] = [row.as_dict() for row in rows]
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
