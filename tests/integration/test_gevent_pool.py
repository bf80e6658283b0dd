"""Many turns per process (docs/deploy.md): ``dres worker -P gevent -c N`` runs up to N chunks in
one process, each interrupted in its own greenlet, with every durability promise of prefork: the
soft limit (dres's own timer), the hard limit (Celery's), Stop while the provider is silent, the
SIGTERM hand-over, crash pickup, both layers, approvals, and tools from MCP servers and OpenAPI
documents. Each test starts its own ``dres worker -P gevent`` subprocesses on a real redis-server.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gevent_support import LONG, STOP_WITHIN_S, StartWorker, emailed, greenlets, sound
from sample_tools import effects

from rigs import (
    DIALECTS,
    DONE,
    FakeProvider,
    Reply,
    ended,
    fake_provider,
    having,
    of,
    send,
    show,
    slow_write,
    think,
    wait_for,
    wait_until,
)
from rigs.mcp_servers import calls, stdio_entry
from rigs.openapi_app import ApiServer, requests
from tests.support.suite import require_sdk
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server

#: the turns of one process at once
MANY = 50
#: seconds each of the many turns waits on its model before it streams
WAIT_S = 2.0


def streaming(to: str) -> dict[str, Any]:
    """A step that waits ``WAIT_S`` on the model, streams its text in deltas, then emails."""
    return {**send(to, "Hi"), "delay_s": WAIT_S, "chunk_chars": 4, "stream_delay_s": 0.01}


def late(step: dict[str, Any]) -> dict[str, Any]:
    """``step`` after a second's wait on the model."""
    return {**step, "delay_s": 1.0}


def test_fifty_turns_waiting_on_their_models_share_one_process(
    runtime: Runtime, start_worker: StartWorker, script: Callable[..., str]
) -> None:
    """50 turns, each waiting 2 s on its model, then streaming, then one email: they wait at
    once, so all of them end within a small multiple of one turn's time, and each email is sent
    once."""
    worker = greenlets(start_worker, **LONG)
    assert worker.children() == [], "one process: no pool children"
    began = time.time()
    turns = [
        runtime.lifecycle.enqueue(f"email {n}", model=script([streaming(f"{n}@x.io"), DONE]))
        for n in range(MANY)
    ]

    ends = []
    for turn in turns:
        wait_for(runtime.ledger, turn.turn_id, ended(), timeout=30, what="the turn's end")
        events = sound(runtime, turn.turn_id)
        [end] = of(events, "turn_ended")
        assert end.status == "completed", show(events)
        assert len(of(events, "tool_done", tool="send_email")) == 1, show(events)
        ends.append(end.ts)

    took = max(ends) - began
    print(f"{MANY} turns of {WAIT_S} s each on one gevent worker: {took:.2f} s")
    assert took < 4 * WAIT_S, f"{took:.2f} s: the turns did not wait at once"
    assert emailed(runtime) == Counter({f"{n}@x.io": 1 for n in range(MANY)})


def test_dres_soft_limit_hands_chunks_over_under_gevent(
    runtime: Runtime, start_worker: StartWorker, script: Callable[..., str]
) -> None:
    """Celery's gevent pool has no soft limit: dres's own timer (1.5 s) ends each chunk, and
    each turn goes on in its next chunk and completes, each write once. Half the turns are in
    their model's wait at 1.5 s (cut there); the others are inside ``slow_write`` (its effect
    done, a second of work left): their soft limit waits for its ``tool_done``."""
    greenlets(
        start_worker,
        turns=20,
        DRES_SOFT_LIMIT_S="1.5",
        DRES_HARD_LIMIT_S="6",
        DRES_VISIBILITY_TIMEOUT_S="20",
    )
    # 1 s in the model, then 1 s more in it: cut at 1.5 s in the second wait
    waits = {f"{n}@x.io": [think(1.0), late(send(f"{n}@x.io", "Hi")), DONE] for n in range(10)}
    # 0.9 s in the model, then slow_write from about 0.9 s to 1.9 s: the limit lands inside it
    writes = {f"report-{n}": [think(0.9), slow_write(f"report-{n}"), DONE] for n in range(10)}
    turns = {
        name: runtime.lifecycle.enqueue(name, model=script(steps)).turn_id
        for name, steps in {**waits, **writes}.items()
    }

    for name, turn_id in turns.items():
        wait_for(runtime.ledger, turn_id, ended(), timeout=30, what="the turn's end")
        events = sound(runtime, turn_id)
        assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
        first, *_ = of(events, "run_started")
        [cut, *_] = of(events, "run_ended", reason="soft_limit")
        if name in waits:  # at 1.5 s, in the second model call's wait
            assert 1.4 < cut.ts - first.ts < 2.5, show(events)
            assert len(of(events, "tool_done", tool="send_email")) == 1, show(events)
        else:  # after the write's tool_done, never between its effect and its record
            [done] = of(events, "tool_done", tool="slow_write")
            assert done.run_id == first.run_id and not done.is_error, show(events)
            assert cut.ts >= done.ts and cut.run_id == first.run_id, show(events)
    assert emailed(runtime) == Counter(dict.fromkeys(waits, 1))
    assert Counter(row["label"] for row in effects(runtime.redis, "slow_write")) == Counter(
        dict.fromkeys(writes, 1)
    )


