"""Row 3 of ``make bench``: a journal rebuild beside a raw paged XRANGE + ``json.loads``
(``bench.ledger_bench`` runs it; its docstring says how).
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable
from typing import Any

import redis

from bench.harness import Row
from bench.ledger_turns import open_turn, tool_event
from ledger import keys
from ledger.codec import FIELD
from ledger.journal import Journal, build_journal
from ledger.store import Ledger

#: XRANGE page of the raw read (the same as ``Ledger``'s default page)
PAGE = 1000
#: issue 27: the 100k rebuild (before it, 1.3 on the 10k one)
REBUILD_TARGET = 1.25
#: the rebuild row whose ratio carries a target; the other sizes are reported for information
REBUILD_TARGET_SIZE = 100_000
#: events built and appended per ``append_many`` call while writing a rebuild stream
WRITE_CHUNK = 10_000

#: the stream whose rebuild row 6 sets beside DBOS's recovery: 1000 tool calls (2000 events)
#: after turn_started and run_started
CALLS_1000 = 2_002


def write_stream(ledger: Ledger, size: int) -> str:
    """A turn whose stream holds ``size`` entries: turn_started, run_started, then tool events."""
    turn_id = f"bench-rebuild-{size}"
    lease = open_turn(ledger, turn_id)
    for first in range(0, size - 2, WRITE_CHUNK):
        chunk = [tool_event(turn_id, n) for n in range(first, min(first + WRITE_CHUNK, size - 2))]
        ledger.append_many(chunk, lease=lease)
    written = ledger.client.xlen(keys.turn_events(turn_id))
    if written != size:
        raise RuntimeError(f"{turn_id}: wrote {written} entries, expected {size}")
    return turn_id


def dres_rebuild(ledger: Ledger, turn_id: str) -> Journal:
    return build_journal(ledger.events(turn_id))


def raw_rebuild(client: redis.Redis, stream: str) -> list[Any]:
    """Paged XRANGE with an exclusive start, ``json.loads`` of every entry's ``e`` field."""
    field_name = FIELD.encode()
    out: list[Any] = []
    start = "0-0"
    while True:
        entries = client.xrange(stream, min=f"({start}", max="+", count=PAGE)
        out += [json.loads(fields[field_name]) for _, fields in entries]
        if len(entries) < PAGE:
            return out
        start = entries[-1][0].decode()


def timed_ms(call: Callable[[], object]) -> tuple[float, object]:
    gc.collect()
    start = time.perf_counter_ns()
    result = call()
    return (time.perf_counter_ns() - start) / 1e6, result


def check_rebuild(size: int, journal: object, decoded: object) -> None:
    calls = (size - 2) // 2
    if not isinstance(journal, Journal) or len(journal.completed) != calls:
        raise RuntimeError(f"dres rebuild of {size}: unexpected journal")
    if not isinstance(decoded, list) or len(decoded) != size:
        raise RuntimeError(f"raw rebuild of {size}: unexpected entry count")


def bench_rebuild(ledger: Ledger, client: redis.Redis, size: int, repeats: int) -> Row:
    turn_id = write_stream(ledger, size)
    stream = keys.turn_events(turn_id)
    sides: dict[str, Callable[[], object]] = {
        "dres": lambda: dres_rebuild(ledger, turn_id),
        "raw": lambda: raw_rebuild(client, stream),
    }
    check_rebuild(size, sides["dres"](), sides["raw"]())  # also the warm-up
    times: dict[str, list[float]] = {"dres": [], "raw": []}
    for repeat in range(repeats):
        order = ("dres", "raw") if repeat % 2 == 0 else ("raw", "dres")
        for mode in order:
            ms, _ = timed_ms(sides[mode])
            times[mode].append(ms)
    client.delete(*keys.turn_keys(turn_id))
    target = REBUILD_TARGET if size == REBUILD_TARGET_SIZE else None
    name = f"rebuild {size // 1000}k"
    if size == CALLS_1000:
        name = f"rebuild {(size - 2) // 2} calls"
    extra = {"entries": size, "tool_calls": (size - 2) // 2}
    return Row(
        name,
        "ms",
        times["dres"],
        times["raw"],
        target,
        extra,
        number="3",
        baseline="raw paged XRANGE + json.loads",
    )
