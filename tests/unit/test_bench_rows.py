"""How a benchmark row turns its samples into the ratio its verdict reads."""

from __future__ import annotations

import pytest

from bench.ledger_bench import Row


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