def test_celery_hard_limit_cuts_a_write_whose_soft_limit_waits_and_the_turn_goes_on(
    runtime: Runtime, start_worker: StartWorker, script: Callable[..., str]
) -> None:
    """The soft limit (0.3 s) waits for ``slow_write``'s ``tool_done``, which takes a second:
    Celery's hard limit (``gevent.Timeout``, 0.8 s) cuts the write first, as prefork's SIGKILL
    would. The run's lease runs out, the turn is taken over, and the write, left interrupted,
    is never run again."""
    greenlets(
        start_worker,
        turns=4,
        DRES_BG_SOFT_LIMIT_S="0.3",
        DRES_BG_HARD_LIMIT_S="0.8",
        DRES_VISIBILITY_TIMEOUT_S="20",
    )
    model = script([slow_write("cut"), DONE], "restart")
    turn_id = runtime.lifecycle.enqueue("write", mode="background", model=model).turn_id

    wait_for(runtime.ledger, turn_id, ended(), timeout=20, what="the turn's end")
    events = sound(runtime, turn_id)
    first = of(events, "run_started")[0].run_id
    assert not of(events, "tool_done", run_id=first), show(events)
    assert of(events, "run_ended", run_id=first)[0].reason != "soft_limit", show(events)
    assert [e.reason for e in of(events, "tool_blocked")] == ["interrupted"], show(events)
    assert [row["label"] for row in effects(runtime.redis, "slow_write")] == ["cut"]


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with fake_provider() as server:
        yield server


def test_stop_lands_within_two_seconds_while_the_provider_is_silent_and_others_stream(
    runtime: Runtime, start_worker: StartWorker, script: Callable[..., str], fake: FakeProvider
) -> None:
    """One turn's provider never sends a byte (its SDK waits on a socket, where only the
    greenlet's interrupt reaches it): Stop ends that turn within 2 s, while ten other turns of
    the same process go on streaming and complete."""
    dialect = DIALECTS[0]
    require_sdk(dialect.kind)
    fake.script(Reply(hang=True))
    # the SDK imported at the worker's start: an import in a chunk would hold every greenlet
    model = f"{dialect.kind}:fake-model"
    greenlets(start_worker, **dialect.env(fake.url), DRES_MODEL=model, **LONG)
    # 3 s of text each, in 60 deltas
    long = {"text": "word " * 48, "chunk_chars": 4, "stream_delay_s": 0.05}
    others = [
        runtime.lifecycle.enqueue(
            f"email {n}", model=script([{**send(f"{n}@x.io", "Hi"), **long}, DONE])
        ).turn_id
        for n in range(10)
    ]
    silent = runtime.lifecycle.enqueue("hello", model=model).turn_id
    fake.wait_requests(1)
    for turn_id in others:
        wait_for(runtime.ledger, turn_id, having("text"), what="the others' streams")

    asked = runtime.clock.now()
    assert runtime.lifecycle.stop(silent).ok
    events = wait_for(runtime.ledger, silent, ended(), timeout=10, what="the Stop")

    [end] = of(events, "turn_ended")
    print(f"Stop -> turn_ended: {(end.ts - asked) * 1000:.0f} ms")
    assert (end.status, end.code) == ("stopped", "cancelled"), show(events)
    assert end.ts - asked < STOP_WITHIN_S
    assert len(fake.received) == 1, "the SDK did not retry"
    for turn_id in others:
        events = wait_for(runtime.ledger, turn_id, ended("completed"), what="the others' ends")
        assert of(events, "turn_ended")[0].ts > end.ts, "it streamed on after the Stop"
    assert emailed(runtime) == Counter({f"{n}@x.io": 1 for n in range(10)})


