"""cProfile of dres's side of row 3 at 100k (``build_journal(ledger.events(turn_id))``), warm.

Prints three unprofiled runs with the time spent in Python's cyclic GC and its collections per
generation, then one profiled run's top functions by own time and by cumulative time. From the
worktree root: ``PYTHONPATH=. .venv/bin/python bench/profiles/profile_rebuild.py LABEL``.
"""

from __future__ import annotations

import cProfile
import gc
import io
import pstats
import sys
import time
from typing import Any

import redis

from bench import ledger_bench
from ledger.store import Ledger
from worker.dev.redis_server import RedisServer

SIZE = 100_000
RUNS = 3
TOP = 20


class GcTimer:
    """Time in the collector and collections per generation, from ``gc.callbacks``."""

    def __init__(self) -> None:
        self.ns = 0
        self.collections = [0, 0, 0]
        self._started = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter_ns()
            return
        self.ns += time.perf_counter_ns() - self._started
        self.collections[info["generation"]] += 1


def main(label: str) -> str:
    out = io.StringIO()
    print(
        f"# row 3, rebuild 100k, dres side: build_journal(ledger.events(turn_id)), {label}",
        file=out,
    )
    print(
        f"# python {sys.version.split()[0]}; {SIZE:,} entries of ~500 B (tool_start/tool_done "
        "pairs); warm; private redis-server",
        file=out,
    )
    print(
        "# unprofiled runs: wall ms, of it in the cyclic GC, collections per generation", file=out
    )
    with RedisServer(appendfsync="everysec") as server:
        ledger = Ledger(redis.Redis(port=server.port))
        turn_id = ledger_bench.write_stream(ledger, SIZE)
        ledger_bench.dres_rebuild(ledger, turn_id)
        for _ in range(RUNS):
            gc.collect()
            timer = GcTimer()
            gc.callbacks.append(timer)
            started = time.perf_counter_ns()
            ledger_bench.dres_rebuild(ledger, turn_id)
            wall = (time.perf_counter_ns() - started) / 1e6
            gc.callbacks.remove(timer)
            print(
                f"#   {wall:8.1f} ms   gc {timer.ns / 1e6:7.1f} ms   {timer.collections}", file=out
            )
        gc.collect()
        profile = cProfile.Profile()
        profile.enable()
        ledger_bench.dres_rebuild(ledger, turn_id)
        profile.disable()
    print("# one run under cProfile (a GC pause lands in whatever function was running):", file=out)
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("tottime").print_stats(TOP)
    stats.sort_stats("cumulative").print_stats(TOP)
    return out.getvalue()


if __name__ == "__main__":
    text = main(sys.argv[1] if len(sys.argv) > 1 else "")
    for prefix in (
        f"{sys.prefix}/lib/python3.11/site-packages/",
        f"{__file__.rsplit('/bench/', 1)[0]}/",
    ):
        text = text.replace(prefix, "")
    print(text)
