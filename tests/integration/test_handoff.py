"""The handoff to the next chunk (docs/semantics.md): duplicated and lost successor messages.

The successor is recorded before its message is sent and claims the turn atomically, so a
duplicate delivery runs nothing and a lost message is found by the reaper and re-dispatched; a
message that waits in a busy queue is neither sent again nor taken for lost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from ledger import keys
from ledger.turns import Outgoing
from rigs import (
    DONE,
    WorkerProcess,
    broker_drained,
    close_runtime,
    ended,
    having,
    of,
    send,
    show,
    think,
    together,
    wait_for,
    wait_until,
)
from worker.base.settings import Settings
from worker.demo_tools import outbox
from worker.edges.celery.dispatch import CeleryDispatcher
from worker.edges.runtime import Runtime
from worker.engine.recorder import RunContext
from worker.lifecycle import Lifecycle

pytestmark = pytest.mark.redis_server

#: seconds allowed beyond the handoff grace for the reaper's sweep and the chunk's start
REDISPATCH_MARGIN_S = 2.0


class LosingDispatcher:
    """A dispatcher whose messages are lost on the way (a broker hiccup after the record)."""

    def __init__(self) -> None:
        self.lost: list[tuple[str, str, str]] = []

    def dispatch(self, turn_id: str, run_id: str, mode: str) -> None:
        self.lost.append((turn_id, run_id, mode))

    def prepare(self, turn_id: str, run_id: str, mode: str) -> Outgoing | None:
        return None  # the message goes after the step, to be lost

    def prepare_all(self, runs: Sequence[tuple[str, str, str]]) -> list[Outgoing | None]:
        return [self.prepare(*run) for run in runs]

    def revoke(self, turn_id: str, run_id: str) -> None:
        pass

    def marked(self, turn_id: str, run_id: str) -> bool:
        return False  # no marks: the reaper asks queued_runs

    def queued_runs(self) -> set[str] | None:
        return set()

    def backlog(self) -> int | None:
        return 0

    def queue_keys(self) -> tuple[str, ...] | None:
        return None


def first_chunk_handed_over(rt: Runtime, model: str) -> tuple[str, str, float]:
    """A turn whose first chunk ran (here) and recorded its successor; (turn, successor, when)."""
    turn = rt.lifecycle.create("email Ada", model=model)
    run = rt.lifecycle.claim(turn.turn_id, turn.run_id)
    assert isinstance(run, RunContext)
    successor = rt.lifecycle.hand_over(run)
    return turn.turn_id, successor, rt.clock.now()


def test_duplicated_chunk_messages_run_each_run_once(
    runtime: Runtime,
    settings: Settings,
    start_worker: Callable[..., WorkerProcess],
    script: Callable[..., str],
) -> None:
    """Each run's message sent three times, pending and while running: one run_started each."""
    start_worker(concurrency=2)
    dispatcher = CeleryDispatcher(runtime.app, settings)
    steps = [send("a@x.io", "A"), think(0.8), think(0.3), send("b@x.io", "B"), DONE]
    turn = runtime.lifecycle.enqueue("email a and b", model=script(steps))
    for _ in range(2):
        dispatcher.dispatch(turn.turn_id, turn.run_id, "foreground")  # while pending
    events = wait_for(runtime.ledger, turn.turn_id, having("run_started", chunk=1), what="chunk 1")
    successor = of(events, "run_started", chunk=1)[0].run_id
    for _ in range(2):
        dispatcher.dispatch(turn.turn_id, successor, "foreground")  # while running

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=10, what="turn end")
    wait_until(lambda: broker_drained(runtime.redis, settings), what="all messages consumed")

    started = of(events, "run_started")
    assert [(e.run_id, e.chunk) for e in started] == [(turn.run_id, 0), (successor, 1)]
    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    assert runtime.ledger.read_turn(turn.turn_id)[-1].event.type == "turn_ended", "nothing after"
    assert [m["subject"] for m in outbox(runtime.redis)] == ["A", "B"]
    assert runtime.ledger.meta(turn.turn_id).runs == 2


