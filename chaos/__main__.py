"""``python -m chaos [--trials N] [--seed S] [--naive] [--only ACTION ...] [--hog N]
[--pool prefork|gevent] [--tenants N]``: run the
chaos trials; exit 1 on any violation (with ``--naive``: on any but the duplicate effects naive
resume is there to count)."""

from __future__ import annotations

import argparse
import sys

from chaos.cluster import POOLS
from chaos.runner import main

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--naive",
        action="store_true",
        help="resume naively (the worker gets DRES_NAIVE=1) and count the duplicate effects",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        default=(),
        metavar="ACTION",
        help="draw only the faults of these actions (redis_restart, redis_pause, kill_child, ...;"
        " failover, alone: on a Sentinel set-up; elsewhere, alone: tools from an MCP server and"
        " an HTTP API; approval, alone: every write waits for a person the runner plays;"
        " conversation, alone: a second message, a regenerate or a retry mid-turn; timer, alone:"
        " turns that wait on a timer, on two workers, faults around the wait; schedule, alone:"
        " schedules ticking on two workers, faults around a tick; none drawn otherwise)",
    )
    parser.add_argument(
        "--hog",
        type=int,
        default=0,
        metavar="N",
        help="run N busy loops beside the worker for the whole run (a host at load: no live "
        "run's late heartbeat may look dead; false takeovers are counted)",
    )
    parser.add_argument(
        "--pool",
        choices=POOLS,
        default="prefork",
        help="the workers' pool; gevent: 50 more turns in flight in each trial, on "
        "`dres worker -P gevent` (kill_child and soft_limit are not drawn: chaos.trial)",
    )
    parser.add_argument(
        "--tenants",
        type=int,
        default=0,
        metavar="N",
        help="tenant trials (chaos.tenants): each trial's turns under 2 or 3 tenants, one with "
        "more than N at once, the workers and the runner at DRES_TENANT_CONCURRENCY=N; no tenant "
        "may have more than N running at once, and every slot comes back (the default kinds)",
    )
    args = parser.parse_args()
    if args.tenants < 0:
        parser.error("--tenants: a bound of 1 or more (0: no tenant trials)")
    if args.tenants and "elsewhere" in args.only:
        parser.error("--tenants: tenant trials are the default kinds' (store faults among them)")
    if "schedule" in args.only:  # two workers racing for ticks, no turn of the runner's own
        from chaos.schedules import main as schedules

        if set(args.only) != {"schedule"} or args.naive or args.tenants or args.hog:
            parser.error("schedule trials run alone (no --naive, --tenants, --hog)")
        sys.exit(schedules(args.trials, args.seed, pool=args.pool))
    if "elsewhere" in args.only:  # tools from MCP servers and HTTP APIs: servers of their own
        from chaos.elsewhere import main as elsewhere

        sys.exit(elsewhere(args.trials, args.seed, naive=args.naive))
    sys.exit(
        main(
            args.trials,
            args.seed,
            naive=args.naive,
            only=args.only,
            hog=args.hog,
            pool=args.pool,
            limit=args.tenants,
        )
    )
