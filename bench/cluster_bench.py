"""Rows C1-C3 (issue 16): the ledger rows 1-3 with the ledger on a Redis Cluster beside one Redis.

The same code as rows 1-3 (``bench.ledger_bench.measure``: a fenced append, one tool call's
recording, a journal rebuild) runs against a private redis-server (AOF, ``appendfsync everysec``)
through ``redis.Redis`` and against a private three-master Redis Cluster of the same servers
(``rigs.redis_cluster.LocalCluster``: AOF everysec, ``--cluster-replicas 0``) through
``redis.cluster.RedisCluster``, both with the hiredis parser and bytes replies, in alternating
rounds (single, cluster, cluster, single, ...) so that host noise falls on both. Every server
runs on this machine: the cluster's three masters share its cores with the client.

Each row: dres on the cluster / dres on one Redis (the ratio is the median of the per-block or
per-repeat pairs of the same round); the raw redis-py figures of both sides are in the JSON
(``raw_cluster``, ``raw_single``). A turn's keys share its ``{turn_id}`` hash tag, so each of
these operations goes to one master: the cluster adds the client's slot lookup and nothing else.

Run from the project root: ``.venv/bin/python -m bench.cluster_bench [--quick] [--json PATH]``.
It reports and never asserts.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
import redis.cluster

from bench import ledger_bench
from bench.harness import Group, Row, loadavg, private_redis, summary
from bench.ledger_bench import Plan
from bench.rebuild_bench import CALLS_1000
from rigs.redis_cluster import LocalCluster


@dataclass(frozen=True)
class ClusterPlan:
    #: rounds, each measuring both sides with ``ledger`` (short rounds: a pair's two samples
    #: are taken close together)
    rounds: int
    ledger: Plan


FULL = ClusterPlan(
    rounds=6,
    ledger=Plan(
        append_blocks=3,
        append_ops=500,
        rebuild=((1_000, 1), (CALLS_1000, 1), (10_000, 1), (100_000, 1)),
        tool_blocks=3,
        tool_ops=250,
    ),
)
QUICK = ClusterPlan(
    rounds=1,
    ledger=Plan(
        append_blocks=2,
        append_ops=100,
        rebuild=((1_000, 1), (10_000, 1)),
        tool_blocks=2,
        tool_ops=50,
    ),
)


class ClusterRow(Row):
    """A row of dres on the cluster beside dres on one Redis: its wording names the sides."""

    @property
    def wording(self) -> str:
        factor = max(self.ratio, 1 / self.ratio)
        if factor < 1.005:
            return "same"
        return f"cluster {'slower' if self.ratio > 1 else 'faster'} by {factor:.2f}x"


@dataclass
class _Side:
    """One side's rows of every round, in ``measure``'s order."""

    rows: list[Row]

    def add(self, rows: Sequence[Row]) -> None:
        if not self.rows:
            self.rows = [Row(r.name, r.unit, [], [], extra=dict(r.extra)) for r in rows]
        for kept, row in zip(self.rows, rows, strict=True):
            kept.dres += row.dres
            kept.raw += row.raw


def compare(single: Sequence[Row], cluster: Sequence[Row]) -> list[Row]:
    """Rows C1-C3: dres on the cluster beside dres on one Redis."""
    numbers = iter(["C1", "C1", "C2", "C2", *(["C3"] * len(single))])
    out = []
    for one, many in zip(single, cluster, strict=True):
        extra = {
            "raw_cluster": summary(many.raw),
            "raw_single": summary(one.raw),
            "dres_vs_raw_on_cluster": statistics.median(many.dres) / statistics.median(many.raw),
            "dres_vs_raw_on_single": statistics.median(one.dres) / statistics.median(one.raw),
        }
        out.append(
            ClusterRow(
                f"{one.name} on a cluster",
                one.unit,
                many.dres,
                one.dres,
                None,
                extra,
                number=next(numbers),
                baseline="dres on one redis-server",
            )
        )
    return out


def measure(plan: ClusterPlan) -> tuple[list[Row], dict[str, Any]]:
    """Rows C1-C3, each group of servers started here and stopped after."""
    single, cluster = _Side([]), _Side([])
    with private_redis() as server, LocalCluster() as nodes:
        one = redis.Redis(port=server.port)
        many = nodes.client()
        try:
            for n in range(plan.rounds):
                order = [(single, one), (cluster, many)]
                for side, client in order if n % 2 == 0 else reversed(order):
                    side.add(ledger_bench.measure(client, plan.ledger))
            info = {
                "masters": len(nodes.nodes),
                "redis_server": one.info("server").get("redis_version", "?"),
                "loadavg_end": loadavg(),
            }
        finally:
            one.close()
            many.close()
    return compare(single.rows, cluster.rows), info


GROUP = Group(
    "cluster",
    "rows C1-C3: the ledger rows 1-3 on a Redis Cluster beside one Redis (issue 16)",
    measure, FULL, QUICK, __doc__,
)  # fmt: skip
main = GROUP.main


if __name__ == "__main__":
    sys.exit(main())