def test_a_lost_successor_message_is_redispatched_by_the_reaper_and_the_turn_completes(
    runtime: Runtime, settings: Settings, worker: WorkerProcess, script: Callable[..., str]
) -> None:
    rt = runtime
    turn_id, successor, handed_at = first_chunk_handed_over(rt, script([send("a@x.io", "A"), DONE]))
    lossy = LosingDispatcher()
    Lifecycle(rt.ledger, settings, rt.clock, rt.ids, lossy).launch(turn_id, successor, "foreground")
    assert lossy.lost == [(turn_id, successor, "foreground")]

    events = wait_for(rt.ledger, turn_id, ended(), timeout=10, what="turn end")

    [started] = of(events, "run_started", run_id=successor)
    waited_s = started.ts - handed_at
    print(f"lost handoff -> successor run_started: {waited_s:.2f} s")
    assert settings.handoff_grace_s <= waited_s < settings.handoff_grace_s + REDISPATCH_MARGIN_S
    assert (started.chunk, started.cause) == (1, "next_chunk")
    assert [e.cause for e in of(events, "run_started")] == ["first", "next_chunk"]
    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    meta = rt.ledger.meta(turn_id)
    assert meta.redispatches >= 1
    assert [m["subject"] for m in outbox(rt.redis)] == ["A"]


def test_a_successor_waiting_in_a_queue_no_worker_consumes_is_never_resent_nor_stopped(
    runtime: Runtime,
    settings: Settings,
    start_worker: Callable[..., WorkerProcess],
    script: Callable[..., str],
) -> None:
    """A worker that consumes no dres queue runs only the reaper: the message waits, as in a
    backlog, and the reaper looks at it again and again without sending a second one."""
    start_worker(extra=("-Q", "not-a-dres-queue"))
    turn_id, successor, handed_at = first_chunk_handed_over(runtime, script([DONE]))
    runtime.lifecycle.launch(turn_id, successor, "foreground")
    looks = settings.handoff_grace_s * (settings.max_redispatches + 2)

    def looked_at_late_enough() -> bool:
        due = runtime.redis.zscore(keys.active_turns(), turn_id)
        return due is not None and due / 1000 > handed_at + looks

    wait_until(looked_at_late_enough, timeout=looks + 10, what="the reaper's repeated looks")
    meta = runtime.ledger.meta(turn_id)
    assert (meta.status, meta.next_run, meta.redispatches) == ("resuming", successor, 0)
    assert runtime.redis.llen(settings.foreground_queue) == 1, "one message, never a second"
    assert runtime.redis.exists(keys.chunk_message(turn_id, successor)), "its mark answered"
    assert not of(runtime.ledger.events(turn_id), "turn_ended")


def test_concurrent_deliveries_of_one_pending_run_claim_it_exactly_once(
    runtime: Runtime, settings: Settings, script: Callable[..., str]
) -> None:
    """Twenty deliveries of one message, in twenty processes' stead, race for the claim."""
    rt = runtime
    turn = rt.lifecycle.create("go", model=script([DONE]))
    clients = [Runtime.from_settings(settings) for _ in range(20)]
    try:
        claims = together(
            [
                lambda c=c: c.lifecycle.claim(turn.turn_id, turn.run_id)  # type: ignore[misc]
                for c in clients
            ]
        )
    finally:
        for client in clients:
            close_runtime(client)

    assert not [c for c in claims if isinstance(c, Exception)], claims
    winners = [c for c in claims if c is not None]
    assert len(winners) == 1, f"{len(winners)} deliveries think they hold the turn"
    [started] = of(rt.ledger.events(turn.turn_id), "run_started")
    assert started.epoch == winners[0].epoch == rt.ledger.meta(turn.turn_id).epoch
