"""Five-field cron (``worker.base.cron``) and a schedule's tick arithmetic
(``worker.lifecycle.ticks``): docs/semantics.md, schedules."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.base.cron import CronError, parse_cron
from worker.base.errors import InvalidInput
from worker.lifecycle.ticks import (
    EVERY_PATTERN,
    LATE_S,
    Every,
    decide,
    first_tick,
    newest_tick,
    parse_every,
)


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def ms(text: str) -> int:
    return round(at(text) * 1000)


def nexts(expr: str, start: str, n: int = 3) -> list[str]:
    cron, t, found = parse_cron(expr), at(start), []
    for _ in range(n):
        following = cron.next_after(t)
        assert following is not None
        found.append(datetime.fromtimestamp(following, UTC).strftime("%Y-%m-%d %H:%M"))
        t = following
    return found


def test_each_field_star_number_list_range_and_step() -> None:
    assert nexts("*/15 * * * *", "2026-01-01T00:07:30") == [
        "2026-01-01 00:15",
        "2026-01-01 00:30",
        "2026-01-01 00:45",
    ]
    assert nexts("5,10 9-10 * * *", "2026-01-01T09:06") == [
        "2026-01-01 09:10",
        "2026-01-01 10:05",
        "2026-01-01 10:10",
    ]
    assert nexts("0 8-18/5 * * *", "2026-01-01T00:00") == [
        "2026-01-01 08:00",
        "2026-01-01 13:00",
        "2026-01-01 18:00",
    ]
    assert nexts("30 2/10 * * *", "2026-01-01T00:00") == [
        "2026-01-01 02:30",
        "2026-01-01 12:30",
        "2026-01-01 22:30",
    ]


def test_next_after_is_strictly_after_even_on_a_tick() -> None:
    assert nexts("0 * * * *", "2026-01-01T10:00", 1) == ["2026-01-01 11:00"]


def test_day_of_week_0_and_7_are_sunday() -> None:
    # 2026-01-04 is a Sunday
    assert nexts("0 12 * * 7", "2026-01-01T00:00", 1) == ["2026-01-04 12:00"]
    assert nexts("0 12 * * 0", "2026-01-01T00:00", 1) == ["2026-01-04 12:00"]
    assert nexts("0 0 1 2 *", "2026-01-01T00:00", 1) == ["2026-02-01 00:00"]


def test_a_range_whose_end_is_below_its_start_wraps_past_the_field_s_end() -> None:
    assert parse_cron("0 22-2 * * *").hours == {22, 23, 0, 1, 2}
    assert parse_cron("0 22-2/2 * * *").hours == {22, 0, 2}
    assert parse_cron("0 0 * * 5-1").weekdays == {5, 6, 0, 1}


def test_an_expression_no_date_matches_is_taken_and_never_comes() -> None:
    assert parse_cron("0 0 30 2 *").next_after(at("2026-01-01T00:00")) is None


def test_both_day_fields_restricted_match_either_day_vixie_s_or_rule() -> None:
    # the 13th, or any Friday: 2026-02-06 is a Friday, then the 13th (also a Friday), then 20th
    assert nexts("0 0 13 * 5", "2026-02-01T00:00") == [
        "2026-02-06 00:00",
        "2026-02-13 00:00",
        "2026-02-20 00:00",
    ]
    # a day field beginning with a star is not restricted: both must match (Fridays on odd days)
    assert nexts("0 0 */2 * 5", "2026-02-01T00:00", 2) == ["2026-02-13 00:00", "2026-02-27 00:00"]


def test_month_ends_and_leap_days() -> None:
    assert nexts("0 0 31 * *", "2026-01-31T12:00", 2) == ["2026-03-31 00:00", "2026-05-31 00:00"]
    assert nexts("0 0 29 2 *", "2026-01-01T00:00", 1) == ["2028-02-29 00:00"]
    assert nexts("59 23 31 12 *", "2026-12-31T23:59", 1) == ["2027-12-31 23:59"]


@pytest.mark.parametrize(
    ("expr", "said"),
    [
        ("61 * * * *", "minute field '61' is out of 0-59"),
        ("* 24 * * *", "hour field '24' is out of 0-23"),
        ("* * 0 * *", "day-of-month field '0' is out of 1-31"),
        ("* * * 13 *", "month field '13' is out of 1-12"),
        ("* * * * 8", "day-of-week field '8' is out of 0-7"),
        ("*/0 * * * *", "minute field '*/0': a step must be positive"),
        ("0x * * * *", "minute field '0x': '0x' is not a number"),
        ("x * * * *", "minute field 'x': 'x' is not a number"),
        ("* * * *", "5 fields"),
        ("005 * * * *", "at most one leading zero"),
        (" 0 * * * *", "none before or after"),
        ("0 0 * JAN *", "month field 'JAN'"),
    ],
)
def test_a_malformed_expression_names_its_field_and_what_is_wrong(expr: str, said: str) -> None:
    with pytest.raises(CronError, match=said.replace("*", r"\*")):
        parse_cron(expr)
    with pytest.raises(InvalidInput, match=r"^every: "):
        parse_every(expr)


def test_every_is_seconds_as_a_number_or_digits_else_cron() -> None:
    assert parse_every(60) == Every(seconds=60)
    assert parse_every("60") == Every(seconds=60)
    assert parse_every("@hourly").cron is not None
    for bad in (0, -5, True, 10**12, "0060", "123456789", "@HOURLY"):
        with pytest.raises(InvalidInput, match=r"^every: "):
            parse_every(bad)


def test_ticks_of_seconds_start_one_interval_after_making_and_step_from_there() -> None:
    every = Every(seconds=10)
    assert first_tick(every, None, 1_000) == 11_000
    assert newest_tick(every, 11_000, 54_999) == 51_000
    assert first_tick(None, 5_000, 1_000) == 5_000


def test_ticks_of_cron_are_the_next_cron_time() -> None:
    every = parse_every("0 * * * *")
    assert first_tick(every, None, ms("2026-01-01T10:20")) == ms("2026-01-01T11:00")
    # a gap of three days: the newest hour that came, found without stepping through the gap
    assert newest_tick(every, ms("2026-01-01T11:00"), ms("2026-01-04T09:30")) == ms(
        "2026-01-04T09:00"
    )


def test_catch_up_one_fires_the_newest_tick_once_and_moves_past_now() -> None:
    every = Every(seconds=60)
    made, due = 0, 60_000
    firing = decide(every, "one", due, 10 * 60_000 + 5, made)
    assert firing.tick_ms == 600_000
    assert firing.next_ms == 660_000


def test_catch_up_none_fires_a_tick_on_time_and_skips_one_missed_while_nothing_ran() -> None:
    every = Every(seconds=3600)
    due = 3_600_000
    on_time = decide(every, "none", due, due + 1_500, 0)
    assert (on_time.tick_ms, on_time.next_ms) == (due, 2 * due)
    late = decide(every, "none", due, due + int(LATE_S * 1000) + 1, 0)
    assert (late.tick_ms, late.next_ms) == (None, 2 * due)


def test_an_at_fires_once_then_is_spent_even_when_made_in_the_past() -> None:
    past = decide(None, "none", 1_000, 100_000, 99_000)
    assert (past.tick_ms, past.next_ms) == (1_000, None)
    missed = decide(None, "none", 1_000, 100_000, 0)
    assert (missed.tick_ms, missed.next_ms) == (None, None)


@settings(max_examples=300, deadline=None)
@given(st.from_regex(EVERY_PATTERN, fullmatch=True))
def test_every_string_the_document_s_pattern_spells_is_taken(value: str) -> None:
    parse_every(value)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789*/-, @dhly\t", max_size=24))
def test_every_string_taken_is_one_the_document_s_pattern_spells(value: str) -> None:
    try:
        parse_every(value)
    except InvalidInput:
        return
    assert re.fullmatch(EVERY_PATTERN, value), value
