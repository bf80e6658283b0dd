"""``python -m bench``: every row of ``make bench`` in one table, each dres figure beside its
baseline measured in the same run.

1. fenced ledger append p50 / raw redis-py XADD p50 (target <= 1.3)
2. one tool call's recording (start + done, fenced, as the executor does it) / two raw XADDs
   (target <= 1.3)
3. journal rebuild of 1k, 10k, 100k events / raw paged XRANGE + json.loads (target <= 1.3 at 10k)
4. resume latency, soft limit caught -> next chunk's first model call / a plain Celery
   task-to-task hop on the same worker (target <= 3)
5. throughput of N turns x 5 write tool calls on a prefork worker of 2 processes, turns/s and
   tool calls/s / N plain Celery tasks end to end (ratio reported, no target)
6. a peer, when ``make bench-peers`` has written ``bench/peers/dbos.json``: DBOS Transact's
   per-step overhead (SQLite) / dres's per-tool-call recording (row 2), and DBOS's recovery of
   1000 completed steps / dres's journal rebuild of 1000 tool calls
7. crash pickup: two dres workers with default limits and lease; a background turn's pool process,
   or its whole worker, SIGKILLed mid-step -> the next run's ``run_started`` (no baseline: an
   absolute time, target <= 15 s on the median)
2g, 4g, 7g, S2g (issue 37): rows 2, 4, 7 and S2 again, in the same run, under gevent: row 2 in a
   process patched for gevent as ``dres worker -P gevent`` is (target <= 1.4); row 4's turn on
   a ``dres worker -P gevent -c 2`` beside row 4's plain task chaining from its soft limit on
   prefork (target <= 2); row 7's whole worker case with both workers on gevent (target <= 5 s);
   S2's paced case's bytes per text byte with the worker on gevent (target <= 2).
S1-S3 (issue 16, ``bench.scale_bench``): turns/s and p99 with one worker process vs two; a
   streamed 2,000-token answer's delay to an SSE client and its Redis bytes per text byte
   (target <= 2); Redis per recorded tool call and per ended turn. ``--only scale`` runs them
   alone (``--turns N`` sets S1's turns).
C1-C3 (issue 16, ``bench.cluster_bench``): rows 1-3 with the ledger on a three-master Redis Cluster
   beside one redis-server, in alternating rounds. ``--only cluster`` runs them alone.
D1-D4 (issue 23, ``bench.durability_bench``): one write tool call recorded at each
   ``DRES_DURABILITY`` level / the same call at ``ack``, on a primary and a replica.
   ``--only durability`` runs them alone.
D5-D6 (issue 23, ``bench.failover_bench``): a Sentinel failover (``SENTINEL FAILOVER``, SIGKILL of
   the master) in the middle of a turn on a real worker -> the turn's next event, and its next
   model call, on the new master. ``--only failover`` runs them alone.
M3 (issue 37, ``bench.fanout_bench``): 1,000 SSE watchers of 100 streaming turns on one API
   process: last token -> watcher p99 (target <= 100 ms) and the Redis connections the API holds
   (target <= 20). ``--only fanout`` runs it alone.
M1-M2 (issue 37, ``bench.many_turns_bench``): 1,000 turns each waiting 5 s on its model then
   streaming 2 s, on one ``dres worker -P gevent`` per core: wall time / the ideal 7 s (target
   <= 1.5), prefork ``-c 2`` and ``-c 16`` beside it on smaller batches (extrapolated); the
   workers' PSS per turn in flight at the peak (target <= 1 MiB). ``--only many-turns`` runs
   them alone.
T1 (issue 39, ``bench.tracing_bench``): row 2's tool call inside the executor's tracing hooks,
   tracing on (the SDK exporting over OTLP/HTTP to a local receiver) beside it off.
   ``--only tracing`` runs it alone.
F1 (forks, ``bench.fork_bench``): a fork's request (``Lifecycle.fork``) -> its first
   ``run_started`` on a real worker, with 100 and 10,000 events in the turn it replaces, beside a
   new message after the same turn (target <= 1.5 at 10,000 events). ``--only fork`` runs it alone.
Q1 (issue 47, ``bench.fairness_bench``): tenant B's 10 turns enqueued behind tenant A's 1,000 on a
   saturated ``dres worker -P gevent -c 50``: B's wait to start in B's own turn durations, p95
   through dres's fair admission (target <= 3) beside the same turns dispatched FIFO as before
   admission, in the same run. ``--only fairness`` runs it alone.
Q2 (issue 47, ``bench.admission_bench``): a new turn's enqueue -> its run_started through the
   admission with tenant limits set / the same turn dispatched plainly (create + launch),
   interleaved on an idle worker (target <= 1.2). ``--only admission`` runs it alone.
L1 (issue 48, ``bench.framework_bench``): a pydantic-ai agent's (and an Agents SDK agent's) turn
   of one tool call against a fake OpenAI-compatible model, run by dres (``Lifecycle.create`` +
   ``run_chunk`` through the framework's adapter) / the same agent run alone, alternating blocks
   in this process (target <= 1.5 at p50). ``--only framework`` runs it alone.
W1 (issue 49, ``bench.timer_bench``): 10,000 turns waiting on timers due in the same second,
   woken by two workers' reaper threads (``Reaper.sweep``): wake delay p50 / p99 / max (target
   p99 <= 2 s), each turn woken once, a sweep's Redis bytes with none due at 1,000 and 10,000
   waiting (target: flat, <= 1.1) and per woken turn. ``--only timers`` runs it alone.

Rows 1-3 run in this process (``bench.ledger_bench``; row 2g in a subprocess of its own,
``bench.gevent_tool_call``), rows 4-5 against a real dres worker subprocess
(``bench.celery_bench``; row 4g then against a gevent one), row 7 against two
(``bench.pickup_bench``), row 7g against two gevent ones, each group on a private redis-server
(AOF, everysec) started here for it and stopped after it. It reports and
never asserts: the exit status is 0 even when a target is missed. ``--quick`` is a smoke test;
``--markdown PATH`` writes a RESULTS.md-style report (machine, versions, date, the table,
notes) and keeps the sections written into that file by hand; ``--pickup-trials N`` sets row
7's and 7g's trials per case. Row 7 alone: ``python -m bench.pickup_bench [--quick] [--trials N]``
(row 7g: ``--gevent``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import redis

from bench import (
    admission_bench,
    celery_bench,
    cluster_bench,
    cost_bench,
    durability_bench,
    failover_bench,
    fairness_bench,
    fanout_bench,
    fork_bench,
    framework_bench,
    ledger_bench,
    many_turns_bench,
    pickup_bench,
    scale_bench,
    timer_bench,
    tracing_bench,
)
from bench.harness import (
    GEVENT,
    HERE,
    Group,
    Row,
    loadavg,
    machine_environment,
    misses,
    private_redis,
    progress,
    table_lines,
)
from bench.peer_bench import DEFAULT_PEERS, peer_rows
from bench.report import header_lines, keep_written_sections, markdown

DEFAULT_JSON = HERE / "results.json"

#: the groups of rows with servers of their own, after rows 1-7: the full run measures them in
#: this order and ``--only NAME`` runs one alone. A new group of rows: its module's ``GROUP``
#: (``bench.harness.Group``), listed here, and its line in ``bench.report_notes.METHOD``.
GROUPS: tuple[Group, ...] = (
    scale_bench.GROUP,
    cluster_bench.GROUP,
    durability_bench.GROUP,
    failover_bench.GROUP,
    cost_bench.GROUP,
    fanout_bench.GROUP,
    many_turns_bench.GROUP,
    tracing_bench.GROUP,
    fork_bench.GROUP,
    fairness_bench.GROUP,
    admission_bench.GROUP,
    framework_bench.GROUP,
    timer_bench.GROUP,
)
#: groups of rows ``--only`` runs alone
ONLY = {group.name: group.about for group in GROUPS}
#: what runs each group alone: its own servers and report
OWN_MAIN = {group.name: group.main for group in GROUPS}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--quick", action="store_true", help="few, short repeats: a smoke test")
    parser.add_argument("--markdown", metavar="PATH", type=Path, help="write a RESULTS.md")
    parser.add_argument("--json", metavar="PATH", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--peers", metavar="PATH", type=Path, default=DEFAULT_PEERS)
    parser.add_argument(
        "--pickup-trials",
        metavar="N",
        type=int,
        help=f"row 7's trials per case (default {pickup_bench.FULL.trials}, "
        f"{pickup_bench.QUICK.trials} with --quick)",
    )
    parser.add_argument(
        "--only",
        choices=ONLY,
        help="run one group of rows alone, print them and write their JSON beside results.json",
    )
    parser.add_argument(
        "--turns",
        metavar="N",
        type=int,
        help=f"row S1's short turns per round (default {scale_bench.FULL.turns}, "
        f"{scale_bench.QUICK.turns} with --quick)",
    )
    args = parser.parse_args(argv)
    if args.pickup_trials is not None and args.pickup_trials < 1:
        parser.error("--pickup-trials must be at least 1")
    if args.turns is not None and args.turns < 2:
        parser.error("--turns must be at least 2")
    return args


def only(args: argparse.Namespace) -> int:
    """One group of rows alone, on servers of its own: printed, and its JSON written (beside
    results.json, as ``results-NAME.json``, unless ``--json`` says where)."""
    group = next(group for group in GROUPS if group.name == args.only)
    return group.main(only_argv(args, group))


def only_argv(args: argparse.Namespace, group: Group) -> list[str]:
    """The command line ``--only`` hands the group: ``--quick``, ``--json``, and those of the
    group's options that ``python -m bench`` takes too and was given (``--turns N``)."""
    path = args.json if args.json != DEFAULT_JSON else HERE / f"results-{group.name}.json"
    argv = [*(["--quick"] if args.quick else []), "--json", str(path)]
    for option in group.forward:
        if getattr(args, option, None) is not None:
            argv += [f"--{option}", str(getattr(args, option))]
    return argv


