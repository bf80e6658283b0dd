"""Helpers of the integration tests: worker processes, scripts, and waiting on the ledger.

Waits are on ledger state with a deadline (XREAD BLOCK), never blind sleeps; the few things
XREAD cannot wait on (a process's log, the broker's queues) are polled every few milliseconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from ledger.events import Event
from ledger.store import Ledger
from worker.base.settings import Settings
from worker.dev.worker_process import WorkerProcess as WorkerProcess  # re-exported for the tests
from worker.edges.runtime import Runtime

#: seconds between looks at something that cannot be waited on with XREAD BLOCK
POLL_S = 0.02
#: the hash of delivered, unacknowledged messages (kombu's Redis transport)
UNACKED = "unacked"

Predicate = Callable[[list[Event]], bool]


# -- worker processes ---------------------------------------------------------------------------


# -- scripted-model steps -----------------------------------------------------------------------


def send(to: str, subject: str) -> dict[str, Any]:
    """A step that sends one email."""
    mail = {"to": to, "subject": subject, "body": "hello"}
    return {"text": f"Emailing {to}.", "tool_calls": [{"name": "send_email", "input": mail}]}


def think(delay_s: float) -> dict[str, Any]:
    """A step that takes ``delay_s`` (first attempt only), then reads the outbox."""
    return {"delay_s": delay_s, "text": "Thinking.", "tool_calls": [{"name": "list_outbox"}]}


def slow_write(label: str) -> dict[str, Any]:
    """A step calling ``sample_tools.slow_write``: its side effect, then a second of work."""
    return {"tool_calls": [{"name": "slow_write", "input": {"label": label}}]}


DONE: dict[str, Any] = {"text": "Done."}


# -- turns --------------------------------------------------------------------------------------


def crashed_stop(rt: Runtime, model: str, *, conversation_id: str | None = None) -> str:
    """A foreground turn whose first run died, as the reaper records it (stopped, crashed).

    The run is claimed here and taken over as a dead run, exactly what the reaper does when a
    foreground run's lease runs out. No message is sent, so no worker runs anything for it.
    """
    turn = rt.lifecycle.create(
        "do the task",
        model=model,
        conversation_id=conversation_id,
    )
    run = rt.lifecycle.claim(turn.turn_id, turn.run_id)
    assert run is not None
    outcome = rt.lifecycle.take_over(rt.ledger.meta(turn.turn_id), "lease expired (test)")
    assert outcome.ok and outcome.reason == "stopped: crashed", outcome
    return turn.turn_id


def close_runtime(rt: Runtime) -> None:
    if "app" in rt.__dict__:
        rt.app.close()
    if "redis" in rt.__dict__:
        rt.redis.close()


# -- waiting ------------------------------------------------------------------------------------


def wait_for(
    ledger: Ledger,
    turn_id: str,
    predicate: Predicate,
    timeout: float = 15.0,
    what: str = "the awaited ledger state",
) -> list[Event]:
    """Tail the turn's ledger (XREAD BLOCK 100 ms) until ``predicate(events so far)`` holds."""
    deadline = time.monotonic() + timeout
    events: list[Event] = []
    for batch in ledger.tail(turn_id, block_ms=100):
        events += [envelope.event for envelope in batch]
        if predicate(events):
            return events
        if time.monotonic() > deadline:
            break
    raise AssertionError(f"{what}: not within {timeout} s; the ledger:\n{show(events)}")


def wait_until(check: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll ``check`` until it returns something truthy; returns that."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(POLL_S)
    return value


def of(events: list[Event], type_: str, **fields: Any) -> list[Any]:
    """The events of ``type_`` whose fields have the given values."""
    return [
        e
        for e in events
        if e.type == type_ and all(getattr(e, k, None) == v for k, v in fields.items())
    ]


def having(type_: str, count: int = 1, **fields: Any) -> Predicate:
    """Predicate: at least ``count`` events of ``type_`` with the given field values."""
    return lambda events: len(of(events, type_, **fields)) >= count


def ended(status: str | None = None) -> Predicate:
    """Predicate: the turn ended (with ``status``, when given)."""
    if status is None:
        return having("turn_ended")
    return having("turn_ended", status=status)


def show(events: list[Event]) -> str:
    keep = {"reason", "status", "code", "tool", "cause", "step", "resume_step"}
    lines = []
    for e in events:
        extra = {k: v for k, v in e.model_dump(mode="json").items() if k in keep}
        lines.append(f"  c{e.chunk} {e.run_id[-6:]:>6} {e.type:<13} {extra}")
    return "\n".join(lines)


def broker_drained(client: redis.Redis, settings: Settings) -> bool:
    """No message waits in a dres queue, and none is delivered but unacknowledged."""
    queued = client.llen(settings.foreground_queue) + client.llen(settings.background_queue)
    return queued == 0 and client.hlen(UNACKED) == 0


def together(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run each call in its own thread, all released at once; results (or exceptions) in order."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def body(i: int) -> None:
        barrier.wait()
        try:
            results[i] = calls[i]()
        except Exception as e:  # handed to the test, which asserts on every result
            results[i] = e

    threads = [threading.Thread(target=body, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results
