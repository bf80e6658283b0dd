"""Row T1 of ``make bench`` (issue 39): a tool call's recording with tracing on beside it off.

The call is row 2's (``bench.tool_call_bench.record_call``: ``tool_start``, the tool, ``tool_done``,
two fenced XADDs on a private redis-server) inside the executor's tracing hooks: the
``execute_tool`` span opened around it and settled after it (``Tracer.tool``, ``settled``),
within a run's span. "Off" is the tracer dres uses when no ``OTEL_*`` endpoint is named (``OFF``);
"on" is the OpenTelemetry SDK's, built from the environment as a worker builds it
(``worker.edges.tracing.from_environment``), its batch processor exporting over OTLP/HTTP to a
real receiver on loopback (``rigs.otlp``) in a process of its own, as a collector is: in the
bench's process its decoding of every batch took the GIL from the calls it measures. Blocks
alternate (on, off, off, on, ...); the row's
ratio is on / off, medians with their range; the spans the receiver decoded are counted, so a
run that exported nothing fails instead of measuring nothing.

Run alone: ``.venv/bin/python -m bench.tracing_bench [--quick]`` (or ``python -m bench --only
tracing``).
"""

from __future__ import annotations

import gc
import itertools
import os
import statistics
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import redis

from bench.apart import served_apart
from bench.harness import Group, Row, percentile, private_redis, time_each
from bench.ledger_turns import open_turn
from bench.tool_call_bench import TOOL, CallData, call_data, record_call
from ledger import keys
from ledger.store import Ledger
from rigs.otlp import otlp_receiver
from worker.base.clock import RandomIds, SystemClock
from worker.base.tracing import OFF, Settled, Tracer
from worker.edges.tracing import OtelTracer, from_environment
from worker.engine.recorder import Recorder, RunContext
from worker.engine.tools.guard import DeferSignals

TURN_ID = "bench-tracing"


@dataclass(frozen=True)
class TracingPlan:
    blocks: int
    ops: int


FULL = TracingPlan(blocks=12, ops=400)
QUICK = TracingPlan(blocks=2, ops=100)


@contextmanager
def exporting_to(url: str) -> Iterator[OtelTracer]:
    """The SDK's tracer, as ``OTEL_EXPORTER_OTLP_ENDPOINT=url`` gives it to a worker."""
    saved = {name: os.environ.get(name) for name in ("OTEL_EXPORTER_OTLP_ENDPOINT",)}
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = url
    try:
        tracer = from_environment()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    assert isinstance(tracer, OtelTracer)
    try:
        yield tracer
    finally:
        tracer.provider.shutdown()


def _serve(conn: Connection) -> None:
    """The receiver's process: its URL sent, then the count of spans it decoded on each ask."""
    with otlp_receiver() as receiver:
        conn.send(receiver.url)
        while conn.recv() == "count":
            conn.send(len(receiver.received()))


def receiver_apart() -> AbstractContextManager[tuple[str, Callable[[], int]]]:
    """``rigs.otlp``'s receiver in a process of its own: (its URL, how many spans it has
    decoded). Stopped whatever happens."""
    return served_apart(_serve, "otlp-receiver", "the OTLP receiver")


def measure(plan: TracingPlan) -> tuple[list[Row], dict[str, Any]]:
    with private_redis() as server, receiver_apart() as (url, exported_spans):
        client = redis.Redis(port=server.port)
        ledger = Ledger(client)
        lease = open_turn(ledger, TURN_ID)
        recorder = Recorder(ledger, RunContext(lease), SystemClock(), RandomIds(), [])
        guard = DeferSignals()
        guard.arm()
        numbers = itertools.count()
        p50s: dict[str, list[float]] = {"on": [], "off": []}
        p99s: dict[str, list[float]] = {"on": [], "off": []}
        with exporting_to(url) as traced:
            tracers: dict[str, Tracer] = {"on": traced, "off": OFF}

            def calling(tracer: Tracer) -> Any:
                def call(data: CallData) -> None:
                    with tracer.tool(TOOL) as span:
                        record_call(recorder, guard, data)
                        span.settled(Settled("call", False, False, None, data.input, data.result))

                return call

            for block in range(-1, plan.blocks):  # block -1 is the warm-up
                calls = [call_data(recorder, next(numbers)) for _ in range(plan.ops)]
                recorder.events = []
                for mode in ("on", "off") if block % 2 == 0 else ("off", "on"):
                    tracer = tracers[mode]
                    gc.collect()
                    with tracer.run(trace="", turn_id=TURN_ID, run_id="r", chunk=0, cause="first"):
                        ns = time_each(calling(tracer), calls)
                    if block >= 0:
                        p50s[mode].append(statistics.median(ns) / 1000)
                        p99s[mode].append(percentile(ns, 0.99) / 1000)
            traced.provider.force_flush()
        exported = exported_spans()
        client.delete(*keys.turn_keys(TURN_ID))
        client.close()
    expected = (plan.blocks + 1) * plan.ops
    if exported < expected:
        raise RuntimeError(f"tracing row: {exported} spans exported, expected {expected}+")
    info = {"blocks": plan.blocks, "calls_per_block": plan.ops, "spans_exported": exported}
    base = "the same call, tracing off"
    return [
        Row(
            "tool call p50, tracing on",
            "us",
            p50s["on"],
            p50s["off"],
            None,
            info,
            number="T1",
            baseline=base,
        ),
        Row(
            "tool call p99, tracing on",
            "us",
            p99s["on"],
            p99s["off"],
            None,
            info,
            number="T1",
            baseline=base,
        ),
    ], info


GROUP = Group(
    "tracing",
    "row T1: a tool call with tracing on (OTLP/HTTP to a local receiver) beside it off (issue 39)",
    measure, FULL, QUICK, __doc__,
)  # fmt: skip
main = GROUP.main


if __name__ == "__main__":
    sys.exit(main())