def rows_1_to_7(
    args: argparse.Namespace, started: float, env: dict[str, Any], result: dict[str, Any]
) -> tuple[list[Row], list[Row]]:
    """Rows 1-5 and row 7 (and 2g, 4g, 7g), each group on a private redis-server of its own;
    ``env`` gets the run's environment, ``result`` the plans and what the Celery rows and row 7
    saw (row 7g's under ``pickup_gevent``)."""
    quick = args.quick
    mode = result["mode"]
    lplan = ledger_bench.QUICK if quick else ledger_bench.FULL
    cplan = celery_bench.QUICK if quick else celery_bench.FULL
    pplan = pickup_bench.QUICK if quick else pickup_bench.FULL
    if args.pickup_trials is not None:
        pplan = replace(pplan, trials=args.pickup_trials)
    result["plan"] = {"ledger": asdict(lplan), "celery": asdict(cplan), "pickup": asdict(pplan)}
    with private_redis() as server:
        client = redis.Redis(port=server.port)
        try:
            env.update(machine_environment(client))
            progress(started, f"rows 1-3 and 2g: ledger vs raw redis-py ({mode})")
            rows = ledger_bench.measure(client, lplan)
            env["loadavg_after_ledger_rows"] = loadavg()
        finally:
            client.close()
    # Rows 4-5 get a server of their own: rows 1-3 leave hundreds of MB of streams behind, and
    # the AOF rewrite that follows them is not what a chunk boundary costs.
    with private_redis() as server:
        progress(
            started,
            "rows 4-5: a dres worker (prefork, 2 processes) vs plain Celery tasks; then row 4g "
            "on a gevent worker",
        )
        celery_rows, result["celery"] = celery_bench.measure(server.url, cplan)
        rows += celery_rows
    env["loadavg_after_celery_rows"] = loadavg()
    # Row 7 gets a server of its own too, and workers with every setting at its default (the
    # rows 4-5 worker runs with short time limits).
    with private_redis() as server:
        progress(
            started,
            f"row 7: crash pickup, two dres workers, {pplan.trials} kills of a pool process "
            "and of a whole worker",
        )
        pickup_rows, result["pickup"] = pickup_bench.measure(server.url, pplan)
    with private_redis() as server:
        progress(started, f"row 7g: crash pickup, two gevent workers, {pplan.trials} kills")
        gevent_rows, result["pickup_gevent"] = pickup_bench.measure(server.url, pplan, GEVENT)
    return rows, pickup_rows + gevent_rows


