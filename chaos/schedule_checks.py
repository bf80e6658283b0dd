"""What must hold after every ``schedule`` chaos trial (``chaos.schedules``), from the ticks'
turns as the ledger has them: pure functions, the schedules made and the turns fired in,
violations (sentences) out.

- **no tick twice**: one turn per (schedule, tick), its id the one derived from both;
- every tick is one of the schedule's: a whole number of intervals after its first, or its ``at``;
- **no tick early**: a tick's turn starts at or after the tick;
- **ticks keep coming**: no gap between two fired ticks (from the first tick to the deletion)
  longer than two intervals and the trial's outage; after an outage of every worker,
  ``catch_up`` one fires at most one tick of the gap, and the first tick after it is the newest
  then due;
- an ``at`` fires exactly once; no tick after the schedule's deletion.
"""

from __future__ import annotations

import itertools
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: ms a turn's ``turn_started`` may precede its tick by and not be early: its ``ts`` is rounded
#: apart from the tick's ms
ROUNDING_MS = 1
#: ms beyond one interval a tick fired right after an outage may be late by and still be the
#: newest due when its reaper looked (the look, then the turn's making)
NEWEST_SLACK_MS = 1000


@dataclass(frozen=True)
class Made:
    """A schedule the trial made: ``every`` (s) or ``at_ms``, and its first tick."""

    schedule_id: str
    every_s: int | None
    at_ms: int | None
    first_ms: int


@dataclass(frozen=True)
class Fired:
    """A tick's turn, from its ``turn_started``: the schedule, the tick, and when it started."""

    turn_id: str
    schedule_id: str
    tick_ms: int
    started_ms: float

    @property
    def late_s(self) -> float:
        return (self.started_ms - self.tick_ms) / 1000


def check(
    made: Sequence[Made],
    fired: Sequence[Fired],
    *,
    tick_turn_id: Callable[[str, int], str],
    deleted_ms: int,
    allowance_ms: int,
    down: tuple[int, int] | None = None,
) -> list[str]:
    """Every schedule invariant; ``allowance_ms``: the trial's outage (beyond two intervals, a
    gap may be that long); ``down``: when every worker was down (ms, from-to), if it was."""
    found = [*no_tick_twice(fired, tick_turn_id), *not_early(fired)]
    found += after_delete(fired, deleted_ms)
    for schedule in made:
        own = sorted((f for f in fired if f.schedule_id == schedule.schedule_id), key=_tick)
        found += on_the_grid(schedule, own)
        if schedule.every_s is None:
            if len(own) != 1:
                found.append(f"at {schedule.schedule_id}: fired {len(own)} times, not once")
            continue
        found += keep_coming(schedule, own, deleted_ms, allowance_ms)
        if down is not None:
            found += caught_up_once(schedule, own, down)
    return found


def _tick(fired: Fired) -> int:
    return fired.tick_ms


def no_tick_twice(fired: Sequence[Fired], tick_turn_id: Callable[[str, int], str]) -> list[str]:
    found = []
    for (schedule_id, tick_ms), n in Counter((f.schedule_id, f.tick_ms) for f in fired).items():
        if n > 1:
            found.append(f"tick {tick_ms} of {schedule_id} fired {n} turns")
    for f in fired:
        if f.turn_id != tick_turn_id(f.schedule_id, f.tick_ms):
            found.append(f"turn {f.turn_id} of tick {f.tick_ms}: not the tick's derived id")
    return found


def not_early(fired: Sequence[Fired]) -> list[str]:
    return [
        f"turn {f.turn_id} started {-f.late_s:.3f} s before its tick {f.tick_ms}"
        for f in fired
        if f.started_ms < f.tick_ms - ROUNDING_MS
    ]


def after_delete(fired: Sequence[Fired], deleted_ms: int) -> list[str]:
    return [
        f"turn {f.turn_id}: tick {f.tick_ms} after the schedule's deletion at {deleted_ms}"
        for f in fired
        if f.tick_ms > deleted_ms
    ]


def on_the_grid(schedule: Made, own: Sequence[Fired]) -> list[str]:
    """Each tick is the ``at``, or the first tick plus a whole number of intervals."""
    found = []
    for f in own:
        if schedule.every_s is None:
            wrong = f.tick_ms != schedule.at_ms
        else:
            wrong = (f.tick_ms - schedule.first_ms) % (schedule.every_s * 1000) != 0
            wrong = wrong or f.tick_ms < schedule.first_ms
        if wrong:
            found.append(f"tick {f.tick_ms} of {schedule.schedule_id}: not one of its ticks")
    return found


def keep_coming(
    schedule: Made, own: Sequence[Fired], deleted_ms: int, allowance_ms: int
) -> list[str]:
    """From the first tick to the deletion, fired ticks' starts are at most two intervals and
    the outage apart."""
    bound = 2 * schedule.every_s * 1000 + allowance_ms if schedule.every_s else 0
    times = [schedule.first_ms, *sorted(f.started_ms for f in own), deleted_ms]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    widest = max(gaps, default=0)
    if schedule.first_ms < deleted_ms and widest > bound:
        return [
            f"{schedule.schedule_id} (every {schedule.every_s} s): no tick for "
            f"{widest / 1000:.1f} s (at most {bound / 1000:.1f} s)"
        ]
    return []


def caught_up_once(schedule: Made, own: Sequence[Fired], down: tuple[int, int]) -> list[str]:
    """Every worker was down from ``down[0]`` to ``down[1]``: at most one tick of that gap
    fired, and the first tick fired after it (of the gap or later) was the newest due then."""
    start, end = down
    found = []
    of_gap = [f for f in own if start < f.tick_ms <= end]
    if len(of_gap) > 1:
        found.append(
            f"{schedule.schedule_id}: {len(of_gap)} ticks of the outage fired, catch_up one "
            "fires one"
        )
    step = (schedule.every_s or 0) * 1000
    after = [f for f in own if f.tick_ms > start and f.started_ms > end]
    if after and after[0].started_ms - after[0].tick_ms >= step + NEWEST_SLACK_MS:
        first = after[0]
        found.append(
            f"{schedule.schedule_id}: the first tick after the outage ({first.tick_ms}) was "
            f"{first.late_s:.1f} s late, not the newest due"
        )
    return found


def lateness(fired: Sequence[Fired]) -> float:
    """The latest a tick's turn started after its tick (s)."""
    return max((f.late_s for f in fired), default=0.0)


def median_lateness(fired: Sequence[Fired]) -> float:
    """A trial's typical lateness (s): the median of its ticks' (a fault's own delay is one or
    two of them)."""
    return statistics.median(f.late_s for f in fired) if fired else 0.0
