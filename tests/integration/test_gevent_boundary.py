"""A chunk boundary on a ``dres worker -P gevent`` waits for nothing but the hand-over: the
tripwire of ``worker.edges.celery.wakeup`` (a consumer polling without an event loop asks for its
next message as soon as an acknowledgement frees a prefetch slot).

Each turn thinks past the soft limit at every step, so every step costs one chunk boundary: the
chunk sends its successor's message within its hand-over, ends (``run_ended(soft_limit)``) and is
acknowledged, and the successor starts (``run_started``). Without the fix, a worker whose every
greenlet is busy polls without a BRPOP pending, and the slot the acknowledgement frees is seen
only when that poll times out: ~2 s after it began, ~1.7 s after the chunk ended, at every
boundary. With it, a boundary takes milliseconds; the bound (a second) is far from both.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from gevent_support import StartWorker, sound

from ledger.events import Event, RunEnded, RunStarted
from rigs import DONE, ended, show, think, wait_for
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server

#: the foreground chunks' limits on these workers: the soft one cuts each step's thinking
CHUNKS = {
    "DRES_SOFT_LIMIT_S": "0.3",
    "DRES_HARD_LIMIT_S": "3",
    # a hand-over waiting out the stall must not be re-sent by the reaper meanwhile: the
    # boundary measured is the hand-over's own
    "DRES_HANDOFF_GRACE_S": "30",
}
#: seconds each step thinks on its first attempt: far past the soft limit
THINK_S = 2.0
#: chunk boundaries of each turn
BOUNDARIES = 5
#: seconds: a boundary slower than this waited for the consumer's next poll (~1.7 s), not for
#: the hand-over (milliseconds, tens of them on a loaded machine)
BOUND_S = 1.0


def boundaries(events: list[Event]) -> list[float]:
    """Seconds from each ``run_ended(soft_limit)`` to the next chunk's ``run_started``."""
    ends = {e.chunk: e.ts for e in events if isinstance(e, RunEnded) and e.reason == "soft_limit"}
    starts = {e.chunk: e.ts for e in events if isinstance(e, RunStarted)}
    return [starts[chunk + 1] - ts for chunk, ts in sorted(ends.items()) if chunk + 1 in starts]


@pytest.mark.parametrize("greenlets", [1, 2], ids=["one-greenlet", "two-greenlets"])
def test_every_chunk_boundary_of_a_busy_gevent_worker_is_the_hand_overs_own(
    runtime: Runtime, start_worker: StartWorker, script: Callable[..., str], greenlets: int
) -> None:
    """As many turns as the worker has greenlets, each crossing ``BOUNDARIES`` chunk boundaries:
    every boundary's successor starts within ``BOUND_S`` of its predecessor's end."""
    start_worker(concurrency=greenlets, extra=("-P", "gevent"), overrides=CHUNKS)
    steps = [think(THINK_S)] * BOUNDARIES + [DONE]
    turns = [
        runtime.lifecycle.enqueue(f"think {n}", model=script(steps)).turn_id
        for n in range(greenlets)
    ]
    gaps: dict[str, list[float]] = {}
    for turn_id in turns:
        timeout = BOUNDARIES * (THINK_S + 2.0) + 30
        wait_for(runtime.ledger, turn_id, ended(), timeout=timeout, what="the turn's end")
        events = sound(runtime, turn_id)
        assert [e.status for e in events if e.type == "turn_ended"] == ["completed"], show(events)
        gaps[turn_id] = boundaries(events)
        assert len(gaps[turn_id]) == BOUNDARIES, show(events)
    slow = {t: [round(g, 3) for g in gs if g >= BOUND_S] for t, gs in gaps.items()}
    print({t: [round(g * 1000, 1) for g in gs] for t, gs in gaps.items()}, "ms")
    assert not any(slow.values()), f"boundaries that waited for the consumer's next poll: {slow}"
