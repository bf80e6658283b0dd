"""The demo tools (the default DRES_TOOLS): an email outbox and a ticket desk kept in Redis.

Each side effect is recorded in a Redis list so a person and a test can count exactly what
happened. ``send_email`` is a write identified by ``to`` + ``subject``; ``create_ticket`` is an
idempotent write (the idempotency key is its provider-side dedupe key); the other two only read.

Written against the public ``worker.tools`` alone, like any user's tools module, it lives at the
package's root, on no floor, so that the settings may name it as DRES_TOOLS's default without
the ground floor naming the dev floor (``worker.dev`` runs the demo; it does not own its tools).
"""

from __future__ import annotations

import json
from typing import Any

from worker.tools import ToolContext, tool

OUTBOX = "dres:demo:outbox"
TICKETS = "dres:demo:tickets"
TICKET_KEYS = "dres:demo:ticket-keys"


def _redis(ctx: ToolContext) -> Any:
    if ctx.redis is None:
        raise RuntimeError("the demo tools need the worker's Redis client (ctx.redis)")
    return ctx.redis


@tool(identity=["to", "subject"])
def send_email(to: str, subject: str, body: str, *, ctx: ToolContext) -> dict[str, Any]:
    """Send an email. Sending the same email twice sends it twice."""
    r = _redis(ctx)
    message = {"to": to, "subject": subject, "body": body, "turn_id": ctx.turn_id}
    n = r.rpush(OUTBOX, json.dumps(message))
    return {"sent": True, "message_id": f"msg-{n}", "to": to}


@tool(idempotent=True)
def create_ticket(title: str, description: str = "", *, ctx: ToolContext) -> dict[str, Any]:
    """Open a support ticket. The desk dedupes on the idempotency key, like a real provider."""
    r = _redis(ctx)
    ticket_id = f"T-{ctx.idempotency_key[:8]}"
    if r.hsetnx(TICKET_KEYS, ctx.idempotency_key, ticket_id):
        record = {"id": ticket_id, "title": title, "description": description}
        r.rpush(TICKETS, json.dumps(record))
    else:
        ticket_id = r.hget(TICKET_KEYS, ctx.idempotency_key)
        ticket_id = ticket_id.decode() if isinstance(ticket_id, bytes) else ticket_id
    return {"ticket_id": ticket_id, "title": title}


@tool(read_only=True)
def get_ticket(ticket_id: str, *, ctx: ToolContext) -> dict[str, Any]:
    """Look a ticket up by id."""
    for raw in _redis(ctx).lrange(TICKETS, 0, -1):
        record = json.loads(raw)
        if record["id"] == ticket_id:
            return dict(record)
    return {"error": f"no ticket {ticket_id}"}


@tool(read_only=True)
def list_outbox(*, ctx: ToolContext) -> dict[str, Any]:
    """List the emails sent so far."""
    emails = [json.loads(raw) for raw in _redis(ctx).lrange(OUTBOX, 0, -1)]
    return {
        "count": len(emails),
        "emails": [{"to": e["to"], "subject": e["subject"]} for e in emails],
    }


def outbox(redis_client: Any) -> list[dict[str, Any]]:
    """Every email the demo tools sent (for people and tests)."""
    return [json.loads(raw) for raw in redis_client.lrange(OUTBOX, 0, -1)]


def tickets(redis_client: Any) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in redis_client.lrange(TICKETS, 0, -1)]
