"""The chaos runner's count of false takeovers, and its CPU hog (issue 27)."""

from __future__ import annotations

from chaos.takeovers import HARD_LIMIT, ZOMBIE_LINES, count, cpu_hog, taken_over
from ledger.events import RunStarted
from tests.factories import base


def test_only_a_takeover_no_death_explains_is_false() -> None:
    assert count(1, "kill_child", True, "").false == 0
    assert count(1, "kill_worker", False, "").false == 1, "the kill never fired"
    assert count(1, "redis_pause", True, "").false == 1
    assert count(2, "sigterm", True, f"... {HARD_LIMIT} (2s) exceeded ... {HARD_LIMIT}").false == 0
    zombie = count(1, "kill_child", True, ZOMBIE_LINES[0])
    assert (zombie.taken, zombie.deaths, zombie.false) == (1, 1, 1), "a live run said so"


def test_one_gevent_worker_killed_explains_a_takeover_of_each_run_it_held() -> None:
    assert count(51, "kill_worker", True, "", runs=51).false == 0
    assert count(52, "kill_worker", True, "", runs=51).false == 1
    assert count(3, "redis_pause", True, "", runs=51).false == 3, "no death: every one is false"


def test_takeovers_are_the_runs_started_by_the_reaper_or_a_redelivery() -> None:
    causes = ["first", "reaper", "next_chunk", "redelivery", "continue"]
    events = [RunStarted(**base(run_id=f"r{n}"), cause=cause) for n, cause in enumerate(causes)]
    assert taken_over(events) == 2


def test_the_hog_busy_loops_end_with_the_block() -> None:
    with cpu_hog(2) as hogs:
        assert all(hog.poll() is None for hog in hogs)
    assert all(hog.returncode is not None for hog in hogs)
