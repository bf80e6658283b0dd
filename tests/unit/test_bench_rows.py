"""How a benchmark row turns its samples into the ratio its verdict reads."""

from __future__ import annotations

import re

import pytest

from bench import failover_bench
from bench.cost_bench import row_of
from bench.durability_bench import LevelRow
from bench.failover_bench import FailoverPlan, failover_rows
from bench.failover_bench import Trial as FailoverTrial
from bench.harness import Row, misses, table_lines
from bench.pickup_bench import PickupPlan, Trial, pickup_rows
from bench.report import failover_details, keep_written_sections


def test_a_paired_rows_ratio_is_the_median_of_its_pair_ratios() -> None:
    row = Row("resume latency", "ms", dres=[6.0, 9.0, 5.0], raw=[2.0, 3.0, 2.5], target=3.0)

    assert row.pair_ratios == [3.0, 3.0, 2.0]
    assert row.ratio == 3.0
    assert row.ratio_of_medians == pytest.approx(6.0 / 2.5)
    assert row.verdict == "meets"


def test_the_ratio_rests_on_which_samples_were_taken_together() -> None:
    together = Row("resume latency", "ms", dres=[4.0, 10.0, 6.0], raw=[2.0, 5.0, 3.0])
    apart = Row("resume latency", "ms", dres=[4.0, 10.0, 6.0], raw=[3.0, 2.0, 5.0])

    assert together.ratio == pytest.approx(2.0)
    assert apart.ratio == pytest.approx(4.0 / 3.0)
    assert apart.ratio_of_medians == together.ratio_of_medians == pytest.approx(2.0)


def test_an_unpaired_rows_ratio_is_the_ratio_of_its_medians() -> None:
    row = Row("per step", "ms", dres=[1.0, 3.0, 2.0], raw=[10.0, 30.0], extra={"unpaired": True})

    assert row.pair_ratios == []
    assert row.ratio == pytest.approx(2.0 / 20.0)
    assert row.verdict == "info"


def test_a_row_without_a_baseline_reads_its_median_against_its_limit() -> None:
    kept = Row("crash pickup, child", "s", dres=[9.0, 40.0, 8.5, 9.2, 10.1], raw=[], limit=15.0)
    over = Row("crash pickup, whole worker", "s", dres=[16.0, 9.0, 40.0], raw=[], limit=15.0)

    assert kept.absolute and kept.pair_ratios == []
    assert (kept.verdict, kept.target_text) == ("meets", "<= 15 s")
    assert kept.wording == "no baseline; 4/5 <= 15 s"
    assert over.verdict == "misses"
    assert misses([kept, over]) == ["crash pickup, whole worker median 16.00 s, not <= 15 s"]
    row = kept.as_dict()
    assert (row["ratio"], row["raw"], row["target_limit"]) == (None, None, 15.0)
    assert row["dres"] == {"median": 9.2, "min": 8.5, "max": 40.0}
    [_, _, line] = table_lines([kept])
    cells = re.split(r"\s{2,}", line)
    assert cells[2:] == ["-", "-", "<= 15 s", "meets", "no baseline; 4/5 <= 15 s"]


def test_a_pickup_trial_without_a_new_run_counts_at_its_deadline() -> None:
    plan = PickupPlan(trials=2, deadline_s=40.0)
    trials = [
        Trial("child", "t1", "run_a", 11, 3.3, True, "reaper", "same worker", "completed"),
        Trial("child", "t2", "run_b", 12, plan.deadline_s, False),
        Trial("whole worker", "t3", "run_c", 13, 4.1, True, "reaper", "other worker", "completed"),
    ]

    child, whole = pickup_rows(trials, plan, {"settings": {"lease_s": 3.0}})

    assert (child.name, child.number, child.unit) == ("crash pickup, child", "7", "s")
    assert child.dres == [3.3, 40.0] and child.raw == []
    assert (child.extra["missed_deadline"], child.extra["over_target"]) == (1, 1)
    assert child.extra["causes"] == {"reaper": 1, "none": 1}
    assert (whole.dres, whole.verdict) == ([4.1], "meets")


