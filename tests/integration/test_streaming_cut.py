"""Coalesced streaming on a real prefork worker: a chunk cut mid-stream by its soft limit (the
real SIGUSR1) keeps every delta it streamed, and watchers saw the text while it streamed."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from ledger.codec import Envelope
from ledger.events import ModelStart, RunEnded, Text, TurnEnded
from ledger.store import Ledger
from rigs import show
from tests.support.fixtures import StartWorker
from worker.edges.runtime import Runtime
from worker.engine.history import Conversation
from worker.engine.models.base import AssistantMessage

pytestmark = pytest.mark.redis_server

#: 4,000 characters streamed 4 at a time, one delta every 10 ms: 10 s, far past the 0.5 s limit
ANSWER = "".join(f"{i:04d}" for i in range(1000))


def watch(ledger: Ledger, turn_id: str, timeout: float) -> list[Envelope]:
    """What a watcher sees, in the order it sees it, until the turn's end (or the deadline)."""
    seen: list[Envelope] = []
    deadline = time.monotonic() + timeout
    for batch in ledger.tail(turn_id, block_ms=100):
        seen += batch
        if any(isinstance(e.event, TurnEnded) for e in batch) or time.monotonic() > deadline:
            return seen
    return seen


@pytest.mark.parametrize(
    ("flush", "live"),
    [({}, True), ({"DRES_TEXT_FLUSH_MS": "600000", "DRES_TEXT_FLUSH_CHARS": "100000"}, False)],
    ids=["default-window", "no-flush-before-the-cut"],
)
def test_a_chunk_cut_mid_stream_by_its_soft_limit_keeps_every_delta_a_watcher_saw(
    runtime: Runtime,
    start_worker: StartWorker,
    script: Callable[..., str],
    flush: dict[str, str],
    live: bool,
) -> None:
    start_worker(overrides=flush)
    model = script([{"text": ANSWER, "chunk_chars": 4, "stream_delay_s": 0.01}])
    turn = runtime.lifecycle.enqueue("answer at length", model=model)

    seen = watch(runtime.ledger, turn.turn_id, timeout=30)
    ledger = runtime.ledger.read_turn(turn.turn_id)
    events = [e.event for e in ledger]
    assert isinstance(events[-1], TurnEnded) and events[-1].status == "completed", show(events)

    # Every event the watcher saw is in the ledger, in order, once (and it saw them all).
    assert seen == ledger

    cut = [e for e in events if e.chunk == 0]
    assert isinstance(cut[-1], RunEnded) and cut[-1].reason == "soft_limit", show(events)
    streamed = "".join(e.text for e in cut if isinstance(e, Text))
    # cut mid-stream, and nothing of what the chunk streamed is missing: a prefix, whole deltas
    assert 0 < len(streamed) < len(ANSWER) and ANSWER.startswith(streamed), show(events)
    assert len(streamed) % 4 == 0
    texts_before_cut = [e for e in cut if isinstance(e, Text)]
    if live:
        # the watcher saw text while the chunk was still streaming (flushed by the window)
        assert len(texts_before_cut) > 1, show(events)
    else:
        # no window, no size bound: the interrupt's flush wrote it, right before the hand-over
        assert [e.type for e in cut][-2:] == ["text", "run_ended"], show(events)
        assert len(texts_before_cut) == 1

    # The resumed run was asked with the partial text as the assistant's unfinished answer.
    resumed_start = next(
        i for i, e in enumerate(events) if isinstance(e, ModelStart) and e.chunk == 1
    )
    history = Conversation().feed(events[:resumed_start]).messages()
    partial = [m.text for m in history if isinstance(m, AssistantMessage)]
    assert partial == [streamed]
    answer = "".join(e.text for e in events if isinstance(e, Text))
    assert answer == streamed + ANSWER
