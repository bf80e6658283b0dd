"""Small event factories for tests: fixed ids and clock unless a test says otherwise."""

from __future__ import annotations

import itertools
from typing import Any

from ledger.events import Clear, Text, ToolBlocked, ToolDone, ToolStart, TurnStarted
from ledger.signature import input_signature

_ids = itertools.count(1)


def eid() -> str:
    return f"ev{next(_ids)}"


def base(turn_id: str = "t1", run_id: str = "r1", chunk: int = 0) -> dict[str, Any]:
    return {"event_id": eid(), "turn_id": turn_id, "run_id": run_id, "chunk": chunk, "ts": 1.0}


def turn_started(turn_id: str = "t1", message: str = "hello", **kw: Any) -> TurnStarted:
    return TurnStarted(
        **base(turn_id), conversation_id=kw.pop("conversation_id", "c1"), message=message, **kw
    )


def start(
    tool: str,
    input: Any,
    *,
    call_id: str | None = None,
    read_only: bool = False,
    turn_id: str = "t1",
    run_id: str = "r1",
) -> ToolStart:
    return ToolStart(
        **base(turn_id, run_id),
        call_id=call_id,
        tool=tool,
        input=input,
        signature=input_signature(input),
        read_only=read_only,
    )


def done(
    tool: str,
    result: Any,
    *,
    call_id: str | None = None,
    is_error: bool = False,
    turn_id: str = "t1",
    run_id: str = "r1",
) -> ToolDone:
    return ToolDone(
        **base(turn_id, run_id), call_id=call_id, tool=tool, result=result, is_error=is_error
    )


def text(value: str, turn_id: str = "t1", run_id: str = "r1") -> Text:
    return Text(**base(turn_id, run_id), text=value)


def clear(turn_id: str = "t1") -> Clear:
    return Clear(**base(turn_id))


def blocked(
    tool: str,
    input: Any,
    turn_id: str = "t1",
    *,
    call_id: str | None = None,
    result: Any = "the journaled result",
) -> ToolBlocked:
    return ToolBlocked(
        **base(turn_id),
        call_id=call_id,
        tool=tool,
        input=input,
        signature=input_signature(input),
        reason="completed",
        result=result,
    )
