"""Row F1 (forks): how a fork's trials and the plain new turns beside them become rows."""

from __future__ import annotations

import pytest

from bench import fork_bench
from bench.fork_bench import FORK_TARGET, KINDS, Sample, fork_rows


def sample(kind: str, length: int, ms: float) -> Sample:
    return Sample(kind, length, ms, call_ms=ms - 1.0, model_start_ms=ms + length / 100)


def test_f1_sets_the_fork_beside_the_plain_turn_at_each_length_and_its_growth_apart() -> None:
    rounds = [
        [sample("fork", 100, 5.0), sample("plain", 100, 4.0),
         sample("fork", 10_000, 6.0), sample("plain", 10_000, 60.0)],
        [sample("plain", 10_000, 80.0), sample("fork", 10_000, 5.0),
         sample("plain", 100, 5.0), sample("fork", 100, 5.0)],
        [sample("fork", 100, 4.0), sample("plain", 100, 5.0),
         sample("fork", 10_000, 5.0), sample("plain", 10_000, 70.0)],
    ]  # fmt: skip

    short, long, growth = fork_rows(rounds, {"entry_json_bytes": [500, 500]})

    assert {row.number for row in (short, long, growth)} == {"F1"}
    assert short.name == "fork -> its first run_started, 100 events replaced"
    assert (short.dres, short.raw) == ([5.0, 5.0, 4.0], [4.0, 5.0, 5.0])
    assert (short.target, long.target) == (None, FORK_TARGET)
    assert long.pair_ratios == [pytest.approx(0.1), pytest.approx(1 / 16), pytest.approx(1 / 14)]
    assert long.verdict == "meets"
    assert long.extra["median_call_ms"] == {"fork": 4.0, "plain": 69.0}
    assert set(long.extra["median_to_first_model_start_ms"]) == set(KINDS)
    assert growth.name == "fork -> its first run_started, 10,000 events vs 100"
    assert (growth.dres, growth.raw) == (long.dres, short.dres)
    assert growth.verdict == "info" and growth.paired
    assert growth.extra["plain_growth"] == pytest.approx(70.0 / 5.0)


def test_only_fork_runs_row_f1_alone() -> None:
    from bench.__main__ import ONLY, OWN_MAIN, parse_args

    assert parse_args(["--only", "fork", "--quick"]).only == "fork"
    assert OWN_MAIN["fork"] == fork_bench.main
    assert "F1" in ONLY["fork"]


def test_f1s_details_line_names_each_lengths_call_and_first_model_call() -> None:
    from bench.report import details

    rounds = [[sample("fork", 100, 5.0), sample("plain", 100, 4.0)]]
    [row] = fork_rows(rounds, {})

    line = next(x for x in details({row.name: row}, {}) if x.startswith("Row F1"))

    assert line == (
        "Row F1 (1 rounds; fork / plain turn): 100 events: the call 4.00 / 3.00 ms, the first "
        "model_start 6.0 / 5.0 ms."
    )
