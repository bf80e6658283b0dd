"""Turns on real prefork workers with the ledger on a three-master Redis Cluster (issue 16).

The ledger is ``DRES_REDIS_CLUSTER=1`` on the session's cluster, Celery's broker the session's
plain redis-server (``tests/cluster/conftest.py``). A turn's keys share its ``{turn_id}`` hash
tag, so each turn lives on one master and different turns on different masters; what spans turns
(the reaper's index, conversation lists) is one key each, written with single-key commands.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Callable

import pytest
from sample_tools import effects

from chaos.invariants import (
    each_run_started_once,
    no_fenced_out_events,
    nothing_after_turn_ended,
    runs_closed,
)
from ledger import keys
from ledger.codec import Envelope
from rigs import (
    DONE,
    WorkerProcess,
    busy,
    ended,
    having,
    of,
    send,
    show,
    slow_write,
    think,
    wait_for,
    wait_until,
)
from rigs.redis_cluster import LocalCluster
from worker.demo_tools import outbox
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server

#: turns enqueued at most while looking for some on every master
MAX_SPREAD_TURNS = 60
#: turns each master must hold
PER_MASTER = 2


def well_formed(envelopes: list[Envelope]) -> list[str]:
    """What docs/events.md asks of every turn's stream (the chaos runner's checks)."""
    events = [e.event for e in envelopes]
    return [
        *nothing_after_turn_ended(envelopes),
        *runs_closed(envelopes),
        *each_run_started_once(events),
        *no_fenced_out_events(envelopes),
    ]


def test_a_self_chained_turn_blocks_its_duplicate_write_with_the_ledger_on_a_cluster(
    runtime: Runtime, worker: WorkerProcess, script: Callable[..., str]
) -> None:
    """The demo's story on a cluster: the first chunk sends, hits its soft limit and chains the
    next, whose model re-issues the send; the journal blocks it and one email goes out."""
    model = script([send("a@x.io", "Hi"), think(1.5), DONE], on_resume="restart")
    turn = runtime.lifecycle.enqueue("email a", model=model)

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=30, what="turn end")

    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    runs = of(events, "run_started")
    assert [r.chunk for r in runs] == list(range(len(runs))) and len(runs) >= 2, show(events)
    assert {r.cause for r in runs[1:]} == {"next_chunk"}, show(events)
    [sent] = of(events, "tool_done", tool="send_email")
    blocked = of(events, "tool_blocked")
    assert {(b.tool, b.reason) for b in blocked} == {("send_email", "completed")}, show(events)
    assert min(b.chunk for b in blocked) > sent.chunk, "the duplicate came in a later chunk"
    assert [m["subject"] for m in outbox(runtime.redis)] == ["Hi"]
    assert well_formed(runtime.ledger.read_turn(turn.turn_id)) == []
    assert runtime.ledger.meta(turn.turn_id).status == "completed"


def test_turns_spread_over_all_three_masters_and_each_completes(
    runtime: Runtime,
    redis_cluster: LocalCluster,
    start_worker: Callable[..., WorkerProcess],
    script: Callable[..., str],
) -> None:
    """Turns land on the master of their ``{turn_id}`` slot; one conversation's turns on
    several masters still make one list, and the reaper's index (one key) sees them all."""
    start_worker(concurrency=2)
    model = script([DONE])
    per_master: Counter[int] = Counter()
    turns: list[str] = []
    while min(per_master[i] for i in range(3)) < PER_MASTER and len(turns) < MAX_SPREAD_TURNS:
        turn_id = runtime.lifecycle.enqueue("hi", conversation_id="c-spread", model=model).turn_id
        turns.append(turn_id)
        per_master[redis_cluster.turn_holder(turn_id)] += 1
    assert all(per_master[i] >= PER_MASTER for i in range(3)), per_master

    for turn_id in turns:
        events = wait_for(runtime.ledger, turn_id, ended(), timeout=30, what=f"{turn_id} end")
        assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
        holder = redis_cluster.turn_holder(turn_id)
        with redis_cluster.node_client(holder) as node:  # every key of the turn on one master
            assert node.exists(keys.turn_meta(turn_id), keys.turn_events(turn_id)) == 2
    listed = runtime.redis.lrange(keys.conversation_turns("c-spread"), 0, -1)
    assert [t.decode() for t in listed] == turns
    wait_until(
        lambda: runtime.redis.zcard(keys.active_turns()) == 0,
        timeout=10,
        what="every ended turn left the reaper's index",
    )


def test_the_reaper_takes_over_a_crashed_background_run_with_the_ledger_on_a_cluster(
    runtime: Runtime, worker: WorkerProcess, script: Callable[..., str]
) -> None:
    model = script([slow_write("report"), DONE], on_resume="restart")
    turn = runtime.lifecycle.enqueue("write the report", mode="background", model=model)
    wait_for(runtime.ledger, turn.turn_id, having("tool_start", tool="slow_write"), what="write")
    wait_until(lambda: effects(runtime.redis, "slow_write"), timeout=2, what="the write's effect")
    os.kill(worker.pool_child(), signal.SIGKILL)

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=20, what="turn end")

    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    runs = of(events, "run_started")
    [killed] = [r for r in runs if of(events, "tool_start", run_id=r.run_id, tool="slow_write")]
    assert of(events, "run_ended", run_id=killed.run_id)[0].reason == "crashed", show(events)
    taker = runs[runs.index(killed) + 1]
    assert taker.cause in {"reaper", "redelivery"} and taker.chunk == killed.chunk, show(events)
    blocked = {(b.tool, b.reason) for b in of(events, "tool_blocked")}
    assert blocked == {("slow_write", "interrupted")}, show(events)  # each resume refused it
    assert len(effects(runtime.redis, "slow_write")) == 1, "the write ran once"
    assert well_formed(runtime.ledger.read_turn(turn.turn_id)) == []


def test_a_master_restarted_mid_turn_loses_no_event_and_the_turn_completes(
    runtime: Runtime,
    redis_cluster: LocalCluster,
    worker: WorkerProcess,
    script: Callable[..., str],
) -> None:
    """SHUTDOWN (the AOF written) of the master holding a running turn, then the same server
    started again on its port and directory: every event recorded before is there after, the
    turn goes on to complete, and its stream is well formed."""
    model = script([send("a@x.io", "Hi"), *busy(8, delay_s=0.3), DONE])
    turn = runtime.lifecycle.enqueue("email then work", mode="background", model=model)
    wait_for(runtime.ledger, turn.turn_id, having("model_start", count=3), what="work under way")
    holder = redis_cluster.turn_holder(turn.turn_id)
    before = runtime.ledger.read_turn(turn.turn_id)
    redis_cluster.restart(holder)
    assert not of([e.event for e in before], "turn_ended"), "the turn was still running"

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=60, what="turn end")

    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    after = runtime.ledger.read_turn(turn.turn_id)
    assert before, "the turn had events on its master when it went down"
    assert after[: len(before)] == before, "an event recorded before the restart was lost"
    assert well_formed(after) == []
    assert [m["subject"] for m in outbox(runtime.redis)] == ["Hi"]
    assert redis_cluster.turn_holder(turn.turn_id) == holder