def test_sigterm_hands_every_running_turn_to_another_worker(
    runtime: Runtime, start_worker: StartWorker, script: Callable[..., str]
) -> None:
    """Ten turns mid-step (a 20 s step) on the gevent worker that is told to stop: each hands
    over at once and completes on a second worker; the model that re-issues its email after
    the resume is blocked (one email each), and the first worker's warm shutdown succeeds."""
    leaving = greenlets(start_worker, turns=10, **LONG)
    names = [f"{n}@x.io" for n in range(10)]
    turns = [
        runtime.lifecycle.enqueue(
            f"email {name}", model=script([send(name, "Hi"), think(20), DONE], "restart")
        ).turn_id
        for name in names
    ]
    for turn_id in turns:
        wait_for(runtime.ledger, turn_id, having("model_start", 2), what="the long step")
    greenlets(start_worker, turns=10, **LONG)

    signalled = time.time()
    leaving.terminate()

    for turn_id in turns:
        wait_for(runtime.ledger, turn_id, ended(), timeout=30, what="the turn's end")
        events = sound(runtime, turn_id)
        assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
        # the running chunk hands over at once; a successor the leaving worker had already
        # taken (its message received before it stopped consuming) hands over as it starts
        first, *successors, last = of(events, "run_started")
        for run in (first, *successors):
            [handed] = of(events, "run_ended", run_id=run.run_id)
            assert handed.reason == "soft_limit" and "shutting down" in handed.detail, show(events)
        assert last.ts - signalled < 5, show(events)
        assert [e.reason for e in of(events, "tool_blocked")] == ["completed"], show(events)
    assert emailed(runtime) == Counter(dict.fromkeys(names, 1))
    assert leaving.process.wait(timeout=15) == 0, "the worker's warm shutdown failed"


def test_a_chunk_celery_terminates_mid_write_hands_over_after_its_tool_done(
    runtime: Runtime, start_worker: StartWorker, script: Callable[..., str]
) -> None:
    """Celery ends a running task (a revoke with ``terminate``; every running task once the
    broker connection is lost) by killing its greenlet wherever it is: dres's pool hands the
    run ``Shutdown`` instead, which waits for the write's ``tool_done``, and the turn goes on in
    its next chunk with the write blocked as completed (as prefork's SIGTERM to the child)."""
    greenlets(start_worker, turns=4, **LONG)
    model = script([slow_write("report"), DONE], "restart")
    turn_id = runtime.lifecycle.enqueue("write a report", model=model).turn_id
    events = wait_for(runtime.ledger, turn_id, having("tool_start"), what="the write")
    first = of(events, "run_started")[0].run_id

    runtime.app.control.revoke(f"{turn_id}:{first}", terminate=True)

    wait_for(runtime.ledger, turn_id, ended(), timeout=20, what="the turn's end")
    events = sound(runtime, turn_id)
    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    [done] = of(events, "tool_done", tool="slow_write")
    assert done.run_id == first and not done.is_error, show(events)
    [handed] = of(events, "run_ended", run_id=first)
    assert handed.reason == "soft_limit" and "shutting down" in handed.detail, show(events)
    assert [e.reason for e in of(events, "tool_blocked")] == ["completed"], show(events)
    assert len(effects(runtime.redis, "slow_write")) == 1


