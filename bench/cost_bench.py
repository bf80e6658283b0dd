"""Rows K1-K2 of ``make bench`` (issue 27): what keeping turns alive costs, before and after.

K1. The reaper under a backlog (``bench.reaper_bench``): one sweep with a due run and 1k / 10k /
    100k chunk messages queued, the Redis bytes it reads and its time, the sweep of issue 27
    (one ``EXISTS`` of the due run's mark) beside the one before it (every queue and every
    unacknowledged message read whole).
K2. The heartbeat's and the reaper's own traffic (``bench.heartbeat_bench``): commands per
    second of an idle worker and what a running turn adds, at the defaults of issue 27
    (lease 3 s, renewed every second; a sweep every second) beside those before (8 s; 2 s), the
    price of a crash pickup within ~5 s (row 7).

Each row is "after" beside "before", both measured in the same run.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench import heartbeat_bench, reaper_bench
from bench.harness import Group, Row, info_line

#: bytes one sweep may read with 100k messages queued (issue 27)
SWEEP_BYTES_LIMIT = 1_000_000


@dataclass(frozen=True)
class CostPlan:
    quick: bool


FULL = CostPlan(quick=False)
QUICK = CostPlan(quick=True)


def row_of(figure: Mapping[str, Any], number: str, baseline: str) -> Row:
    """A before/after figure as a row: dres (after) beside the old code (before)."""
    name, unit = str(figure["row"]), str(figure["unit"])
    after, before = [float(figure["after"])], [float(figure["before"])]
    if name == "reaper sweep, 100k queued: Redis bytes read":
        # the bound is absolute; the old sweep's figure stays beside it in extra
        extra = {"before": before[0]}
        return Row(name, unit, after, [], extra=extra, number=number, limit=SWEEP_BYTES_LIMIT)
    if not before[0] or not after[0]:  # a command one side never sent: no ratio to show
        return Row(name, unit, after, [], extra={"before": before[0]}, number=number)
    return Row(name, unit, after, before, number=number, baseline=baseline)


def measure(plan: CostPlan) -> tuple[list[Row], dict[str, Any]]:
    started = time.monotonic()
    sweep = reaper_bench.measure(plan.quick)
    info: dict[str, Any] = {"reaper_s": round(time.monotonic() - started, 1)}
    started = time.monotonic()
    beats = heartbeat_bench.measure(plan.quick)
    info["heartbeat_s"] = round(time.monotonic() - started, 1)
    info["heartbeat_before"] = heartbeat_bench.CONFIGS["before"]
    rows = [row_of(f, "K1", "the sweep before issue 27 (queues read whole)") for f in sweep]
    rows += [row_of(f, "K2", "lease 8 s, sweep 2 s (before issue 27)") for f in beats]
    return rows, info


GROUP = Group(
    "cost",
    "rows K1-K2: the reaper under a backlog, the heartbeat's and the reaper's traffic (issue 27)",
    measure, FULL, QUICK, __doc__,
    summary=info_line,
)  # fmt: skip
main = GROUP.main


if __name__ == "__main__":
    sys.exit(main())
