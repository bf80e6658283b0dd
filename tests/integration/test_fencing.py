"""Fenced appends (docs/events.md): a zombie run cannot write once its successor holds the turn.

The zombie here is a run claimed in this process whose turn is then moved on, as it is after a
redelivery or a reaper take-over, while a real worker runs the successor against the same Redis.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ledger.errors import FencedOut, TransitionRefused
from ledger.events import Text
from rigs import DONE, WorkerProcess, ended, of, send, show, wait_for
from worker.demo_tools import outbox
from worker.edges.runtime import Runtime
from worker.engine.loop import RunResult
from worker.engine.recorder import Recorder, RunContext

pytestmark = pytest.mark.redis_server


def test_a_zombie_run_cannot_append_after_the_reaper_moved_its_turn_to_a_successor(
    runtime: Runtime, worker: WorkerProcess, script: Callable[..., str]
) -> None:
    rt = runtime
    model = script([send("ada@x.io", "Hi"), DONE], on_resume="restart")
    turn = rt.lifecycle.create("email Ada", model=model, mode="background")
    zombie = rt.lifecycle.claim(turn.turn_id, turn.run_id)
    assert zombie is not None
    recorder = Recorder(rt.ledger, zombie, rt.clock, rt.ids, [])
    recorder.record(Text, text="the zombie was alive once")

    # What the reaper does when the zombie's lease runs out; the worker runs the successor.
    taken = rt.lifecycle.take_over(rt.ledger.meta(turn.turn_id), "lease expired (test)")
    assert (taken.ok, taken.reason) == (True, "resumed")
    events = wait_for(rt.ledger, turn.turn_id, ended("completed"), timeout=10, what="completion")
    before = rt.ledger.read_turn(turn.turn_id)
    resumed = of(events, "run_started")[-1]
    assert (resumed.cause, resumed.epoch > zombie.epoch) == ("reaper", True), show(events)

    with pytest.raises(FencedOut):
        recorder.record(Text, text="a zombie's late text")
    # The zombie's ending and hand-over are steps of a holder whose epoch is gone: refused.
    with pytest.raises(TransitionRefused):
        rt.lifecycle.finish(zombie, RunResult("completed"))
    with pytest.raises(TransitionRefused):
        rt.lifecycle.hand_over(zombie)

    assert rt.ledger.read_turn(turn.turn_id) == before, "the zombie changed nothing"
    assert rt.ledger.meta(turn.turn_id).status == "completed"
    assert len(outbox(rt.redis)) == 1, show(events)


def test_an_old_lease_cannot_append_after_its_successor_claimed_the_handed_over_turn(
    runtime: Runtime, script: Callable[..., str]
) -> None:
    rt = runtime
    model = script([DONE])
    turn = rt.lifecycle.create("go", model=model)

    def claim(run_id: str) -> RunContext:
        run = rt.lifecycle.claim(turn.turn_id, run_id)
        assert run is not None
        return run

    old = claim(turn.run_id)
    successor = rt.lifecycle.hand_over(old)
    new = claim(successor)
    Recorder(rt.ledger, new, rt.clock, rt.ids, []).record(Text, text="the successor writes")
    before = rt.ledger.read_turn(turn.turn_id)

    with pytest.raises(FencedOut):
        Recorder(rt.ledger, old, rt.clock, rt.ids, []).record(Text, text="too late")
    assert rt.ledger.read_turn(turn.turn_id) == before
    assert rt.ledger.meta(turn.turn_id).run_id == successor
