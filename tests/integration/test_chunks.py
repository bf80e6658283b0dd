"""Self-chaining on a real prefork worker (docs/semantics.md): a turn longer than its soft limit."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sample_tools import effects

from rigs import DONE, WorkerProcess, ended, of, send, show, slow_write, think, wait_for
from worker.demo_tools import outbox
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server

#: seconds: longer than the 0.5 s soft limit, so the step's first attempt ends its chunk
PAST_THE_LIMIT_S = 0.8


def test_a_turn_longer_than_three_soft_limits_self_chains_one_run_per_chunk_to_completion(
    runtime: Runtime, worker: WorkerProcess, script: Callable[..., str]
) -> None:
    """Each chunk is one run; the restart-mode model's repeats are blocked; each email sent once."""
    steps = [
        send("a@x.io", "A"),
        think(PAST_THE_LIMIT_S),
        send("b@x.io", "B"),
        think(PAST_THE_LIMIT_S),
        send("c@x.io", "C"),
        think(PAST_THE_LIMIT_S),
        DONE,
    ]
    model = script(steps, on_resume="restart")
    turn = runtime.lifecycle.enqueue("email a, b and c", model=model)

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=20, what="turn end")

    started = of(events, "run_started")
    assert [e.chunk for e in started] == [0, 1, 2, 3], show(events)
    assert [e.cause for e in started] == ["first", "next_chunk", "next_chunk", "next_chunk"]
    run_of_chunk = {e.chunk: e.run_id for e in started}
    assert len(set(run_of_chunk.values())) == 4, "every chunk is a run of its own"
    assert all(e.run_id == run_of_chunk[e.chunk] for e in events[1:]), "one run per chunk"
    assert [e.reason for e in of(events, "run_ended")] == [
        "soft_limit",
        "soft_limit",
        "soft_limit",
        "completed",
    ]
    assert [e.status for e in of(events, "turn_ended")] == ["completed"]

    blocked = of(events, "tool_blocked")
    assert {(e.tool, e.reason) for e in blocked} == {("send_email", "completed")}
    assert [e.chunk for e in blocked] == [1, 2, 2, 3, 3, 3], "each re-issued email is blocked"
    done = of(events, "tool_done", tool="send_email")
    assert len(done) == 3 and all(not e.is_error for e in done)
    assert [m["subject"] for m in outbox(runtime.redis)] == ["A", "B", "C"]

    meta = runtime.ledger.meta(turn.turn_id)
    assert (meta.status, meta.runs, meta.chunk) == ("completed", 4, 3)

    # Measured, not asserted: soft limit of chunk n -> first model call of chunk n + 1.
    limits = of(events, "run_ended", reason="soft_limit")
    for limit in limits:
        first_call = next(e for e in of(events, "model_start") if e.chunk == limit.chunk + 1)
        gap_ms = (first_call.ts - limit.ts) * 1000
        print(f"soft limit of chunk {limit.chunk} -> next model_start: {gap_ms:.1f} ms")


def test_a_soft_limit_during_a_write_waits_for_its_tool_done_then_chains(
    runtime: Runtime, worker: WorkerProcess, script: Callable[..., str]
) -> None:
    """docs/semantics.md on a real worker: the 1 s write outlives the 0.5 s limit and is
    recorded."""
    model = script([slow_write("report"), DONE], on_resume="restart")
    turn = runtime.lifecycle.enqueue("write the report", model=model)

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=10, what="turn end")

    chunk0 = [e.type for e in events if e.chunk == 0]
    assert chunk0[-3:] == ["tool_start", "tool_done", "run_ended"], show(events)
    assert of(events, "run_ended")[0].reason == "soft_limit"
    [done] = of(events, "tool_done", tool="slow_write")
    assert done.result == {"written": "report"} and not done.is_error
    [blocked] = of(events, "tool_blocked")
    assert (blocked.chunk, blocked.tool, blocked.reason) == (1, "slow_write", "completed")
    assert len(effects(runtime.redis, "slow_write")) == 1
    assert [e.status for e in of(events, "turn_ended")] == ["completed"]
