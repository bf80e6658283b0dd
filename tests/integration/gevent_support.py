"""What the gevent pool's suites share (``test_gevent_pool``, ``test_gevent_scale``,
``test_gevent_restore``): the worker, its settings, and the checks a turn's ledger must pass once
it ended."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from chaos.invariants import each_run_started_once, nothing_after_turn_ended, runs_closed
from ledger.events import Event
from rigs import WorkerProcess, show
from worker.demo_tools import outbox
from worker.edges.runtime import Runtime
from worker.lifecycle.dispatch import run_ids

StartWorker = Callable[..., WorkerProcess]

#: chunks far longer than any test here: only what a test does ends one early
LONG = {
    "DRES_SOFT_LIMIT_S": "30",
    "DRES_HARD_LIMIT_S": "40",
    "DRES_BG_SOFT_LIMIT_S": "30",
    "DRES_BG_HARD_LIMIT_S": "40",
    "DRES_VISIBILITY_TIMEOUT_S": "90",
}
#: seconds: the contract's "Stop within 2 s even while the provider is silent"
STOP_WITHIN_S = 2.0


def greenlets(start_worker: StartWorker, turns: int = 50, **overrides: str) -> WorkerProcess:
    """A ``dres worker -P gevent -c TURNS``: one process, no pool children."""
    worker = start_worker(concurrency=turns, extra=("-P", "gevent"), overrides=overrides)
    assert worker.children() == [], "one process: no pool children"
    return worker


def sound(runtime: Runtime, turn_id: str) -> list[Event]:
    """The ended turn's events, once its ledger passed the chaos runner's invariants."""
    envelopes = runtime.ledger.read_turn(turn_id)
    events = [e.event for e in envelopes]
    problems = [
        *nothing_after_turn_ended(envelopes),
        *runs_closed(envelopes, ended=True),
        *each_run_started_once(events),
    ]
    assert not problems, (problems, show(events))
    return events


def held_by_broker(runtime: Runtime) -> set[str]:
    """Run ids of the chunk messages held unacknowledged in kombu's Redis transport."""
    with runtime.app.connection_for_read() as connection:
        channel: Any = connection.default_channel
        return run_ids(channel.client.hvals(channel.unacked_key))


def emailed(runtime: Runtime) -> Counter[str]:
    return Counter(mail["to"] for mail in outbox(runtime.redis))
