"""Row 1 of ``make bench``: a fenced single append beside a raw XADD (``bench.ledger_bench`` runs
it; its docstring says how).
"""

from __future__ import annotations

import gc
import itertools
import statistics

import redis

from bench.harness import Row, percentile, time_each
from bench.ledger_turns import open_turn, tool_event
from ledger.codec import FIELD, encode
from ledger.events import Event
from ledger.store import Ledger

APPEND_TARGET = 1.3


def bench_append(ledger: Ledger, client: redis.Redis, blocks: int, ops: int) -> list[Row]:
    """Row 1: ``blocks`` alternating blocks of ``ops`` appends a side; p50 and p99 per block."""
    turn_id = "bench-append"
    lease = open_turn(ledger, turn_id)
    raw_key = "bench:raw-append"
    client.delete(raw_key)
    numbers = itertools.count()

    def dres(event: Event) -> object:
        return ledger.append(event, lease=lease)

    def raw(payload: str) -> object:
        return client.xadd(raw_key, {FIELD: payload})

    p50s: dict[str, list[float]] = {"dres": [], "raw": []}
    p99s: dict[str, list[float]] = {"dres": [], "raw": []}
    for block in range(-1, blocks):  # block -1 is the warm-up
        events = [tool_event(turn_id, next(numbers)) for _ in range(ops)]
        payloads = [encode(event) for event in events]
        order = ("dres", "raw") if block % 2 == 0 else ("raw", "dres")
        for mode in order:
            gc.collect()
            ns = time_each(dres, events) if mode == "dres" else time_each(raw, payloads)
            if block >= 0:
                p50s[mode].append(statistics.median(ns) / 1000)
                p99s[mode].append(percentile(ns, 0.99) / 1000)
    sizes = sorted({len(p) for p in payloads})
    extra = {"blocks": blocks, "ops_per_block": ops, "payload_bytes": sizes}
    return [
        Row("append p50", "us", p50s["dres"], p50s["raw"], APPEND_TARGET, extra, number="1"),
        Row("append p99", "us", p99s["dres"], p99s["raw"], None, extra, number="1"),
    ]
