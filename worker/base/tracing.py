"""What the engine and the lifecycle tell a trace (docs/tracing.md), behind a small protocol.

A turn is one trace: the span that records it gives the turn its trace context (a W3C
``traceparent``, kept in the turn's metadata), and every run of the turn, on any worker, opens its
``run`` span in that context; a model call is a ``chat`` span, a tool call an ``execute_tool``
span, a resume, a hand-over, a takeover and an approval are span events. The floors above call
these hooks only; the OpenTelemetry SDK is wired at the edge (``worker.edges.tracing``), built
only when an ``OTEL_*`` endpoint is named. ``OFF`` is the tracer otherwise: shared do-nothing
objects, so an untraced tool call costs a method call and an empty ``with``.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

from ledger.events import TokenUsage

#: span attribute values: what OpenTelemetry accepts
Value = str | int | float | bool


@dataclass(frozen=True, slots=True)
class Settled:
    """How a tool call ended: run (an error result or not), or not run (``blocked_reason``).
    ``arguments`` and ``result`` go on a span only where content capture is on."""

    call_id: str
    read_only: bool | None
    is_error: bool
    blocked_reason: str | None
    arguments: Any = None
    result: Any = None


class ChatSpan(Protocol):
    def answered(self, usage: TokenUsage | None, finish_reason: str) -> None:
        """The model's answer arrived whole: what it spent (None: not reported), and why it
        stopped (``tool_calls`` or ``stop``)."""


class ToolSpan(Protocol):
    def settled(self, call: Settled) -> None:
        """How the call ended (``Settled``)."""


class Tracer(Protocol):
    def turn(
        self, *, turn_id: str, conversation_id: str, mode: str, parent: str | None
    ) -> AbstractContextManager[str]:
        """The span recording a new turn, as a child of ``parent`` (a ``traceparent``; None: the
        caller's current span, if any); yields the trace context the turn keeps ("": none)."""

    def run(
        self, *, trace: str, turn_id: str, run_id: str, chunk: int, cause: str
    ) -> AbstractContextManager[None]:
        """The span of one run of a turn, in the turn's trace (``trace`` as ``turn`` gave it)."""

    def chat(self, model: str) -> AbstractContextManager[ChatSpan]:
        """A model call of the current run (``model`` is its spec, ``provider:model``)."""

    def tool(self, name: str) -> AbstractContextManager[ToolSpan]:
        """A tool call of the current run, whatever is done with it."""

    def event(self, name: str, attributes: Mapping[str, Value]) -> None:
        """Something that happened to the current run (a resume, a hand-over, …)."""


class _Quiet:
    """A span nobody records."""

    def answered(self, usage: TokenUsage | None, finish_reason: str) -> None:
        pass

    def settled(self, call: Settled) -> None:
        pass


_QUIET = _Quiet()
_NO_TRACE: nullcontext[str] = nullcontext("")
_NOTHING: nullcontext[None] = nullcontext()
_QUIET_SPAN: nullcontext[_Quiet] = nullcontext(_QUIET)


class Off:
    """No tracing: every hook does nothing (and allocates nothing)."""

    def turn(
        self, *, turn_id: str, conversation_id: str, mode: str, parent: str | None
    ) -> AbstractContextManager[str]:
        return _NO_TRACE

    def run(
        self, *, trace: str, turn_id: str, run_id: str, chunk: int, cause: str
    ) -> AbstractContextManager[None]:
        return _NOTHING

    def chat(self, model: str) -> AbstractContextManager[ChatSpan]:
        return _QUIET_SPAN

    def tool(self, name: str) -> AbstractContextManager[ToolSpan]:
        return _QUIET_SPAN

    def event(self, name: str, attributes: Mapping[str, Value]) -> None:
        pass


OFF: Tracer = Off()
