"""The chaos trials' tools. Each records its side effects per turn so the runner can count them.

- ``chaos_send``: a write identified by ``to`` + ``subject`` (like send_email);
- ``chaos_charge``: an idempotent write whose provider applies each idempotency key once and
  logs every attempt;
- ``chaos_note``: a plain write;
- ``chaos_read``: read-only.
Every effect row carries the call's ``call_id`` so it can be traced to its ``tool_start``.
"""

from __future__ import annotations

import json
from typing import Any

from worker.tools import ToolContext, tool


def effects_key(turn_id: str) -> str:
    return f"chaos:effects:{turn_id}"


def applied_key(turn_id: str) -> str:
    return f"chaos:applied:{turn_id}"


def read_effects(client: Any, turn_id: str) -> list[dict[str, Any]]:
    """The effect rows the tools logged for ``turn_id``, oldest first (the runner's read)."""
    return [json.loads(row) for row in client.lrange(effects_key(turn_id), 0, -1)]


def _record(ctx: ToolContext, **data: Any) -> None:
    row = {"tool": ctx.tool, "call_id": ctx.call_id, "key": ctx.idempotency_key, **data}
    ctx.redis.rpush(effects_key(ctx.turn_id), json.dumps(row, sort_keys=True))


@tool(identity=["to", "subject"])
def chaos_send(to: str, subject: str, body: str, *, ctx: ToolContext) -> dict[str, Any]:
    """Send a message (a side effect that must happen at most once)."""
    _record(ctx, to=to, subject=subject, body=body)
    return {"sent": True, "to": to}


@tool(idempotent=True)
def chaos_charge(amount: int, *, ctx: ToolContext) -> dict[str, Any]:
    """Charge once per idempotency key; every attempt is logged."""
    first = ctx.redis.hsetnx(applied_key(ctx.turn_id), ctx.idempotency_key, amount)
    _record(ctx, amount=amount, applied=bool(first))
    return {"charged": amount, "key": ctx.idempotency_key}


@tool
def chaos_note(text: str, *, ctx: ToolContext) -> dict[str, Any]:
    """Write a note (a plain write)."""
    _record(ctx, text=text)
    return {"noted": text}


@tool(read_only=True)
def chaos_read(*, ctx: ToolContext) -> dict[str, Any]:
    """Count this turn's effects so far."""
    return {"effects": ctx.redis.llen(effects_key(ctx.turn_id))}
