"""One live turn per conversation, and forks, on real workers of both pools (docs/semantics.md):
a second message waits for, interrupts or is refused by the live turn, never runs beside it; a
fork of a turn that already sent an email answers the repeat from the record.

Each worker runs two chunks at once (``-c 2``), so two turns of one conversation could run
together if anything but the conversation's line kept them apart.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ledger.events import Event, RunEnded, RunStarted, ToolBlocked, TurnEnded
from rigs import DONE, WorkerProcess, context_of, ended, having, of, send, show, wait_for
from tests.support.fixtures import BOTH_POOLS, StartWorker
from worker.base.errors import Refused
from worker.demo_tools import outbox
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server

#: chunks far longer than any step here: only what a test does ends one
LONG = {"DRES_SOFT_LIMIT_S": "30", "DRES_HARD_LIMIT_S": "40", "DRES_VISIBILITY_TIMEOUT_S": "90"}
#: seconds a turn may take here
TURN_S = 30.0


@pytest.fixture
def two(start_worker: StartWorker) -> WorkerProcess:
    """A worker of the test's pool running two chunks at once."""
    return start_worker(concurrency=2, overrides=LONG)


def slow(step: dict[str, object], seconds: float) -> dict[str, object]:
    return {**step, "delay_s": seconds}


def span(events: list[Event]) -> tuple[float, float]:
    """When the turn's first run started and when the turn ended (its events' clocks)."""
    first = next(e for e in events if isinstance(e, RunStarted))
    last = next(e for e in reversed(events) if isinstance(e, TurnEnded | RunEnded))
    return first.ts, last.ts


@BOTH_POOLS
def test_a_second_message_waits_for_the_live_turn_and_sees_its_answer(
    runtime: Runtime, two: WorkerProcess, script: Callable[..., str]
) -> None:
    conv = "conv-queue"
    first = runtime.lifecycle.enqueue(
        "email Ada", conversation_id=conv, model=script([slow(send("ada@x.io", "A"), 1.5), DONE])
    )
    wait_for(runtime.ledger, first.turn_id, having("model_start"), what="the first turn's call")
    second = runtime.lifecycle.enqueue(
        "and Bob", conversation_id=conv, model=script([send("bob@x.io", "B"), DONE])
    )
    assert second.run_id == "" and runtime.ledger.meta(second.turn_id).status == "queued"

    one = wait_for(runtime.ledger, first.turn_id, ended("completed"), TURN_S, "first ends")
    two_ = wait_for(runtime.ledger, second.turn_id, ended("completed"), TURN_S, "second ends")

    assert span(two_)[0] >= span(one)[1], (show(one), show(two_))
    assert [m["to"] for m in outbox(runtime.redis)] == ["ada@x.io", "bob@x.io"]
    earlier, _ = context_of(two_)
    assert [t.turn_id for t in earlier] == [first.turn_id]


@BOTH_POOLS
def test_interrupt_stops_the_live_turn_before_its_next_write_and_the_new_turn_runs_after(
    runtime: Runtime, two: WorkerProcess, script: Callable[..., str]
) -> None:
    """The live turn is in a long model call when the new message comes: it stops at once
    (superseded), its email is never sent, and the new turn is told what it did."""
    conv = "conv-interrupt"
    first = runtime.lifecycle.enqueue(
        "email Ada", conversation_id=conv, model=script([slow(send("ada@x.io", "A"), 30), DONE])
    )
    wait_for(runtime.ledger, first.turn_id, having("model_start"), what="the first turn's call")

    second = runtime.lifecycle.enqueue(
        "no, wait", conversation_id=conv, model=script([DONE]), double_text="interrupt"
    )

    one = wait_for(runtime.ledger, first.turn_id, ended(), 5, "the live turn stops")
    [end] = of(one, "turn_ended")
    assert (end.status, end.code, end.can_continue) == ("stopped", "superseded", False)
    assert not of(one, "tool_start"), show(one)
    two_ = wait_for(runtime.ledger, second.turn_id, ended("completed"), TURN_S, "new turn ends")
    assert span(two_)[0] >= span(one)[1]
    assert outbox(runtime.redis) == []
    _, note = context_of(two_)
    assert note is not None and "superseded" in note


def test_interrupt_lets_the_write_in_progress_finish_and_be_recorded(
    runtime: Runtime, two: WorkerProcess, script: Callable[..., str]
) -> None:
    conv = "conv-interrupt-write"
    writes = {
        "text": "",
        "tool_calls": [
            {"name": "slow_write", "input": {"label": "first"}},
            {"name": "slow_write", "input": {"label": "second"}},
        ],
    }
    first = runtime.lifecycle.enqueue("write twice", conversation_id=conv, model=script([writes]))
    wait_for(runtime.ledger, first.turn_id, having("tool_start"), what="the first write")

    runtime.lifecycle.enqueue(
        "stop that", conversation_id=conv, model=script([DONE]), double_text="interrupt"
    )

    one = wait_for(runtime.ledger, first.turn_id, ended(), TURN_S, "the live turn stops")
    assert [e.input["label"] for e in of(one, "tool_start")] == ["first"], show(one)
    assert len(of(one, "tool_done", is_error=False)) == 1  # finished and recorded
    assert of(one, "turn_ended")[0].code == "superseded"


def test_reject_refuses_a_message_while_a_turn_is_live(
    runtime: Runtime, two: WorkerProcess, script: Callable[..., str]
) -> None:
    conv = "conv-reject"
    first = runtime.lifecycle.enqueue(
        "email Ada", conversation_id=conv, model=script([slow(send("ada@x.io", "A"), 1), DONE])
    )
    wait_for(runtime.ledger, first.turn_id, having("model_start"), what="the first turn's call")

    with pytest.raises(Refused, match=first.turn_id):
        runtime.lifecycle.enqueue(
            "another", conversation_id=conv, model=script([DONE]), double_text="reject"
        )

    wait_for(runtime.ledger, first.turn_id, ended("completed"), TURN_S, "first ends")
    assert runtime.lifecycle.store.lines.turn_ids(conv) == [first.turn_id]


@BOTH_POOLS
def test_a_regenerate_mid_turn_stops_the_turn_and_never_sends_its_email_again(
    runtime: Runtime, two: WorkerProcess, script: Callable[..., str]
) -> None:
    """The turn sent its email and thinks on; the person regenerates: the turn stops
    (superseded), and the fork's model, sending the same email, gets the recorded result."""
    conv = "conv-regenerate"
    email = send("ada@x.io", "A")
    first = runtime.lifecycle.enqueue(
        "email Ada", conversation_id=conv, model=script([email, slow(DONE, 30)])
    )
    wait_for(runtime.ledger, first.turn_id, having("tool_done"), what="the email sent")

    fork = runtime.lifecycle.fork(first.turn_id, model=script([email, DONE]))

    forked = wait_for(runtime.ledger, fork.turn_id, ended("completed"), TURN_S, "the fork ends")
    one = runtime.ledger.events(first.turn_id)
    assert of(one, "turn_ended")[0].code == "superseded"
    assert span(forked)[0] >= span(one)[1]
    assert len(outbox(runtime.redis)) == 1
    [block] = [e for e in forked if isinstance(e, ToolBlocked)]
    assert (block.reason, block.inherited_from) == ("completed", first.turn_id)
    assert runtime.ledger.meta(first.turn_id).replaced_by == fork.turn_id