def test_a_new_report_keeps_the_sections_written_by_hand_and_replaces_its_own() -> None:
    old = (
        "# dres benchmark results\n\nold intro\n\n## Results\n\nold table\n\n"
        "## Issue 16 by hand\n\nrows S1-S3\n\n## Details\n\nold details\n\n"
        "## Base and change\n\nside by side\n"
    )
    new = "# dres benchmark results\n\nnew intro\n\n## Results\n\nnew table\n\n## Details\n\nnew\n"
    assert keep_written_sections(new, old) == (
        "# dres benchmark results\n\nnew intro\n\n## Results\n\nnew table\n\n"
        "## Issue 16 by hand\n\nrows S1-S3\n\n## Base and change\n\nside by side\n\n"
        "## Details\n\nnew\n"
    )
    assert keep_written_sections(new, "") == new


def test_a_durability_rows_wording_names_its_level_against_ack() -> None:
    row = LevelRow("tool call at replica", "ms", [1.0, 1.2], [0.5, 0.4], extra={"level": "replica"})
    assert row.ratio == pytest.approx(2.5)
    assert row.wording == "replica slower by 2.50x"


def test_each_failover_fault_gets_a_row_of_its_next_event_and_one_of_its_next_model_call() -> None:
    plan = FailoverPlan(trials=2, deadline_s=30.0)
    trials = [
        FailoverTrial("sentinel failover", "t1", 1, 2, 1.1, 1.2, event_type="model_done"),
        FailoverTrial("sigkill", "t2", 2, 1, 2.3, 6.1, event_type="run_ended", runs_after=1),
        FailoverTrial("sigkill", "t3", 1, 2, 2.2, plan.deadline_s, event_type="run_ended"),
        FailoverTrial("sentinel failover", "t4", 2, 1, 1.3, 1.3, event_type="tool_done"),
    ]

    rows = failover_rows(trials, plan, {})

    assert [(row.number, row.extra["figure"]) for row in rows] == [
        ("D5", "next_event_s"), ("D5", "next_model_call_s"),
        ("D6", "next_event_s"), ("D6", "next_model_call_s"),
    ]  # fmt: skip
    event, call = rows[2:]
    assert event.name == "SIGKILL of the master -> the turn's next event on the new master"
    assert (event.dres, call.dres) == ([2.3, 2.2], [6.1, 30.0])
    assert (event.absolute, event.verdict, event.unit) == (True, "info", "s")
    assert (event.extra["missed_deadline"], call.extra["missed_deadline"]) == (0, 1)
    assert event.extra["first_events"] == {"run_ended": 2}
    assert "trial_details" not in call.extra, "the trials go with the first row only"
    line = failover_details([rows[0], rows[2]])
    assert "sentinel failover: 2 trials, next event [1.10, 1.30] s" in line
    assert "sigkill: 2 trials, next event [2.30, 2.20] s, next model call [6.10, 30.00] s" in line


def test_only_failover_runs_the_failover_rows_alone() -> None:
    from bench.__main__ import OWN_MAIN, parse_args

    assert parse_args(["--only", "failover", "--quick"]).only == "failover"
    assert OWN_MAIN["failover"] == failover_bench.main


def test_a_cost_figure_with_nothing_before_is_a_row_without_a_ratio() -> None:
    """K2: a command the old defaults never sent (0 per second before) has no ratio to show."""
    row = row_of({"row": "sweeps", "before": 0.0, "after": 0.03, "unit": "cmd/s"}, "K2", "old")
    assert row.raw == [] and row.extra == {"before": 0.0}
    gone = row_of({"row": "looks", "before": 0.07, "after": 0.0, "unit": "cmd/s"}, "K2", "old")
    assert gone.raw == [] and gone.extra == {"before": 0.07}
    zero = Row("z", "cmd/s", [0.0], [0.5], number="K2")  # any row with a side at zero renders
    lines = table_lines([row, gone, zero])
    assert any("sweeps" in line for line in lines) and "one side is 0" in lines[-1]
