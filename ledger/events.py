"""The run-ledger events (docs/events.md) as a pydantic discriminated union, and their validation.

The models live in ``ledger.event_models`` (below ``ledger.errors``, which names ``Event``) and
are read from here as ever. Events know nothing of stream ids or bytes; ``ledger.codec`` maps
them to stream fields. Every event carries ``v``, the schema version: a reader meeting a version
it does not know raises ``EventDecodeError`` and the stores turn that into a logged skip.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter, ValidationError

from ledger.errors import EventDecodeError
from ledger.event_models import (
    RUN_CAUSES,
    SCHEMA_VERSION,
    ApprovalDecided,
    ApprovalDecision,
    ApprovalRequested,
    Clear,
    ClientTool,
    EarlierTurn,
    Event,
    Inherited,
    ModelDone,
    ModelStart,
    Resumed,
    RunCause,
    RunEnded,
    RunEndReason,
    RunStarted,
    Text,
    TokenUsage,
    ToolBlocked,
    ToolDone,
    ToolStart,
    TurnContext,
    TurnEnded,
    TurnMode,
    TurnStarted,
    TurnStatus,
)

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
#: the adapter's validator itself, without the adapter's Python wrapper around each call
_VALIDATE_JSON = EVENT_ADAPTER.validator.validate_json


def parse_event(data: dict[str, Any]) -> Event:
    """Validate the dict form of an event (docs/events.md); raise ``EventDecodeError`` if not
    one."""
    if not isinstance(data, dict):
        raise EventDecodeError(f"an event must be a JSON object, got {type(data).__name__}")
    try:
        return EVENT_ADAPTER.validate_python(data)
    except ValidationError as e:
        raise EventDecodeError(_describe(e)) from e


def parse_event_json(raw: bytes | str) -> Event:
    """Validate an event from its JSON text (parsed in pydantic-core, the fast path for reads)."""
    try:
        event: Event = _VALIDATE_JSON(raw)
        return event
    except ValidationError as e:
        raise EventDecodeError(_describe(e)) from e


def _describe(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "event"
    return f"invalid event: {where}: {first['msg']} ({error.error_count()} error(s))"


__all__ = [
    "EVENT_ADAPTER",
    "RUN_CAUSES",
    "SCHEMA_VERSION",
    "ApprovalDecided",
    "ApprovalDecision",
    "ApprovalRequested",
    "Clear",
    "ClientTool",
    "EarlierTurn",
    "Event",
    "Inherited",
    "ModelDone",
    "ModelStart",
    "Resumed",
    "RunCause",
    "RunEndReason",
    "RunEnded",
    "RunStarted",
    "Text",
    "TokenUsage",
    "ToolBlocked",
    "ToolDone",
    "ToolStart",
    "TurnContext",
    "TurnEnded",
    "TurnMode",
    "TurnStarted",
    "TurnStatus",
    "parse_event",
    "parse_event_json",
]
