"""Rows Q1-Q2 (issue 47, tenants): how B's waits and the admission's samples become rows."""

from __future__ import annotations

from typing import Any

import pytest

from bench import admission_bench, fairness_bench
from bench.admission_bench import TARGET, admission_rows
from bench.fairness_bench import FULL, WAIT_LIMIT, fairness_rows, most_at_once, nearest_rank


def case(p95: float, p50: float) -> dict[str, Any]:
    return {
        "p95": p95, "p50": p50, "b_wait_ms": [10.0, 30.0, 20.0],
        "b_duration_ms": [100.0, 120.0, 110.0], "a_at_once_most": 50, "a_at_once_mean": 30.0,
        "a_ended_per_s": 200.0, "a_not_started_at_b": 600, "a_enqueue_s": 3.0, "wall_s": 6.0,
    }  # fmt: skip


def test_q1_sets_bs_fair_wait_beside_fifos_and_reads_the_fair_p95_against_three_durations() -> None:
    rounds = [
        {"fair": case(1.5, 1.0), "fifo": case(40.0, 35.0)},
        {"fifo": case(30.0, 25.0), "fair": case(3.5, 2.0)},
    ]

    p95, p50, bound = fairness_rows(FULL, rounds, {"worker": "dres worker -P gevent -c 50"})

    assert {row.number for row in (p95, p50, bound)} == {"Q1"}
    assert (p95.dres, p95.raw) == ([1.5, 3.5], [40.0, 30.0])  # a round's cases pair
    assert (p50.dres, p50.raw) == ([1.0, 2.0], [35.0, 25.0])
    assert p95.verdict == p50.verdict == "info"
    assert bound.absolute and bound.limit == WAIT_LIMIT == 3.0
    assert bound.verdict == "meets"  # the median of the rounds' p95s: 2.5
    assert bound.wording == "no baseline; 1/2 <= 3 B's durations"


def test_q1s_p95_of_ten_turns_is_their_largest_and_the_pool_counts_turns_running_at_once() -> None:
    assert nearest_rank([float(n) for n in range(1, 11)], 0.95) == 10.0
    assert nearest_rank([float(n) for n in range(1, 101)], 0.95) == 95.0
    # (turn_started, run_started, turn_ended): an end at a start's instant frees its slot first
    spans = [(0.0, 1.0, 3.0), (0.0, 2.0, 4.0), (0.0, 3.0, 5.0), (0.0, 6.0, 7.0)]
    assert most_at_once(spans) == 2


def test_q2_reads_the_admitted_turns_p50_against_the_plain_dispatch_paired_by_round() -> None:
    samples = {
        "admitted": {"run_started": [3.0, 4.0, 3.3], "call": [2.0, 2.5, 2.2]},
        "bounded": {"run_started": [3.3, 4.4, 3.6], "call": [2.2, 2.7, 2.4]},
        "plain": {"run_started": [2.5, 4.0, 3.0], "call": [1.6, 2.0, 1.8]},
    }

    p50, p90, bounded, call, bounded_call = admission_rows(
        samples, {"worker": "dres worker -c 2 (prefork)", "limits": {}}
    )

    assert {row.number for row in (p50, p90, bounded, call, bounded_call)} == {"Q2"}
    assert p50.target == TARGET == 1.2
    assert p50.pair_ratios == [pytest.approx(1.2), pytest.approx(1.0), pytest.approx(1.1)]
    assert p50.ratio == pytest.approx(1.1) and p50.verdict == "meets"
    assert (p90.dres, p90.raw) == ([4.0], [4.0])
    assert bounded.dres == samples["bounded"]["run_started"] and bounded.verdict == "info"
    assert (call.dres, call.raw) == (samples["admitted"]["call"], samples["plain"]["call"])
    assert bounded_call.dres == samples["bounded"]["call"]


def test_only_fairness_and_only_admission_run_q1_and_q2_alone() -> None:
    from bench.__main__ import ONLY, OWN_MAIN, parse_args

    assert parse_args(["--only", "fairness", "--quick"]).only == "fairness"
    assert OWN_MAIN["fairness"] == fairness_bench.main and "Q1" in ONLY["fairness"]
    assert OWN_MAIN["admission"] == admission_bench.main and "Q2" in ONLY["admission"]


def test_q1s_details_line_names_each_rounds_waits_and_the_pools_fill() -> None:
    from bench.report import details

    rounds = [{"fair": case(1.5, 1.0), "fifo": case(40.0, 35.0)}]

    line = next(x for x in details({}, {"fairness": {"rounds": rounds}}) if x.startswith("Row Q1"))

    assert line.startswith("Row Q1: round 1 fair: B waited 10–30 ms, its turns took 110 ms")
    assert "A 50 at once at most (30.0 on average, 200.0 ended/s)" in line
