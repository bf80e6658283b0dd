"""Row T1's receiver runs apart from the calls it times (issue 46): a collector is another
process, and its decoding in the bench's own process took the GIL from them."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("opentelemetry.sdk")

from bench.tracing_bench import exporting_to, receiver_apart
from worker.base.tracing import Settled


def test_row_t1s_spans_reach_a_receiver_in_a_process_of_its_own() -> None:
    threads_before = {t.ident for t in threading.enumerate()}
    with receiver_apart() as (url, exported), exporting_to(url) as tracer:
        with tracer.run(trace="", turn_id="t", run_id="r", chunk=0, cause="first"):
            for _ in range(3):
                with tracer.tool("noop") as span:
                    span.settled(Settled("call", False, False, None, {}, {}))
        tracer.provider.force_flush()
        serving = [
            t.name
            for t in threading.enumerate()
            if t.ident not in threads_before
            and "serve_forever" in getattr(getattr(t, "_target", None), "__name__", "")
        ]
        assert exported() == 4  # three tool spans and their run's
    assert serving == [], "the receiver serves from a thread of this process"