def test_sigkill_mid_write_then_a_new_worker_ends_every_turn_and_writes_nothing_twice(
    runtime: Runtime, start_worker: StartWorker, script: Callable[..., str]
) -> None:
    """Ten background turns are inside ``slow_write`` (its effect done, its record not) when
    the gevent worker is killed: a new worker takes them over once their leases run out, every
    turn ends, and no write runs twice (the interrupted-write guard)."""
    first = greenlets(start_worker, turns=10, **LONG)
    labels = [f"report-{n}" for n in range(10)]
    turns = [
        runtime.lifecycle.enqueue(
            label, mode="background", model=script([slow_write(label), DONE], "restart")
        ).turn_id
        for label in labels
    ]
    wait_until(lambda: len(effects(runtime.redis, "slow_write")) == 10, what="every effect")

    first.kill_group()
    greenlets(start_worker, turns=10, **LONG)

    for turn_id in turns:
        wait_for(runtime.ledger, turn_id, ended(), timeout=30, what="the turn's end")
        events = sound(runtime, turn_id)
        assert len(of(events, "run_started")) >= 2, show(events)
    written = Counter(row["label"] for row in effects(runtime.redis, "slow_write"))
    assert written == Counter(dict.fromkeys(labels, 1))


def test_an_approval_turn_waits_and_resumes_under_gevent(
    runtime: Runtime, start_worker: StartWorker, script: Callable[..., str]
) -> None:
    """A write that needs approval leaves the turn waiting (no greenlet holds it); once approved
    it runs once, with the approved input, and the turn completes."""
    greenlets(start_worker, turns=4, DRES_APPROVAL="writes", **LONG)
    turn_id = runtime.lifecycle.enqueue(
        "email ada", model=script([send("ada@x.io", "Hi"), DONE])
    ).turn_id
    events = wait_for(runtime.ledger, turn_id, having("run_ended", reason="waiting"))
    [request] = of(events, "approval_requested")
    assert runtime.ledger.meta(turn_id).status == "waiting"
    assert emailed(runtime) == Counter()

    decided = runtime.lifecycle.decide(
        turn_id, request.approval_id, "approve", request.signature, by="ops"
    )

    assert decided.ok, decided
    wait_for(runtime.ledger, turn_id, ended(), what="the turn's end")
    events = sound(runtime, turn_id)
    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    assert [e.cause for e in of(events, "run_started")] == ["first", "approval"], show(events)
    assert emailed(runtime) == Counter({"ada@x.io": 1})


def test_tools_from_an_mcp_server_and_an_openapi_document_resume_under_gevent(
    runtime: Runtime, start_worker: StartWorker, script: Callable[..., str], tmp_path: Path
) -> None:
    """A turn calls a stdio MCP server's read and write and an HTTP API's GET and POST (its
    OpenAPI document's) on a gevent worker; the soft limit cuts it in the pause after them, and
    the resumed chunk, whose model re-issues everything, runs the reads again and blocks the
    writes."""
    mcp_log, api_log = tmp_path / "mcp.jsonl", tmp_path / "api.jsonl"
    api = ApiServer(api_log).start()
    try:
        greenlets(
            start_worker,
            turns=4,
            # room for the first chunk's MCP server start and all four calls on a loaded CI
            # machine (4 s once cut it before the write): the cut must land in the pause
            DRES_SOFT_LIMIT_S="8",
            DRES_HARD_LIMIT_S="20",
            DRES_VISIBILITY_TIMEOUT_S="30",
            DRES_MCP_SERVERS=json.dumps({"t": stdio_entry(mcp_log, timeout_s=5)}),
            DRES_OPENAPI=json.dumps({"api": api.entry(timeout_s=5)}),
        )
        called = [
            ("t__lookup", {"key": "a"}),
            ("t__send", {"to": "ada", "text": "hi"}),
            ("api__get_item", {"item_id": "x"}),
            ("api__create_item", {"name": "a"}),
        ]
        first = {"tool_calls": [{"name": n, "input": d} for n, d in called]}
        pause = {"delay_s": 20, "tool_calls": [{"name": "async_lookup", "input": {"key": "p"}}]}
        model = script([first, pause, DONE], on_resume="restart")
        turn_id = runtime.lifecycle.enqueue("Do it", model=model).turn_id

        events = wait_for(runtime.ledger, turn_id, ended(), timeout=40, what="the turn's end")
    finally:
        api.stop()

    assert of(events, "turn_ended")[-1].status == "completed", show(events)
    assert of(events, "run_ended")[0].reason == "soft_limit", show(events)
    assert [c["tool"] for c in calls(mcp_log)] == ["lookup", "send", "lookup"]
    assert [r["operation"] for r in requests(api_log)] == ["get_item", "create_item", "get_item"]
    blocked = {e.tool: e.reason for e in of(events, "tool_blocked")}
    assert blocked == {"t__send": "completed", "api__create_item": "completed"}, show(events)
