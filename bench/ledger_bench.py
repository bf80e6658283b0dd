"""Benchmark of the run ledger against raw redis-py, both measured in the same run.

What it measures, on a private redis-server (AOF on, ``appendfsync everysec``) started here:

1. Fenced single append: the latency of ``Ledger.append(event, lease=...)`` (encode the event,
   one XADD with the run's explicit, fencing stream id) beside a raw ``XADD key * e <json>`` of
   the same pre-serialised ~500-byte JSON. Only the call itself is timed (``perf_counter_ns``);
   events, their ids and the raw payloads are built before each block.
2. Tool-call recording: what the executor adds around one tool call, the tool itself excluded —
   a call id, then inside ``DeferSignals`` a ``Recorder.record(ToolStart)`` (event built with
   its id and timestamp, one fenced XADD) and a ``Recorder.make(ToolDone)`` appended with
   ``Recorder.record_many`` (the one-XADD path) — beside two raw XADDs of pre-serialised
   payloads of the same sizes (~500 bytes each). The tool's validated input, its signature and
   its result are computed before each block (validation and the tool are not recording).
3. Journal rebuild: ``build_journal(ledger.events(turn_id))`` (paged XRANGE, pydantic decode of
   every entry, the fold) beside a raw paged XRANGE (COUNT 1000, exclusive start ``(id``) of the
   same stream with ``json.loads`` of every entry's ``e`` field. Each stream (1k, 10k, 100k entries,
   and 2002 = 1000 tool calls for row 6's peer comparison: ``turn_started`` then alternating
   ``tool_start``/``tool_done`` of ~500 bytes) is written once with ``Ledger.append_many``.

Row 2 also times the parts of dres's own CPU per call with XADD stubbed out (``cpu_breakdown_us``
in the JSON), the evidence for where its overhead goes.

How: both sides share one process, one server and one ``redis.Redis`` client (hiredis parser,
bytes replies), and alternate within the run (dres block, raw block, raw block, dres block, ...)
so that noise from the shared cores falls on both. One unrecorded warm-up precedes each
measurement. Figures are medians over blocks or repeats with [min..max]; the ratio is
median(dres) / median(raw), with the range of the per-pair ratios beside it.

Run from the project root: ``.venv/bin/python -m bench.ledger_bench [--quick] [--json PATH]``.
It reports and never asserts: the exit status is 0 even when a target is missed.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import itertools
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import redis

from ledger import keys
from ledger.codec import FIELD, encode
from ledger.events import Event, ToolDone, ToolStart, TurnStarted
from ledger.journal import Journal, build_journal
from ledger.lease import Lease
from ledger.signature import input_signature
from ledger.store import Ledger
from ledger.turns import TurnStore
from worker.base.clock import RandomIds, SystemClock
from worker.dev.redis_server import RedisServer
from worker.engine.recorder import Recorder, RunContext
from worker.engine.tools.guard import DeferSignals

#: size of the JSON of each tool event, as stored in the entry's ``e`` field
PAYLOAD_BYTES = 500
#: XRANGE page of the raw read (the same as ``Ledger``'s default page)
PAGE = 1000
APPEND_TARGET = 1.3
TOOL_CALL_TARGET = 1.3
REBUILD_TARGET = 1.3
#: the rebuild row whose ratio carries a target; the other sizes are reported for information
REBUILD_TARGET_SIZE = 10_000
#: events built and appended per ``append_many`` call while writing a rebuild stream
WRITE_CHUNK = 10_000
BASE_TS = 1_700_000_000.0
RUN_ID = "r1"
FILLER = "grep: src/ledger/store.py:42: the quick brown fox jumps over the lazy dog; "


#: the stream whose rebuild row 6 sets beside DBOS's recovery: 1000 tool calls (2000 events)
#: after turn_started and run_started
CALLS_1000 = 2_002


@dataclass(frozen=True)
class Plan:
    append_blocks: int
    append_ops: int
    #: (stream entries, repeats per side)
    rebuild: tuple[tuple[int, int], ...]
    #: blocks x calls of the tool-call recording row (0 blocks: the row is left out)
    tool_blocks: int = 0
    tool_ops: int = 0


FULL = Plan(
    append_blocks=20,
    append_ops=500,
    rebuild=((1_000, 7), (CALLS_1000, 7), (10_000, 7), (100_000, 3)),
    tool_blocks=20,
    tool_ops=250,
)
QUICK = Plan(
    append_blocks=4,
    append_ops=200,
    rebuild=((1_000, 3), (CALLS_1000, 3), (10_000, 3), (100_000, 1)),
    tool_blocks=4,
    tool_ops=100,
)


@dataclass
class Row:
    """One figure of dres beside its baseline.

    ``ratio``: the median of the per-pair ratios when the samples were taken in interleaved
    pairs (each dres sample beside the baseline sample taken next to it, so that a burst of host
    load weighs on both sides of a pair), else median(dres) / median(raw). With few pairs of
    unequal length (row 4: a dres round lasts ~16 s, a hop round ~0.3 s) the ratio of the
    medians pairs figures from different moments; both are reported.

    A row without a baseline (``raw`` empty: row 7's crash pickup) is an absolute figure: no
    ratio, and its verdict reads ``limit``, a bound on the median dres figure in the row's unit.
    """

    name: str
    unit: str
    dres: list[float]
    raw: list[float]
    target: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: throughput-like rows: a larger figure is better (ratios < 1 mean dres is slower)
    higher_is_better: bool = False
    #: the row's number in ``make bench``'s table (1-6); "" for a row only shown standalone
    number: str = ""
    #: what the baseline is, in a few words (the markdown report's legend)
    baseline: str = "raw redis-py"
    #: a row without a baseline: the bound on its median figure (<=, or >= when higher is
    #: better), in the row's unit; None: an information row
    limit: float | None = None

    @property
    def absolute(self) -> bool:
        """No baseline: the figure stands on its own against ``limit``."""
        return not self.raw

    @property
    def ratio(self) -> float:
        pairs = self.pair_ratios
        return statistics.median(pairs) if pairs else self.ratio_of_medians

    @property
    def ratio_of_medians(self) -> float:
        return statistics.median(self.dres) / statistics.median(self.raw)

    @property
    def paired(self) -> bool:
        """Samples were taken in interleaved pairs (else only the medians compare)."""
        return len(self.dres) == len(self.raw) and not self.extra.get("unpaired", False)

    @property
    def pair_ratios(self) -> list[float]:
        if not self.paired:
            return []
        return [d / r for d, r in zip(self.dres, self.raw, strict=True)]

    @property
    def verdict(self) -> str:
        if self.absolute:
            if self.limit is None:
                return "info"
            return "meets" if self.within(statistics.median(self.dres)) else "misses"
        if self.target is None:
            return "info"
        return "meets" if self.ratio <= self.target else "misses"

    def within(self, value: float) -> bool:
        """``value`` keeps to the absolute ``limit`` (rows without a baseline)."""
        if self.limit is None:
            return True
        return value >= self.limit if self.higher_is_better else value <= self.limit

    @property
    def target_text(self) -> str:
        """The target as a table shows it: ``<= 1.3`` (a ratio) or ``<= 15 s`` (absolute)."""
        if self.absolute:
            if self.limit is None:
                return "-"
            sign = ">=" if self.higher_is_better else "<="
            return f"{sign} {self.limit:g} {self.unit}"
        return "-" if self.target is None else f"<= {self.target}"

    @property
    def wording(self) -> str:
        """Which is faster and by how much, e.g. ``dres slower by 1.25x``; for a row without a
        baseline, how many of its samples keep to its limit, e.g. ``no baseline; 5/5 <= 15 s``."""
        if self.absolute:
            if self.limit is None:
                return "no baseline"
            kept = sum(1 for x in self.dres if self.within(x))
            return f"no baseline; {kept}/{len(self.dres)} {self.target_text}"
        ratio = self.ratio
        dres_faster = ratio > 1 if self.higher_is_better else ratio < 1
        factor = max(ratio, 1 / ratio)
        if factor < 1.005:
            return "same"
        return f"dres {'faster' if dres_faster else 'slower'} by {factor:.2f}x"

    def as_dict(self) -> dict[str, Any]:
        pairs = self.pair_ratios
        absolute = self.absolute
        return {
            "number": self.number,
            "name": self.name,
            "unit": self.unit,
            "baseline": self.baseline,
            "dres": summary(self.dres),
            "raw": None if absolute else summary(self.raw),
            "ratio": None if absolute else self.ratio,
            "ratio_of_medians": None if absolute else self.ratio_of_medians,
            "pair_ratio_min": min(pairs) if pairs else None,
            "pair_ratio_max": max(pairs) if pairs else None,
            "higher_is_better": self.higher_is_better,
            "target_ratio_max": self.target,
            **({"target_limit": self.limit} if absolute else {}),
            "verdict": self.verdict,
            "wording": self.wording,
            "dres_samples": self.dres,
            "raw_samples": self.raw,
            **self.extra,
        }


def summary(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


# -- events ------------------------------------------------------------------------------------


def _filler(length: int) -> str:
    return (FILLER * (length // len(FILLER) + 1))[:length]


def _tool_event(turn_id: str, n: int, pad: int) -> Event:
    """Event ``n`` of a turn: tool_start for even n, the matching tool_done for odd n."""
    call = n // 2
    common: dict[str, Any] = {
        "event_id": f"{turn_id}:ev{n:09d}",
        "turn_id": turn_id,
        "run_id": RUN_ID,
        "chunk": 0,
        "ts": BASE_TS + n,
    }
    if n % 2 == 0:
        tool_input = {"path": f"src/module_{call:09d}.py", "pattern": _filler(pad)}
        return ToolStart(
            **common,
            call_id=f"call{call:09d}",
            tool="grep",
            input=tool_input,
            signature=input_signature(tool_input),
        )
    result = {"matches": 3, "output": _filler(pad)}
    return ToolDone(**common, call_id=f"call{call:09d}", tool="grep", result=result)


#: filler length by (event kind, length of the turn id)
_PADS: dict[tuple[int, int], int] = {}


def tool_event(turn_id: str, n: int) -> Event:
    """A tool event whose JSON is ``PAYLOAD_BYTES`` long."""
    shape = (n % 2, len(turn_id))
    if shape not in _PADS:
        bare = len(encode(_tool_event(turn_id, shape[0], 0)))
        _PADS[shape] = max(0, PAYLOAD_BYTES - bare)
    return _tool_event(turn_id, n, _PADS[shape])


def turn_started(turn_id: str) -> TurnStarted:
    return TurnStarted(
        event_id=f"{turn_id}:start",
        turn_id=turn_id,
        run_id=RUN_ID,
        chunk=0,
        ts=BASE_TS,
        conversation_id="bench-conversation",
        message="benchmark turn",
    )


def open_turn(ledger: Ledger, turn_id: str) -> Lease:
    """Create the turn with its first run and claim it; returns the run's lease."""
    ledger.client.delete(*keys.turn_keys(turn_id))
    turns = TurnStore(ledger)
    lease_until_ms = int(time.time() * 1000) + 3_600_000
    if not turns.create(
        turn_started(turn_id), first_run=RUN_ID, look_at_ms=lease_until_ms, fields={}
    ):
        raise RuntimeError(f"turn {turn_id} already exists")
    claim = turns.claim(
        turn_id, RUN_ID, lease_until_ms=lease_until_ms, event_id=f"{turn_id}-claim", ts=time.time()
    )
    if claim.lease is None:
        raise RuntimeError(f"could not claim {turn_id}: {claim}")
    return claim.lease


# -- 1. single append --------------------------------------------------------------------------


def time_each(call: Callable[[Any], object], items: Sequence[Any]) -> list[int]:
    """Nanoseconds of ``call(item)`` for each item, the call alone."""
    clock = time.perf_counter_ns
    out = []
    for item in items:
        start = clock()
        call(item)
        out.append(clock() - start)
    return out


def percentile(samples: Sequence[int], q: float) -> float:
    ordered = sorted(samples)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


def bench_append(ledger: Ledger, client: redis.Redis, plan: Plan) -> list[Row]:
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
    for block in range(-1, plan.append_blocks):  # block -1 is the warm-up
        events = [tool_event(turn_id, next(numbers)) for _ in range(plan.append_ops)]
        payloads = [encode(event) for event in events]
        order = ("dres", "raw") if block % 2 == 0 else ("raw", "dres")
        for mode in order:
            gc.collect()
            ns = time_each(dres, events) if mode == "dres" else time_each(raw, payloads)
            if block >= 0:
                p50s[mode].append(statistics.median(ns) / 1000)
                p99s[mode].append(percentile(ns, 0.99) / 1000)
    sizes = sorted({len(p) for p in payloads})
    extra = {"blocks": plan.append_blocks, "ops_per_block": plan.append_ops, "payload_bytes": sizes}
    return [
        Row("append p50", "us", p50s["dres"], p50s["raw"], APPEND_TARGET, extra, number="1"),
        Row("append p99", "us", p99s["dres"], p99s["raw"], None, extra, number="1"),
    ]


# -- 2. one tool call's recording ----------------------------------------------------------------

TOOL = "bench_write"


@dataclass(frozen=True)
class CallData:
    """What the executor has in hand before it records a call: validated input, signature, and
    (after the tool ran) the JSON-ready result."""

    input: dict[str, Any]
    signature: str
    result: dict[str, Any]


#: filler lengths of (input, result) that make each tool event ``PAYLOAD_BYTES`` long
_CALL_PADS: dict[str, int] = {}


def _call_data(n: int, pad_in: int, pad_out: int) -> CallData:
    tool_input = {"ticket": f"T-{n:09d}", "note": _filler(pad_in)}
    return CallData(tool_input, input_signature(tool_input), {"ok": True, "log": _filler(pad_out)})


def call_data(recorder: Recorder, n: int) -> CallData:
    if not _CALL_PADS:
        bare = _call_data(0, 0, 0)
        start = recorder.make(
            ToolStart,
            call_id="call_" + "0" * 32,
            tool=TOOL,
            input=bare.input,
            signature=bare.signature,
        )
        done = recorder.make(ToolDone, call_id="call_" + "0" * 32, tool=TOOL, result=bare.result)
        _CALL_PADS["in"] = max(0, PAYLOAD_BYTES - len(encode(start)))
        _CALL_PADS["out"] = max(0, PAYLOAD_BYTES - len(encode(done)))
    return _call_data(n, _CALL_PADS["in"], _CALL_PADS["out"])


def record_call(recorder: Recorder, guard: DeferSignals, data: CallData) -> None:
    """What ``ToolExecutor._run`` does around ``spec.invoke``, with the tool's work taken out."""
    call_id = recorder.ids.new("call")
    with guard:
        recorder.record(
            ToolStart,
            call_id=call_id,
            tool=TOOL,
            input=data.input,
            signature=data.signature,
            read_only=False,
        )
        done = [recorder.make(ToolDone, call_id=call_id, tool=TOOL, result=data.result)]
        recorder.record_many(done)


class _NoRedis:
    """Stands in for ``redis.Redis``: every XADD lands at once, so what is left is dres's CPU."""

    def register_script(self, script: str) -> None:
        return None

    def xadd(self, *args: Any, **kwargs: Any) -> bytes:
        return b"1-1"


def _median_us(call: Callable[[], object], ops: int) -> float:
    clock = time.perf_counter_ns
    samples = []
    for _ in range(ops):
        start = clock()
        call()
        samples.append(clock() - start)
    return statistics.median(samples) / 1000


def recording_breakdown(ops: int) -> dict[str, float]:
    """Median microseconds of the parts of one call's recording, with no Redis round trip."""
    ledger = Ledger(_NoRedis())  # type: ignore[arg-type]
    lease = Lease("bench-cpu", RUN_ID, epoch=1, chunk=0)
    recorder = Recorder(ledger, RunContext(lease), SystemClock(), RandomIds(), [])
    guard = DeferSignals()
    guard.arm()
    data = call_data(recorder, 0)

    def make_start() -> ToolStart:
        return recorder.make(
            ToolStart, call_id="call_x", tool=TOOL, input=data.input,
            signature=data.signature, read_only=False,
        )  # fmt: skip

    def make_done() -> ToolDone:
        return recorder.make(ToolDone, call_id="call_x", tool=TOOL, result=data.result)

    def guarded() -> None:
        with guard:
            pass

    start, done = make_start(), make_done()
    parts: dict[str, Callable[[], object]] = {
        "whole recording, XADD stubbed": lambda: record_call(recorder, guard, data),
        "call id (RandomIds.new)": lambda: recorder.ids.new("call"),
        "DeferSignals enter+exit": guarded,
        "Recorder.make ToolStart (its id, ts, pydantic)": make_start,
        "Recorder.make ToolDone (its id, ts, pydantic)": make_done,
        "encode both (codec.encode)": lambda: (encode(start), encode(done)),
        "Ledger.append x2, XADD stubbed": lambda: (
            ledger.append(start, lease=lease),
            ledger.append(done, lease=lease),
        ),
    }
    out = {}
    for name, call in parts.items():
        call()
        recorder.events = []
        out[name] = _median_us(call, ops)
    return out


def bench_tool_call(ledger: Ledger, client: redis.Redis, plan: Plan) -> list[Row]:
    turn_id = "bench-tool-call"
    lease = open_turn(ledger, turn_id)
    recorder = Recorder(ledger, RunContext(lease), SystemClock(), RandomIds(), [])
    shadow = Recorder(ledger, RunContext(lease), SystemClock(), RandomIds(), [])
    guard = DeferSignals()
    guard.arm()
    raw_key = "bench:raw-tool-call"
    client.delete(raw_key)
    numbers = itertools.count()

    def dres(data: CallData) -> object:
        record_call(recorder, guard, data)
        return None

    def raw(pair: tuple[str, str]) -> object:
        client.xadd(raw_key, {FIELD: pair[0]})
        return client.xadd(raw_key, {FIELD: pair[1]})

    p50s: dict[str, list[float]] = {"dres": [], "raw": []}
    p99s: dict[str, list[float]] = {"dres": [], "raw": []}
    means: dict[str, list[float]] = {"dres": [], "raw": []}
    for block in range(-1, plan.tool_blocks):  # block -1 is the warm-up
        calls = [call_data(recorder, next(numbers)) for _ in range(plan.tool_ops)]
        payloads = []
        for data in calls:  # the raw side's payloads: the same events, built untimed
            call_id = shadow.ids.new("call")
            start = shadow.make(
                ToolStart,
                call_id=call_id,
                tool=TOOL,
                input=data.input,
                signature=data.signature,
                read_only=False,
            )
            done = shadow.make(ToolDone, call_id=call_id, tool=TOOL, result=data.result)
            payloads.append((encode(start), encode(done)))
        recorder.events = []
        order = ("dres", "raw") if block % 2 == 0 else ("raw", "dres")
        for mode in order:
            gc.collect()
            ns = time_each(dres, calls) if mode == "dres" else time_each(raw, payloads)
            if block >= 0:
                p50s[mode].append(statistics.median(ns) / 1000)
                p99s[mode].append(percentile(ns, 0.99) / 1000)
                means[mode].append(statistics.fmean(ns) / 1000)
    sizes = sorted({len(p) for pair in payloads for p in pair})
    written = client.xlen(keys.turn_events(turn_id))
    expected = 2 + 2 * plan.tool_ops * (plan.tool_blocks + 1)
    if written != expected:
        raise RuntimeError(f"tool-call row: {written} entries recorded, expected {expected}")
    extra = {
        "blocks": plan.tool_blocks,
        "calls_per_block": plan.tool_ops,
        "payload_bytes": sizes,
        "dres_mean_us": summary(means["dres"]),
        "raw_mean_us": summary(means["raw"]),
        "cpu_breakdown_us": recording_breakdown(plan.tool_ops * 8),
    }
    client.delete(*keys.turn_keys(turn_id), raw_key)
    base = "two raw XADDs"
    return [
        Row(
            "tool call p50",
            "us",
            p50s["dres"],
            p50s["raw"],
            TOOL_CALL_TARGET,
            extra,
            number="2",
            baseline=base,
        ),
        Row(
            "tool call p99", "us", p99s["dres"], p99s["raw"], None, extra, number="2", baseline=base
        ),
    ]


# -- 2. journal rebuild ------------------------------------------------------------------------


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


# -- report ------------------------------------------------------------------------------------


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def environment(client: redis.Redis) -> dict[str, Any]:
    server = client.info("server")
    fsync = client.config_get("appendfsync").get("appendfsync", "?")
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "redis_server": server.get("redis_version", "?"),
        "appendfsync": fsync,
        "redis_py": redis.__version__,
        "hiredis": _version("hiredis"),
        "hiredis_parser": bool(redis.utils.HIREDIS_AVAILABLE),
        "pydantic": _version("pydantic"),
        "pydantic_core": _version("pydantic-core"),
        "cpu_count": os.cpu_count(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }


def _num(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.1f}" if value >= 100 else f"{value:.2f}"


def _cell(values: Sequence[float]) -> str:
    if not values:
        return "-"
    return f"{_num(statistics.median(values))} [{_num(min(values))}..{_num(max(values))}]"


def ratio_cell(row: Row) -> str:
    if row.absolute:
        return "-"
    ratios = row.pair_ratios
    spread = f" [{min(ratios):.2f}..{max(ratios):.2f}]" if ratios else " (unpaired)"
    return f"{row.ratio:.2f}{spread}"


def table_lines(rows: Sequence[Row]) -> list[str]:
    """The rows as an aligned text table (with the row numbers when the rows carry them)."""
    numbered = any(row.number for row in rows)
    head = ("row", "dres", "baseline", "ratio", "target", "verdict", "which is faster")
    table = [("#", *head) if numbered else head]
    for row in rows:
        cells = (
            f"{row.name} ({row.unit})",
            _cell(row.dres),
            _cell(row.raw),
            ratio_cell(row),
            row.target_text,
            row.verdict,
            row.wording,
        )
        table.append((row.number, *cells) if numbered else cells)
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in table
    ]
    return [lines[0], "-" * max(len(line) for line in lines), *lines[1:]]


