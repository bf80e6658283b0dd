"""Row W1's bench on real parts, small (``python -m bench.timer_bench --quick --timers 300``): its
own redis-server, turns seeded through the lifecycle's steps, two reaper processes waking them
through ``Reaper.sweep``. Every turn is woken once with one message, and a sweep with none due
reads as many bytes with 300 timers waiting as with 100. No figure of time is asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.timer_bench import TARGET_FLAT

pytestmark = pytest.mark.redis_server

ROOT = Path(__file__).resolve().parents[2]
TIMERS = 300


@pytest.mark.timeout(240)
def test_the_bench_wakes_every_timer_once_and_an_idle_sweep_reads_no_more_for_more_timers(
    tmp_path: Path,
) -> None:
    path = tmp_path / "timers.json"
    command = [sys.executable, "-m", "bench.timer_bench", "--quick", "--timers", str(TIMERS)]
    done = subprocess.run(
        [*command, "--json", str(path)], cwd=ROOT, capture_output=True, text=True, timeout=200
    )
    assert done.returncode == 0, done.stderr[-3000:]

    result = json.loads(path.read_text())
    info, rows = result["info"], {row["name"]: row for row in result["rows"]}
    assert (info["messages"], info["woken_once"], info["sweep_failures"]) == (TIMERS, TIMERS, 0)
    assert sum(info["woken_by_reaper"]) == TIMERS
    once = next(row for name, row in rows.items() if name.endswith("woken exactly once"))
    assert once["verdict"] == "meets"
    idle = next(row for name, row in rows.items() if "none due" in name)
    assert min(idle["dres_samples"]) > 0 and min(idle["raw_samples"]) > 0
    assert idle["ratio"] <= TARGET_FLAT, idle
    assert len(info["delays_s"]) == TIMERS and min(info["delays_s"]) >= 0
