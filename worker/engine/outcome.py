"""How a run ended, for the lifecycle to record (the loop writes no ending itself), and what a run
that ends waiting waits on (docs/semantics.md: approvals, client tools, timers)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ledger.events import ApprovalRequested, Event


@dataclass(frozen=True)
class RunResult:
    """How a run ended, for the lifecycle to record (the loop writes no ending itself)."""

    #: completed or stopped
    status: str
    #: why it stopped (a ``ledger.turn.StopCode``)
    code: str = ""
    detail: str = ""
    #: the ``run_ended`` reason
    run_reason: str = "completed"
    #: the run's events not yet written (``Recorder.hold``): the ending writes them first
    held: tuple[Event, ...] = ()
    #: the turn's open approval requests when the run ends ``waiting`` (docs/semantics.md)
    requests: tuple[ApprovalRequested, ...] = ()
    #: the client calls (call_id, tool) whose answers the turn waits for when it ends waiting
    calls: tuple[tuple[str, str], ...] = ()
    #: when the turn wakes, when it ends waiting on a timer (seconds since the epoch; 0: none)
    wake_at: float = 0.0


@dataclass
class Waits:
    """What a run ends waiting on: approval requests, client calls (docs/semantics.md)."""

    requests: list[ApprovalRequested] = field(default_factory=list)
    #: (call_id, tool) of each client call
    calls: list[tuple[str, str]] = field(default_factory=list)
    #: the latest time a call's ``wait_until`` named (seconds since the epoch; 0: none)
    wake_at: float = 0.0

    def __bool__(self) -> bool:
        return bool(self.requests or self.calls or self.wake_at)


def waiting_on(waits: Waits, unwritten: Iterable[Event]) -> RunResult:
    """The result of a run that ends waiting on ``waits``, with what it has not written yet."""
    details = []
    if waits.requests:
        tools = ", ".join(sorted({r.tool for r in waits.requests}))
        details.append(f"a person's decision on {len(waits.requests)} call(s): {tools}")
    if waits.calls:
        tools = ", ".join(sorted({tool for _, tool in waits.calls}))
        details.append(f"the client's output of {len(waits.calls)} call(s): {tools}")
    if waits.wake_at:
        until = datetime.fromtimestamp(waits.wake_at, UTC).isoformat(timespec="seconds")
        details.append(f"its timer, until {until}")
    return RunResult(
        "waiting",
        "",
        "waiting for " + " and ".join(details),
        "waiting",
        tuple(unwritten),
        tuple(waits.requests),
        tuple(waits.calls),
        waits.wake_at,
    )


__all__ = ["RunResult", "Waits", "waiting_on"]
