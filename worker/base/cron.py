"""Five-field cron expressions (docs/semantics.md, schedules), in UTC: when a schedule's ``every``
comes next.

``minute hour day-of-month month day-of-week``, each ``*``, a number, a range ``a-b``, a step
``*/s``, ``a-b/s`` or ``a/s`` (from ``a`` to the field's end), or a comma list of those;
day-of-week 0-7, both 0 and 7 Sunday. A range whose end is below its start wraps past the field's
end (hours ``22-2``: 22, 23, 0, 1, 2). As Vixie cron (and every cron after it): when both day
fields are restricted (neither begins with ``*``), a day matches either; otherwise both.
``@yearly``, ``@monthly``, ``@weekly``, ``@daily`` and ``@hourly`` stand for their usual five
fields. An expression that no date matches (30 February) is taken, as cron takes it, and never
comes (``next_after`` is None).

``PATTERN`` spells exactly the expressions taken (the API's document states it, so a client or a
fuzzer knows them): ``parse_cron`` refuses anything else, naming the field and what is wrong.
No cron package is in the lock, and this is small.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

#: (name, lowest, highest) of the five fields, in order
FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
)
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
#: years ``next_after`` looks ahead before it says an expression never comes (29 February on
#: a given weekday comes at least every 28 years)
HORIZON_YEARS = 29


def _item_pattern(number: str) -> str:
    item = rf"(?:\*|{number}(?:-{number})?)(?:/[1-9][0-9]{{0,2}})?"
    return rf"{item}(?:,{item})*"


#: each field's numbers, as the pattern spells them (in range, at most one leading zero)
NUMBERS = (
    r"[0-5]?[0-9]",
    r"(?:[01]?[0-9]|2[0-3])",
    r"(?:0?[1-9]|[12][0-9]|3[01])",
    r"(?:0?[1-9]|1[0-2])",
    r"[0-7]",
)
#: every expression taken, for a regex engine of any dialect (Python's, ECMA-262's): five
#: fields one or more spaces apart, or a macro
PATTERN = (
    "^(?:@(?:yearly|annually|monthly|weekly|daily|midnight|hourly)|"
    + " +".join(_item_pattern(n) for n in NUMBERS)
    + ")$"
)
_PATTERN = re.compile(PATTERN)


class CronError(ValueError):
    """An expression that is not five-field cron; its text names the field and what is wrong."""


@dataclass(frozen=True, slots=True)
class Cron:
    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    #: cron's day numbers, Sunday 0 (a 7 is read as 0)
    weekdays: frozenset[int]
    #: both day fields are restricted: a day matches either (Vixie cron's rule)
    either_day: bool

    def next_after(self, t: float) -> float | None:
        """The first time of the expression strictly after ``t`` (seconds since the epoch, UTC);
        None when it never comes (such as 30 February) within ``HORIZON_YEARS``."""
        at = datetime.fromtimestamp(t // 60 * 60, UTC) + timedelta(minutes=1)
        end = at.year + HORIZON_YEARS
        while at.year <= end:
            if at.month not in self.months:
                at = _next_month(at)
            elif not self._day(at):
                at = datetime(at.year, at.month, at.day, tzinfo=UTC) + timedelta(days=1)
            elif at.hour not in self.hours:
                at = datetime(at.year, at.month, at.day, at.hour, tzinfo=UTC) + timedelta(hours=1)
            elif at.minute not in self.minutes:
                at += timedelta(minutes=1)
            else:
                return at.timestamp()
        return None

    def _day(self, at: datetime) -> bool:
        in_month = at.day in self.days
        in_week = (at.weekday() + 1) % 7 in self.weekdays
        return (in_month or in_week) if self.either_day else (in_month and in_week)


def _next_month(at: datetime) -> datetime:
    if at.month == 12:
        return datetime(at.year + 1, 1, 1, tzinfo=UTC)
    return datetime(at.year, at.month + 1, 1, tzinfo=UTC)


def parse_cron(text: str) -> Cron:
    """``text`` as a ``Cron``; ``CronError`` naming the field and what is wrong."""
    spec = MACROS.get(text, text)
    parts = spec.split()
    if len(parts) != len(FIELDS):
        raise CronError(
            f"a cron expression has 5 fields (minute hour day-of-month month day-of-week), "
            f"not {len(parts)}: {text!r}"
        )
    values = [_field(part, *field) for part, field in zip(parts, FIELDS, strict=True)]
    if _PATTERN.fullmatch(text) is None:  # what the fields' checks let by: spacing, zeros, steps
        raise CronError(
            f"{text!r}: five fields one or more spaces apart, none before or after, each number "
            "with at most one leading zero and each step 1-999"
        )
    return Cron(
        text=text,
        minutes=values[0],
        hours=values[1],
        days=values[2],
        months=values[3],
        weekdays=frozenset(d % 7 for d in values[4]),
        either_day=not parts[2].startswith("*") and not parts[4].startswith("*"),
    )


def _field(part: str, name: str, low: int, high: int) -> frozenset[int]:
    found: set[int] = set()
    for item in part.split(","):
        found |= _item(item, name, low, high)
    return frozenset(found)


def _item(item: str, name: str, low: int, high: int) -> set[int]:
    body, slash, step_text = item.partition("/")
    step = 1
    if slash:
        step = _number(step_text, name, item)
        if step <= 0:
            raise CronError(f"{name} field {item!r}: a step must be positive")
    if body == "*":
        first, last = low, high
    elif "-" in body:
        a, _, b = body.partition("-")
        first, last = _value(a, name, low, high), _value(b, name, low, high)
    else:
        first = _value(body, name, low, high)
        last = high if slash else first
    span = last - first if last >= first else last + (high - low + 1) - first  # wraps
    return {low + (first - low + k) % (high - low + 1) for k in range(0, span + 1, step)}


def _value(text: str, name: str, low: int, high: int) -> int:
    value = _number(text, name, text)
    if not low <= value <= high:
        raise CronError(f"{name} field {text!r} is out of {low}-{high}")
    return value


def _number(text: str, name: str, item: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise CronError(f"{name} field {item!r}: {text!r} is not a number")
    return int(text)
