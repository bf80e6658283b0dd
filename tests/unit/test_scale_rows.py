"""Issue 16's bench rows: how a streamed answer's Redis bytes become its rows."""

from __future__ import annotations

import pytest

from bench.__main__ import parse_args
from bench.scale_bench import FULL, QUICK, plan_for
from bench.stream_bench import BYTES_TARGET, bytes_rows


def trial(redis_bytes: float) -> dict[str, float]:
    return {"redis_bytes": redis_bytes, "text_bytes": 8000.0, "text_events": 16.0}


def test_the_texts_share_of_a_streamed_turn_leaves_out_a_short_turns_bytes() -> None:
    share, whole = bytes_rows({"paced 10 ms/token": [trial(20_000.0)]}, 4000.0, 2000)
    assert share.dres == [pytest.approx(2.0)] and whole.dres == [pytest.approx(2.5)]
    assert share.target == BYTES_TARGET and whole.target is None
    assert (share.verdict, share.extra["short_turn_bytes"]) == ("meets", 4000.0)


def test_only_the_paced_case_carries_the_bytes_target() -> None:
    """Issue 27: bytes per text byte at a provider's pace (100 tokens/s); as fast as sent, the
    coalescing window holds many tokens and the figure is for information."""
    rows = bytes_rows({"as fast as sent": [trial(90_000.0)]}, 4000.0, 2000)
    assert [row.target for row in rows] == [None, None]


def test_turns_sets_the_throughput_rows_turns_and_nothing_else() -> None:
    assert plan_for(False, None) == FULL and plan_for(True, None) == QUICK
    assert plan_for(True, 7) == QUICK.__class__(**{**QUICK.__dict__, "turns": 7})


def test_only_and_turns_are_checked_at_the_command_line() -> None:
    assert parse_args(["--only", "scale", "--turns", "50"]).turns == 50
    with pytest.raises(SystemExit):
        parse_args(["--only", "nothing"])
    with pytest.raises(SystemExit):
        parse_args(["--turns", "1"])