#: every row's figures as measured, written before the report (outside the tree)
RAW = Path(tempfile.gettempdir()) / "dres-bench-rows.json"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.only:
        return only(args)
    mode = "quick" if args.quick else "full"
    started = time.monotonic()
    env: dict[str, Any] = {}
    result: dict[str, Any] = {"mode": mode, "plan": None, "environment": env}
    rows, pickup_rows = rows_1_to_7(args, started, env, result)
    groups = []
    for group in GROUPS:
        progress(started, group.about)
        group_rows, result[group.name] = group.measure(args)
        groups += group_rows
    env["loadavg_end"] = loadavg()
    extra_rows, peer = peer_rows(rows, args.peers)
    rows += extra_rows + pickup_rows + groups
    env["elapsed_s"] = round(time.monotonic() - started, 1)
    # what was measured, before anything renders it: a row that cannot be rendered loses nothing
    RAW.write_text(json.dumps([asdict(row) for row in rows], default=str) + "\n")
    missed = misses(rows)
    print("\n".join([*header_lines(env, mode), *table_lines(rows)]))
    print()
    print(f"MISSES: {'; '.join(missed)}" if missed else "all targets met")
    if peer is None:
        print(f"(row 6: no {args.peers}; `make bench-peers` measures the DBOS peer)")
    print(f"elapsed {env['elapsed_s']} s")
    result.update(misses=missed, rows=[row.as_dict() for row in rows], peer=peer)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.markdown:
        old = args.markdown.read_text() if args.markdown.exists() else ""
        args.markdown.write_text(keep_written_sections(markdown(result, rows), old))
        print(f"wrote {args.markdown} and {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
