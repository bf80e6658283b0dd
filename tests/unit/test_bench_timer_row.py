"""Row W1 (issue 49, timers): how the woken turns' metadata and the queued messages become the
wake delays, the count of turns woken once, and the rows with their verdicts."""

from __future__ import annotations

from typing import Any

from bench import timer_bench
from bench.timer_bench import (
    QUICK,
    TARGET_P99_S,
    TimerPlan,
    delays,
    nearest_rank,
    timer_rows,
    woken_once,
)
from ledger.turn import TurnMeta, TurnStatus

T = 1_000.0


def woken(n: int, at: float) -> TurnMeta:
    return TurnMeta(
        f"turn_{n}", TurnStatus.RESUMING, next_run=f"run_{n}", next_cause="timer", dispatched=at
    )


def asleep(n: int) -> TurnMeta:
    return TurnMeta(f"turn_{n}", TurnStatus.WAITING, run_id=f"first_{n}", wake_at=T)


def test_the_p99_is_the_nearest_rank_of_the_delays() -> None:
    assert nearest_rank([float(x) for x in range(1, 101)], 0.99) == 99.0
    assert nearest_rank([float(x) for x in range(10_000, 0, -1)], 0.99) == 9_900.0
    assert nearest_rank([3.0, 1.0, 2.0], 0.5) == 2.0
    assert nearest_rank([5.0], 0.99) == 5.0


def test_a_delay_is_the_wake_steps_time_after_t_and_a_turn_not_woken_counts_until_the_stop() -> (
    None
):
    metas = [woken(0, T + 0.25), woken(1, T + 1.5), asleep(2)]
    assert delays(metas, T, stopped_at=T + 60) == [0.25, 1.5, 60.0]


def test_a_turn_is_woken_once_by_its_timer_with_exactly_one_message_of_its_run() -> None:
    metas = [woken(0, T), woken(1, T), woken(2, T), asleep(3), woken(4, T)]
    # run_1 sent twice, run_2 never, turn 3 still waits, turn 4 woken by something else
    metas[4] = TurnMeta("turn_4", TurnStatus.RESUMING, next_run="run_4", next_cause="approval")
    messages = ["run_0", "run_1", "run_1", "run_4"]
    assert woken_once(metas, messages) == 1
    assert woken_once(metas[:1], ["run_0"]) == 1


def info(ds: list[float], woken: int = 10, all_: int = 600, first: int = 600) -> dict[str, Any]:
    return {
        "delays_s": ds,
        "woken_once": woken,
        "woken_by_reaper": [5, 5],
        "idle_sweep_bytes_all": [all_, all_ + 2, all_],
        "idle_sweep_bytes_first": [first, first, first + 1],
        "wake_bytes": 9_500,
    }


def test_w1s_rows_and_their_verdicts() -> None:
    plan = TimerPlan(timers=10, first=2, repeats=3)
    ds = [0.1 * n for n in range(1, 11)]  # 0.1 .. 1.0 s
    p99, p50, most, once, idle, per_turn = timer_rows(plan, info(ds))

    assert [r.number for r in (p99, p50, most, once, idle, per_turn)] == ["W1"] * 6
    assert p99.dres == [1.0] and p99.limit == TARGET_P99_S and p99.verdict == "meets"
    assert p50.dres[0] == 0.55 and p50.verdict == "info"
    assert most.dres == [1.0]
    assert once.dres == [10] and once.verdict == "meets"
    assert idle.dres == [600.0, 602.0, 600.0] and idle.raw == [600.0, 600.0, 601.0]
    assert idle.ratio == 1.0 and idle.verdict == "meets" and not idle.pair_ratios
    assert per_turn.dres == [950.0] and per_turn.unit == "B" and per_turn.verdict == "info"


def test_a_late_wake_a_missed_turn_and_a_sweep_that_grows_with_the_waiting_turns_miss() -> None:
    plan = TimerPlan(timers=10, first=2, repeats=3)
    ds = [0.5] * 9 + [2.5]
    p99, _, _, once, idle, _ = timer_rows(plan, info(ds, woken=9, all_=6_000))
    assert p99.dres == [2.5] and p99.verdict == "misses"
    assert once.verdict == "misses"
    assert idle.ratio == 10.0 and idle.verdict == "misses"


def test_only_timers_runs_w1_alone_and_quick_wakes_a_thousand() -> None:
    from bench.__main__ import GROUPS, ONLY, OWN_MAIN

    assert timer_bench.GROUP in GROUPS and "W1" in ONLY["timers"]
    assert OWN_MAIN["timers"] == timer_bench.main
    assert QUICK.timers == 1_000 and QUICK.first < QUICK.timers
