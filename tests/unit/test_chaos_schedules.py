"""The ``schedule`` chaos kind's checks (``chaos.schedule_checks``), each shown to catch what it
is for on ticks made up here, and its draws (``chaos.schedules``): every fault drawn, none of a
pool process under gevent, each draw from the seed alone."""

from __future__ import annotations

import random
from collections import Counter

from chaos import schedule_checks
from chaos.cluster import GEVENT
from chaos.schedule_checks import Fired, Made
from chaos.schedules import CLAIMED, FAULTS, NOT_UNDER_GEVENT, STARTED, draw
from worker.lifecycle.schedules import tick_turn_id

EVERY = Made("sched_e", every_s=1, at_ms=None, first_ms=10_000)
AT = Made("sched_a", every_s=None, at_ms=12_500, first_ms=12_500)


def tick(schedule: Made, tick_ms: int, late_ms: float = 50.0) -> Fired:
    sid = schedule.schedule_id
    return Fired(tick_turn_id(sid, tick_ms), sid, tick_ms, tick_ms + late_ms)


def every_second(until_ms: int = 16_000) -> list[Fired]:
    return [tick(EVERY, t) for t in range(10_000, until_ms, 1000)]


def check(fired: list[Fired], **kwargs: object) -> list[str]:
    options: dict[str, object] = {"deleted_ms": 16_000, "allowance_ms": 0, **kwargs}
    return schedule_checks.check(
        [EVERY, AT],
        fired,
        tick_turn_id=tick_turn_id,
        deleted_ms=int(str(options["deleted_ms"])),
        allowance_ms=int(str(options["allowance_ms"])),
        down=options.get("down"),  # type: ignore[arg-type]
    )


def test_ticks_fired_once_each_on_time_keep_every_invariant() -> None:
    assert check([*every_second(), tick(AT, 12_500)]) == []


def test_a_tick_fired_twice_is_caught() -> None:
    twice = Fired("turn_other", "sched_e", 12_000, 12_060.0)
    found = check([*every_second(), twice, tick(AT, 12_500)])
    assert any("fired 2 turns" in v for v in found)
    assert any("derived id" in v for v in found)


def test_a_tick_early_or_off_the_grid_is_caught() -> None:
    early = [*every_second(13_000), tick(EVERY, 13_000, late_ms=-5), *every_second()[4:]]
    assert any("before its tick" in v for v in check([*early, tick(AT, 12_500)]))
    off = [*every_second(), tick(EVERY, 12_300), tick(AT, 12_500)]
    assert any("not one of its ticks" in v for v in check(off))


def test_a_gap_in_the_ticks_is_caught_unless_the_outage_explains_it() -> None:
    gappy = [f for f in every_second() if not 11_000 <= f.tick_ms <= 13_000] + [tick(AT, 12_500)]
    assert any("no tick for" in v for v in check(gappy))
    assert check(gappy, allowance_ms=2_000) == []


def test_an_at_fires_exactly_once_and_nothing_after_delete() -> None:
    assert any("fired 0 times" in v for v in check(every_second()))
    late = [*every_second(), tick(AT, 12_500), tick(EVERY, 17_000)]
    assert any("after the schedule's deletion" in v for v in check(late))


def test_catch_up_one_fires_one_tick_after_every_worker_was_down() -> None:
    # every worker down from 11.5 s to 14.2 s: ticks 12, 13 and 14 s come and go
    before = [tick(EVERY, 10_000), tick(EVERY, 11_000)]
    after = [tick(EVERY, 15_000), tick(EVERY, 16_000)]
    one = [*before, tick(EVERY, 14_000, late_ms=400), *after, tick(AT, 12_500, late_ms=1900)]
    down = (11_500, 14_200)
    assert check(one, deleted_ms=16_500, allowance_ms=3_000, down=down) == []
    each = [*before, *(tick(EVERY, t, late_ms=14_300 - t) for t in (12_000, 13_000, 14_000))]
    found = check(
        [*each, *after, tick(AT, 12_500)], deleted_ms=16_500, allowance_ms=3_000, down=down
    )
    assert any("ticks of the outage fired" in v for v in found)
    stale = [*before, tick(EVERY, 12_000, late_ms=2_300), *after, tick(AT, 12_500)]
    found = check(stale, deleted_ms=16_500, allowance_ms=3_000, down=down)
    assert any("not the newest due" in v for v in found)


def test_the_draws_take_every_fault_and_depend_on_the_seed_alone() -> None:
    seen = Counter(draw(random.Random(seed), "prefork")[0].action for seed in range(200))
    assert set(seen) == {action for action, _ in FAULTS}
    assert draw(random.Random(7), "prefork") == draw(random.Random(7), "prefork")
    for seed in range(100):
        trial, ticks = draw(random.Random(seed), GEVENT)
        assert trial.action not in NOT_UNDER_GEVENT
        assert ticks.schedules[0] is not None, "the first schedule repeats: the faults aim at it"
        assert 1 <= len(ticks.schedules) <= 3
        if trial.point in (CLAIMED, STARTED):
            assert trial.skip == ticks.nth
