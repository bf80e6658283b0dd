"""What a tool sees of the run: ``ToolContext``; and what a ``reconcile`` hook answers."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class ToolContext:
    turn_id: str
    run_id: str
    call_id: str
    #: the same for the same call (turn, tool, input signature, occurrence) across every resume
    idempotency_key: str
    tool: str = ""
    #: the worker's Redis client, for tools that keep state there (the demo outbox); may be None
    redis: Any = None
    #: ``with ctx.interruptible():`` around a wait that has no side effect of its own (a child
    #: turn's answer): a soft limit, a Stop or a shutdown lands there instead of waiting for the
    #: call's end, and the call stays interrupted (its outcome is then found on resume)
    interruptible: Callable[[], AbstractContextManager[None]] = nullcontext


def idempotency_key(turn_id: str, tool: str, signature: str, occurrence: int) -> str:
    """A stable key for a provider's idempotency mechanism (hex, 40 characters)."""
    material = f"dres/v1\x00{turn_id}\x00{tool}\x00{signature}\x00{occurrence}"
    return hashlib.sha256(material.encode()).hexdigest()[:40]


@dataclass(frozen=True)
class Reconciliation:
    """A ``reconcile`` hook's verdict on an interrupted write, from the outside world."""

    outcome: Literal["landed", "not_landed", "unknown"]
    #: for ``landed``: the call's result, recorded as if the call had completed
    result: Any = None

    @classmethod
    def landed(cls, result: Any) -> Reconciliation:
        return cls("landed", result)

    @classmethod
    def not_landed(cls) -> Reconciliation:
        return cls("not_landed")

    @classmethod
    def unknown(cls) -> Reconciliation:
        return cls("unknown")