def render(env: dict[str, Any], rows: Sequence[Row], mode: str) -> str:
    parser = "hiredis parser" if env["hiredis_parser"] else "pure-Python parser"
    header = [
        f"dres ledger benchmark ({mode})  {env['date']}",
        f"python {env['python']} on {env['platform']}, cpu_count {env['cpu_count']}, "
        f"loadavg {env['loadavg_start']} -> {env['loadavg_end']}",
        f"redis-server {env['redis_server']} (AOF, appendfsync {env['appendfsync']}), "
        f"redis-py {env['redis_py']}, hiredis {env['hiredis']} ({parser}), "
        f"pydantic {env['pydantic']} (core {env['pydantic_core']})",
        "figures: median [min..max] over blocks/repeats; ratio = median of the per-pair ratios "
        "dres / raw [their range]",
        "",
    ]
    return "\n".join([*header, *table_lines(rows)])


def misses(rows: Sequence[Row]) -> list[str]:
    return [
        f"{row.name} median {_num(statistics.median(row.dres))} {row.unit}, not {row.target_text}"
        if row.absolute
        else f"{row.name} ratio {row.ratio:.2f} > {row.target}"
        for row in rows
        if row.verdict == "misses"
    ]


def measure(client: redis.Redis, plan: Plan) -> list[Row]:
    """Rows 1-3 on a running server (``client``: hiredis parser, bytes replies)."""
    ledger = Ledger(client)
    rows = bench_append(ledger, client, plan)
    if plan.tool_blocks:
        rows += bench_tool_call(ledger, client, plan)
    for size, repeats in plan.rebuild:
        rows.append(bench_rebuild(ledger, client, size, repeats))
    return rows


def run(plan: Plan) -> tuple[dict[str, Any], list[Row]]:
    with RedisServer(appendfsync="everysec") as server:
        client = redis.Redis(port=server.port)
        try:
            env = environment(client)
            rows = measure(client, plan)
            env["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        finally:
            client.close()
    return env, rows


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.ledger_bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="few repeats: a smoke test")
    parser.add_argument("--json", metavar="PATH", type=Path, help="also write results as JSON")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    plan, mode = (QUICK, "quick") if args.quick else (FULL, "full")
    started = time.monotonic()
    env, rows = run(plan)
    env["elapsed_s"] = round(time.monotonic() - started, 1)
    print(render(env, rows, mode))
    missed = misses(rows)
    print()
    print(f"MISSES: {'; '.join(missed)}" if missed else "all targets met")
    print(f"elapsed {env['elapsed_s']} s")
    if args.json:
        result = {"mode": mode, "plan": asdict(plan), "environment": env, "misses": missed}
        result["rows"] = [row.as_dict() for row in rows]
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
