"""Tools for the executor and loop tests; each records its side effect in Redis to be counted."""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ledger import keys
from worker.tools import Reconciliation, ToolContext, WaitUntil, tool, wait_until

EFFECTS = "test:effects"
#: seconds ``slow_write`` works before it returns (long enough for a signal to arrive mid-call)
SLOW_S = 1.0


class SimulatedSoftLimit(Exception):
    """Stands in for ``SoftTimeLimitExceeded`` (an Exception too) in in-process tests."""


def effects(client: Any, tool_name: str | None = None) -> list[dict[str, Any]]:
    rows = [json.loads(raw) for raw in client.lrange(EFFECTS, 0, -1)]
    return [r for r in rows if tool_name is None or r["tool"] == tool_name]


def _effect(ctx: ToolContext, **data: Any) -> None:
    row = {"tool": ctx.tool, "key": ctx.idempotency_key, "call_id": ctx.call_id, **data}
    ctx.redis.rpush(EFFECTS, json.dumps(row))


@tool
def write_then_die(label: str, *, ctx: ToolContext) -> dict[str, Any]:
    """The side effect lands, then the run is cut off before its tool_done (a hard kill)."""
    _effect(ctx, label=label)
    raise SimulatedSoftLimit("cut off after the side effect")


@tool(idempotent=True)
def charge(amount: int, *, ctx: ToolContext) -> dict[str, Any]:
    """An idempotent write: the provider dedupes on the key, the test counts every attempt."""
    _effect(ctx, amount=amount)
    return {"charged": amount, "key": ctx.idempotency_key}


def _find_booking(data: dict[str, Any], ctx: ToolContext) -> Reconciliation:
    if data["room"] == "unknowable":
        return Reconciliation.unknown()
    landed = [e for e in effects(ctx.redis, "book") if e["room"] == data["room"]]
    if landed:
        return Reconciliation.landed({"booked": data["room"], "reconciled": True})
    return Reconciliation.not_landed()


@tool(reconcile=_find_booking)
def book(room: str, *, ctx: ToolContext) -> dict[str, Any]:
    _effect(ctx, room=room)
    return {"booked": room}


@tool
def slow_write(label: str, *, ctx: ToolContext) -> dict[str, Any]:
    """A write that takes SLOW_S seconds after its side effect, so a soft limit lands mid-call."""
    _effect(ctx, label=label)
    time.sleep(SLOW_S)
    return {"written": label}


@tool
def broken_write(value: int, *, ctx: ToolContext) -> dict[str, Any]:
    raise ValueError(f"provider rejected {value}")


@tool(read_only=True)
async def async_lookup(key: str, *, ctx: ToolContext) -> dict[str, Any]:
    return {"key": key, "found": False}


@tool
def write_signalled(label: str, *, ctx: ToolContext) -> dict[str, Any]:
    """A write during which the soft-limit signal (SIGUSR1) reaches this very process."""
    _effect(ctx, label=label)
    os.kill(os.getpid(), signal.SIGUSR1)
    return {"written": label}


#: the file ``outside_write`` appends its effects to (an environment variable of the worker):
#: a store outside the ledger's Redis, which the store-fault tests take down
OUTSIDE_EFFECTS = "TEST_OUTSIDE_EFFECTS"


def outside_effects(path: str, label: str | None = None) -> list[dict[str, Any]]:
    """The effects logged in ``path`` (of the writes labelled ``label``, if given)."""
    try:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []
    return [row for row in rows if label is None or row["label"] == label]


@tool
def outside_write(label: str, seconds: float, *, ctx: ToolContext) -> dict[str, Any]:
    """A write whose effect lands in a file at once, then ``seconds`` of work: it can finish
    while the ledger's Redis is away."""
    row = {"tool": ctx.tool, "key": ctx.idempotency_key, "label": label}
    with open(os.environ[OUTSIDE_EFFECTS], "a") as f:
        f.write(json.dumps(row) + "\n")
    time.sleep(seconds)
    return {"written": label}


#: the directory of the ledger's Redis's AOF files (an environment variable of the worker)
AOF_DIR = "TEST_AOF_DIR"


@tool
def aof_witness(label: str, *, ctx: ToolContext) -> dict[str, Any]:
    """A write whose effect notes whether the ledger's AOF files already hold this call's
    ``tool_start`` (its call id) when the effect runs; the note goes where ``outside_write``'s
    effects go."""
    aof = b"".join(p.read_bytes() for p in sorted(Path(os.environ[AOF_DIR]).rglob("*.aof")))
    row = {"tool": ctx.tool, "label": label, "call_id": ctx.call_id}
    row["start_in_aof"] = ctx.call_id.encode() in aof
    with open(os.environ[OUTSIDE_EFFECTS], "a") as f:
        f.write(json.dumps(row) + "\n")
    return {"written": label}


@tool
def write_superseded(label: str, *, ctx: ToolContext) -> dict[str, Any]:
    """A write during which a new message of the conversation supersedes its turn (its Stop
    flag set with ``superseded``, as ``DRES_DOUBLE_TEXT=interrupt`` sets it): this write
    finishes and is recorded, and no later write of the turn starts."""
    _effect(ctx, label=label)
    ctx.redis.set(keys.turn_cancel(ctx.turn_id), "superseded")
    return {"written": label}


@tool(client=True)
def ask_user(question: str) -> dict[str, Any]:
    """Asks the person at the client; the client answers (its body is never called)."""
    raise AssertionError("a client tool's body is never called")


@tool(needs_approval=lambda data, ctx: data["amount"] > 100)
def transfer(amount: int, to: str, *, ctx: ToolContext) -> dict[str, Any]:
    """Moves money: a person approves transfers over 100 (a per-call approval rule)."""
    _effect(ctx, amount=amount, to=to)
    return {"transferred": amount, "to": to}


@tool
def big_report(megabytes: int, *, ctx: ToolContext) -> dict[str, Any]:
    """A write whose result is ``megabytes`` MiB of text (past any sane result cap)."""
    _effect(ctx, megabytes=megabytes)
    return {"report": "x" * (megabytes * 1024 * 1024), "quote": '"a" \\ "b"'}


@tool
def remind_at(at: float, label: str, *, ctx: ToolContext) -> WaitUntil:
    """Record an effect, then have the turn wait until ``at`` (seconds since the epoch), held by
    no worker (``wait_until``); the call's result names the label."""
    _effect(ctx, label=label)
    return wait_until(datetime.fromtimestamp(at, UTC), result={"reminded": label})
