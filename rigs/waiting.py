"""Waiting with a deadline: on a turn's ledger (XREAD BLOCK), or by polling what XREAD cannot
wait on (a process's log, an HTTP status, the broker's queues) every few milliseconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis

from ledger.events import Event
from ledger.store import Ledger
from worker.base.settings import Settings

#: seconds between looks at something that cannot be waited on with XREAD BLOCK
POLL_S = 0.02
#: the hash of delivered, unacknowledged messages (kombu's Redis transport)
UNACKED = "unacked"

T = TypeVar("T")
Predicate = Callable[[list[Event]], bool]


def poll(read: Callable[[], T | None], timeout: float, interval: float = POLL_S) -> T | None:
    """The first truthy value of ``read()`` (read at least once), or None after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not (value := read()):
        if time.monotonic() > deadline:
            return None
        time.sleep(interval)
    return value


def wait_until(
    check: Callable[[], T | None],
    timeout: float = 10.0,
    what: str = "condition",
    interval: float = POLL_S,
) -> T:
    """Poll ``check`` until it returns something truthy, and return that; fail after ``timeout``."""
    value = poll(check, timeout, interval)
    if not value:
        raise AssertionError(f"{what}: not within {timeout} s")
    return value


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


def wait_ended_through(ledger: Ledger, turn_id: str, timeout: float) -> list[Event]:
    """``wait_for`` the turn's end through a store fault this process meets too: a tail's
    blocking read is not retried, so one cut off is started again, within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            left = max(deadline - time.monotonic(), 0.1)
            return wait_for(ledger, turn_id, ended(), timeout=left, what="turn end")
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise


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
    """A turn's events, one line each, for a failure message."""
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
