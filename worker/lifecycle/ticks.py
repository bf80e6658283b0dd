"""A schedule's ticks (docs/semantics.md, schedules), decided from values: when the first one is,
which tick a due look fires, and when the next one is. Pure: no clock, no Redis (the lifecycle's
``Schedules`` acts on what these decide). Times are ms since the epoch.

``every`` is a whole number of seconds (a JSON number, or a string of digits), the ticks then
one interval apart from the schedule's making; or a five-field cron expression (UTC,
``worker.base.cron``). An ``at`` schedule has one tick.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from worker.base.cron import PATTERN as CRON_PATTERN
from worker.base.cron import Cron, CronError, parse_cron
from worker.base.errors import InvalidInput

#: catch_up "none": a due tick fired later than this after it came (or after the schedule was
#: made, for one made after its time) is a tick missed while nothing ran, and is not fired (s)
LATE_S = 30.0
#: the longest ``every`` in seconds (eight digits: about three years)
MOST_EVERY_S = 99_999_999
#: ``every`` as a string of digits: a whole number of seconds, no leading zero
SECONDS_PATTERN = r"^[1-9][0-9]{0,7}$"
#: every ``every`` string taken: seconds as digits, or a cron expression (``worker.base.cron``)
EVERY_PATTERN = f"^(?:{SECONDS_PATTERN[1:-1]}|{CRON_PATTERN[1:-1]})$"
_SECONDS = re.compile(SECONDS_PATTERN)
#: a cron look back from now that finds the newest tick before a long gap without stepping
#: through every tick of the gap (ms): a day
LOOK_BACK_MS = 24 * 3600 * 1000
CATCH_UP = ("one", "none")


@dataclass(frozen=True, slots=True)
class Every:
    """A repeating schedule's interval: ``seconds``, or a ``cron`` expression."""

    seconds: int | None = None
    cron: Cron | None = None

    def after(self, t_ms: int) -> int | None:
        """The first tick strictly after ``t_ms`` (None: a cron that never comes), for the
        ticks from ``t_ms`` (seconds: one interval later)."""
        if self.seconds is not None:
            return t_ms + self.seconds * 1000
        assert self.cron is not None
        found = self.cron.next_after(t_ms / 1000)
        return None if found is None else round(found * 1000)


def parse_every(value: int | str) -> Every:
    """``every`` as given (a whole number of seconds 1-``MOST_EVERY_S``, as a number or as
    digits, or a cron expression: exactly what ``EVERY_PATTERN`` spells); else ``InvalidInput``
    naming ``every`` and what is wrong."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidInput(f"every: seconds or a cron expression, not {value!r}")
    if isinstance(value, str) and value.isascii() and value.isdigit():
        if _SECONDS.fullmatch(value) is None:
            raise InvalidInput(
                f"every: seconds as digits are 1 to {MOST_EVERY_S} without a leading zero, "
                f"not {value!r}"
            )
        value = int(value)
    if isinstance(value, int):
        if not 1 <= value <= MOST_EVERY_S:
            raise InvalidInput(f"every: seconds must be 1 to {MOST_EVERY_S}, not {value}")
        return Every(seconds=value)
    try:
        every = Every(cron=parse_cron(value))
    except CronError as e:
        raise InvalidInput(f"every: {e}") from None
    return every


def first_tick(every: Every | None, at_ms: int | None, made_ms: int) -> int | None:
    """A new schedule's first tick: its ``at``, or one interval after it is made (cron: the next
    cron time)."""
    if every is None:
        return at_ms
    return every.after(made_ms)


@dataclass(frozen=True, slots=True)
class Firing:
    """What a due look at a schedule does: fire ``tick_ms`` (None: nothing), then make
    ``next_ms`` the next tick (None: spent)."""

    tick_ms: int | None
    next_ms: int | None


def newest_tick(every: Every, due_ms: int, now_ms: int) -> int:
    """The newest tick at or before ``now_ms``, from ``due_ms`` (a tick at or before it)."""
    if every.seconds is not None:
        step = every.seconds * 1000
        return due_ms + (now_ms - due_ms) // step * step
    newest = due_ms
    if now_ms - due_ms > LOOK_BACK_MS:  # a long gap: look from a day back first
        recent = every.after(now_ms - LOOK_BACK_MS)
        if recent is not None and recent <= now_ms:
            newest = recent
    while (later := every.after(newest)) is not None and later <= now_ms:
        newest = later
    return newest


def decide(every: Every | None, catch_up: str, due_ms: int, now_ms: int, made_ms: int) -> Firing:
    """A due tick ``due_ms`` looked at ``now_ms``: the newest tick that has come (``at``: its
    one) is fired once (``one``), or only if it is not late (``none``: at most ``LATE_S`` after
    it came, or after the schedule was made); the next tick is the first after now."""
    if every is None:
        newest, following = due_ms, None
    else:
        newest = newest_tick(every, due_ms, now_ms)
        following = every.after(newest)
    late = now_ms - max(newest, made_ms) > LATE_S * 1000
    fire = None if catch_up == "none" and late else newest
    return Firing(fire, following)
