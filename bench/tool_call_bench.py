"""Row 2 of ``make bench``: one tool call's recording, as the executor does it, beside two raw
XADDs (``bench.ledger_bench`` runs it; its docstring says how), and dres's own CPU per call with
Redis stubbed out. Row 2g (issue 37): the same row measured in a subprocess patched for gevent
(``bench.gevent_tool_call``), read back here.
"""

from __future__ import annotations

import gc
import itertools
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from bench.harness import ROOT, Row, percentile, summary, time_each
from bench.ledger_turns import PAYLOAD_BYTES, RUN_ID, filler, open_turn
from ledger import keys
from ledger.codec import FIELD, encode
from ledger.events import ToolDone, ToolStart
from ledger.lease import Lease
from ledger.signature import input_signature
from ledger.store import Ledger
from worker.base.clock import RandomIds, SystemClock
from worker.engine.recorder import Recorder, RunContext
from worker.engine.tools.guard import DeferSignals, Interrupts

#: issue 27 restated it for either host kind (was 1.3, then 1.2 on the AMD host)
TOOL_CALL_TARGET = 1.4
#: issue 37: the row restated for both pools, measured in a process patched for gevent (2g)
GEVENT_TOOL_CALL_TARGET = 1.4
#: seconds row 2g's subprocess may take (its blocks, and its start: imports, gevent's patches)
GEVENT_ROW_TIMEOUT_S = 600.0
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
    tool_input = {"ticket": f"T-{n:09d}", "note": filler(pad_in)}
    return CallData(tool_input, input_signature(tool_input), {"ok": True, "log": filler(pad_out)})


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


def record_call(recorder: Recorder, guard: Interrupts, data: CallData) -> None:
    """What ``ToolExecutor._run`` does around ``spec.invoke``, with the tool's work taken out: a
    write's ``tool_start`` only while the turn's Stop flag is unset (``ToolExecutor._start``:
    ``lua/append.lua`` with the flag as a third key), its ``tool_done`` one fenced XADD."""
    call_id = recorder.ids.new("call")
    with guard:
        recorder.record_unless_stopped(
            ToolStart,
            call_id=call_id,
            tool=TOOL,
            input=data.input,
            signature=data.signature,
            read_only=False,
        )
        done = [recorder.make(ToolDone, call_id=call_id, tool=TOOL, result=data.result)]
        recorder.record_many(done)


class _NoScript:
    """A registered script that lands at once (``Script``'s ``sha`` and call)."""

    sha = "0" * 40

    def __call__(self, keys: Any = None, args: Any = None) -> int:
        return 1


class _NoRedis:
    """Stands in for ``redis.Redis``: every XADD and script lands at once, so what is left is
    dres's CPU."""

    def register_script(self, script: str) -> _NoScript:
        return _NoScript()

    def execute_command(self, *args: Any, **kwargs: Any) -> bytes:
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
        "whole recording, Redis stubbed": lambda: record_call(recorder, guard, data),
        "call id (RandomIds.new)": lambda: recorder.ids.new("call"),
        "DeferSignals enter+exit": guarded,
        "Recorder.make ToolStart (its id, ts, pydantic)": make_start,
        "Recorder.make ToolDone (its id, ts, pydantic)": make_done,
        "encode both (codec.encode)": lambda: (encode(start), encode(done)),
        "Ledger.append_many(start, unless_stopped) + append(done), Redis stubbed": lambda: (
            ledger.append_many([start], lease=lease, unless_stopped=True),
            ledger.append(done, lease=lease),
        ),
    }
    out = {}
    for name, call in parts.items():
        call()
        recorder.events = []
        out[name] = _median_us(call, ops)
    return out


def bench_tool_call(
    ledger: Ledger,
    client: redis.Redis,
    blocks: int,
    ops: int,
    guard: Interrupts | None = None,
    breakdown: bool = True,
) -> list[Row]:
    """Row 2: ``blocks`` alternating blocks of ``ops`` recorded calls on each side; ``guard``:
    the run's interrupts (prefork's ``DeferSignals`` unless given), armed here; ``breakdown``:
    also time dres's CPU per call with Redis stubbed out."""
    turn_id = "bench-tool-call"
    lease = open_turn(ledger, turn_id)
    recorder = Recorder(ledger, RunContext(lease), SystemClock(), RandomIds(), [])
    shadow = Recorder(ledger, RunContext(lease), SystemClock(), RandomIds(), [])
    guard = guard or DeferSignals()
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
    for block in range(-1, blocks):  # block -1 is the warm-up
        calls = [call_data(recorder, next(numbers)) for _ in range(ops)]
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
    expected = 2 + 2 * ops * (blocks + 1)
    if written != expected:
        raise RuntimeError(f"tool-call row: {written} entries recorded, expected {expected}")
    extra: dict[str, Any] = {
        "blocks": blocks,
        "calls_per_block": ops,
        "payload_bytes": sizes,
        "dres_mean_us": summary(means["dres"]),
        "raw_mean_us": summary(means["raw"]),
    }
    if breakdown:
        extra["cpu_breakdown_us"] = recording_breakdown(ops * 8)
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


def gevent_tool_call_rows(host: str, port: int, blocks: int, ops: int) -> list[Row]:
    """Row 2g: row 2 measured by ``python -m bench.gevent_tool_call`` against the Redis at
    ``host:port`` (a process of its own: this one is not patched for gevent, and must not be)."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.gevent_tool_call", host, str(port), str(blocks), str(ops)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=GEVENT_ROW_TIMEOUT_S,
    )
    if done.returncode:
        raise RuntimeError(f"row 2g's process exited {done.returncode}:\n{done.stderr[-3000:]}")
    rows = [Row(**fields) for fields in json.loads(done.stdout.splitlines()[-1])]
    where = "in a process patched for gevent, in a greenlet"
    base = "two raw XADDs, in the same patched process"
    for row in rows:
        row.name = f"{row.name}, {where}"
        row.number, row.baseline = "2g", base
        row.target = GEVENT_TOOL_CALL_TARGET if row.target is not None else None
    return rows
