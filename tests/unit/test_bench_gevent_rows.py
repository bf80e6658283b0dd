"""Issue 37's bench rows under gevent (2g, 4g, 7g, S2g): how they become rows of the table and
lines of the report, beside prefork's."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.harness import GEVENT, ROOT, Row
from bench.pickup_bench import PickupPlan, Trial, pickup_rows
from bench.report import details
from bench.resume_bench import GEVENT_RESUME_TARGET, ResumeRound, gevent_resume_row
from bench.stream_bench import BYTES_TARGET, bytes_rows


def resume_round(*latency_ms: float) -> ResumeRound:
    seconds = [x / 1000 for x in latency_ms]
    return ResumeRound(seconds, [x / 2 for x in seconds], [x / 2 for x in seconds], 4, 40)


def test_row_4g_reads_its_gevent_rounds_against_row_4s_prefork_soft_limit_baseline() -> None:
    """Celery's gevent pool has no soft limit: the baseline is prefork's, taken before the gevent
    rounds, so the ratio is that of the medians, never of pairs."""
    soft = Row("resume latency vs a plain task chaining from its soft limit", "ms",
               [5.0, 5.2, 5.1], [3.0, 2.0, 4.0], number="4")  # fmt: skip
    rounds = [resume_round(6.0, 6.0, 6.0), resume_round(5.0, 7.0, 6.4), resume_round(6.2)]
    slow = gevent_resume_row([*rounds, resume_round(1705.0)], soft, "dres worker -P gevent -c 2")
    assert (slow.extra["boundaries_over_100_ms"], slow.extra["boundaries"]) == (1, 8)

    row = gevent_resume_row(rounds, soft, "dres worker -P gevent -c 2")

    assert (row.number, row.target) == ("4g", GEVENT_RESUME_TARGET)
    assert row.dres == [pytest.approx(6.0), pytest.approx(6.4), pytest.approx(6.2)]
    assert row.raw == [3.0, 2.0, 4.0] and row.pair_ratios == []
    assert row.ratio == pytest.approx(6.2 / 3.0)
    assert (row.verdict, row.wording) == ("misses", "dres slower by 2.07x")
    assert "prefork" in row.baseline and "dres worker -P gevent -c 2" in row.name
    line = next(x for x in details({row.name: row}, {}) if x.startswith("Row 4g"))
    assert "3 rounds x 3 boundaries on `dres worker -P gevent -c 2`" in line
    assert "0 of 7 boundaries over 100 ms" in line


def test_row_7g_is_the_whole_worker_case_on_gevent_workers() -> None:
    plan = PickupPlan(trials=2)
    trials = [
        Trial("whole worker", "t1", "run_a", 11, 3.4, True, "reaper", "other worker", "completed"),
        Trial("whole worker", "t2", "run_b", 12, 3.9, True, "reaper", "other worker", "completed"),
    ]

    [row] = pickup_rows(trials, plan, {"settings": {"lease_s": 3.0}}, GEVENT)
    [prefork] = pickup_rows(trials, plan, {"settings": {"lease_s": 3.0}})

    assert (row.number, row.name) == (
        "7g",
        "crash pickup, whole worker, `dres worker -P gevent -c 1`",
    )
    assert (prefork.number, prefork.name) == ("7", "crash pickup, whole worker")
    assert (row.verdict, row.target_text) == ("meets", "<= 5 s")
    result = {"pickup": {"settings": {}}, "pickup_gevent": {"settings": {"lease_s": 3.0}}}
    lines = details({row.name: row, prefork.name: prefork}, result)
    assert [x.split(" (")[0] for x in lines if x.startswith("Row 7")] == ["Row 7", "Row 7g"]


def test_row_s2g_keeps_the_paced_bytes_target_under_its_own_number() -> None:
    trial = {"redis_bytes": 19_000.0, "text_bytes": 8000.0, "text_events": 200.0}
    name = "paced 10 ms/token, `dres worker -P gevent -c 1`"

    share, whole = bytes_rows({name: [trial]}, 3000.0, 2000, number="S2g")

    assert (share.number, whole.number) == ("S2g", "S2g")
    assert (share.target, whole.target) == (BYTES_TARGET, None)
    assert share.dres == [pytest.approx(2.0)] and share.verdict == "meets"


def test_row_2gs_process_imports_no_socket_user_before_it_patches_for_gevent() -> None:
    """gevent's patches must come before ``socket``, ``ssl``, ``threading`` or ``redis`` are
    imported, or the row measures unpatched sockets."""
    probe = (
        "import sys, bench.gevent_tool_call; "
        "print(sorted({'socket', 'ssl', 'threading', 'redis', 'select'} & set(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr


def test_row_4gs_baseline_is_row_4s_soft_limit_chain_not_the_plain_hop() -> None:
    """Since issue 27 the plain hop's row has no target and the soft-limit row has one: the
    baseline is picked by what it is, not by which row carries a target."""
    from bench.celery_bench import soft_limit_row
    from bench.resume_bench import RESUME_TARGET, SOFT_ROW

    hop = Row("resume latency", "ms", [5.0], [1.2], None, number="4")
    soft = Row(SOFT_ROW, "ms", [5.0], [3.0], RESUME_TARGET, number="4")

    assert soft_limit_row([hop, soft]) is soft


def test_row_4gs_ratio_and_its_report_read_row_4s_soft_limit_baseline_never_the_hop() -> None:
    """Issue 46: a full run printed 4g against the plain hop (4.15, misses) where against the
    soft-limit chain it names it was 1.99. The row refuses any other baseline, and the table
    line and the report's words for 4g read the soft-limit chain's figures, not the hop's."""
    from bench.celery_bench import soft_limit_row
    from bench.report import markdown_table
    from bench.report_notes import METHOD
    from bench.resume_bench import RESUME_TARGET, SOFT_ROW

    hop = Row("resume latency", "ms", [4.0, 4.2], [1.0, 1.1], None, number="4")
    soft = Row(SOFT_ROW, "ms", [4.0, 4.2], [2.0, 2.2], RESUME_TARGET, number="4")
    rounds = [resume_round(4.0, 4.0), resume_round(4.2, 4.2)]
    with pytest.raises(ValueError, match="soft limit"):
        gevent_resume_row(rounds, hop, "dres worker -P gevent -c 2")

    row = gevent_resume_row(rounds, soft_limit_row([hop, soft]), "dres worker -P gevent -c 2")

    assert row.ratio == pytest.approx(4.1 / 2.1)
    line = markdown_table([hop, soft, row])[-1]
    assert "| 2.10 [2.00–2.20] | 1.95 (unpaired) | ≤ 2.0 | meets |" in line, line
    note = next(x for x in METHOD if x.startswith("**4g**"))
    assert "information" not in note and "never the plain hop" in note
