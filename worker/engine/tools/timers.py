"""Timers inside a turn (docs/semantics.md, timers): a tool returns ``wait_until(when, result=…)``,
its call completes with ``result``, and the turn waits until ``when`` held by no worker, no
Celery message and no tenant slot; the reaper wakes it (``run_started`` cause ``timer``).

The wait is recorded on the call's ``tool_done`` (``wake_at``), so it is the ledger's, not a
process's: a run that begins before the time (a crash pickup, a decision on another call of the
same step) finds it there and waits again (``pending_wake``)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ledger.events import Event, ModelStart, ToolDone


@dataclass(frozen=True)
class WaitUntil:
    """What a tool returns to make its turn wait: the call's result, and when to wake."""

    #: seconds since the epoch
    wake_at: float
    #: the call's result, given to the model when the turn goes on
    result: Any = None


def wait_until(when: datetime | float, result: Any = None) -> WaitUntil:
    """Return this from a tool: its call completes with ``result`` and the turn waits until
    ``when`` — an aware ``datetime``, or seconds from now — held by no worker."""
    if isinstance(when, datetime):
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError(
                "wait_until: when must be an aware datetime (with its tzinfo) or seconds from "
                f"now, not the naive datetime {when.isoformat()}"
            )
        return WaitUntil(when.timestamp(), result)
    if isinstance(when, bool) or not isinstance(when, (int, float)):
        raise TypeError(
            "wait_until: when must be an aware datetime or seconds from now, "
            f"not {type(when).__name__}"
        )
    if not math.isfinite(when) or when < 0:
        raise ValueError(f"wait_until: when must be a finite number of seconds >= 0, not {when!r}")
    return WaitUntil(time.time() + float(when), result)


def pending_wake(events: Sequence[Event], now: float) -> float:
    """When the turn must wake before its next model call: the latest ``wake_at`` of the calls
    completed since its last model call, if that is still to come (0.0: nothing to wait for)."""
    wake = 0.0
    for event in reversed(events):
        if isinstance(event, ModelStart):
            break
        if isinstance(event, ToolDone) and event.wake_at:
            wake = max(wake, event.wake_at)
    return wake if wake > now else 0.0


__all__ = ["WaitUntil", "pending_wake", "wait_until"]
