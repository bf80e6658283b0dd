"""The chaos trials' tools. Each records its side effects per turn so the runner can count them.

- ``chaos_send``: a write identified by ``to`` + ``subject`` (like send_email);
- ``chaos_charge``: an idempotent write whose provider applies each idempotency key once and
  logs every attempt; like a real provider's, its keys are one store for every turn, so a fork
  that retries a replaced turn's interrupted charge with that turn's key is not applied again;
- ``chaos_note``: a plain write;
- ``chaos_read``: read-only;
- ``chaos_wait``: a plain write that then has its turn wait ``seconds`` (``wait_until``): the
  ``timer`` trials' (``chaos.timers``), which give it a failpoint of its own between its effect
  and its return (``WAIT_POINT``).
Every effect row carries the call's ``call_id`` so it can be traced to its ``tool_start``.
A write takes ``slow_key()`` seconds (unset: none) between its start and its effect: a
conversation trial sets it so that its second message may land while a write executes.

The effects live in the trial's redis-server, which the store faults take away. A call's effect
is one script, keyed by this execution's own id, that the tool sends again until Redis answers
(for up to ``OUTAGE_S``): a command cut off with its connection may have run, and sent again it
must not log a second effect that the tool itself caused. So an effect lands exactly when the
tool returns, and every extra effect row is one more execution, which is what the invariants
count. The key is the execution's, not the ``call_id``: an approved call runs under its request's
``call_id`` (docs/semantics.md), so a second execution of one approval has the same ``call_id`` and
must still log a row of its own.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from typing import Any

from ledger.store import STORE_ERRORS
from worker.base.failpoints import Failpoints
from worker.tools import ToolContext, WaitUntil, tool, wait_until

#: ``chaos_wait``'s failpoint, between its effect and its return: a fault there strikes the timer's
#: own call, whichever of the trial's turns made it (the executor's points count every tool's
#: calls)
WAIT_POINT = "chaos_wait.after_effect"
#: seconds a tool keeps sending its effect while Redis is away (the ledger's outage window)
OUTAGE_S = 30.0
#: seconds between two sends of an effect while Redis is away
RETRY_S = 0.1
#: logs an execution's effect once: KEYS = the turn's marks (execution id -> applied), effects,
#: applied keys; ARGV = execution id, the row's JSON, an idempotency key to apply once ('' for
#: none), the amount
EFFECT_LUA = """
local seen = redis.call('HGET', KEYS[1], ARGV[1])
if seen then return seen end
local row = cjson.decode(ARGV[2])
local applied = '1'
if ARGV[3] ~= '' then
  applied = tostring(redis.call('HSETNX', KEYS[3], ARGV[3], ARGV[4]))
  row['applied'] = applied == '1'
end
redis.call('RPUSH', KEYS[2], cjson.encode(row))
redis.call('HSET', KEYS[1], ARGV[1], applied)
return applied
"""


def effects_key(turn_id: str) -> str:
    return f"chaos:effects:{turn_id}"


def applied_key() -> str:
    """The provider's applied idempotency keys: one store, whichever turn sends the key."""
    return "chaos:applied"


def slow_key() -> str:
    """Seconds each write waits before its effect (the runner's, for a conversation trial)."""
    return "chaos:slow"


def marks_key(turn_id: str) -> str:
    return f"chaos:marks:{turn_id}"


def read_effects(client: Any, turn_id: str) -> list[dict[str, Any]]:
    """The effect rows the tools logged for ``turn_id``, oldest first (the runner's read)."""
    return [json.loads(row) for row in client.lrange(effects_key(turn_id), 0, -1)]


def _record(ctx: ToolContext, apply: tuple[str, int] | None = None, **data: Any) -> bool:
    """Log this execution's effect once; with ``apply`` (idempotency key, amount), apply the
    key once too. True if this execution applied it (always True without ``apply``)."""
    row = {"tool": ctx.tool, "call_id": ctx.call_id, "key": ctx.idempotency_key, **data}
    turn = ctx.turn_id
    effect = ctx.redis.register_script(EFFECT_LUA)
    key, amount = apply or ("", 0)
    execution = uuid.uuid4().hex  # one per execution: its sends again share it, nothing else
    with contextlib.suppress(*STORE_ERRORS):  # a store fault's trial sets none
        time.sleep(float(ctx.redis.get(slow_key()) or 0))
    args = [execution, json.dumps(row, sort_keys=True), key, amount]
    deadline = time.monotonic() + OUTAGE_S
    while True:
        try:
            applied = effect(keys=[marks_key(turn), effects_key(turn), applied_key()], args=args)
            return str(int(applied)) == "1"
        except STORE_ERRORS:
            if time.monotonic() > deadline:
                raise
            time.sleep(RETRY_S)


@tool(identity=["to", "subject"])
def chaos_send(to: str, subject: str, body: str, *, ctx: ToolContext) -> dict[str, Any]:
    """Send a message (a side effect that must happen at most once)."""
    _record(ctx, to=to, subject=subject, body=body)
    return {"sent": True, "to": to}


@tool(idempotent=True)
def chaos_charge(amount: int, *, ctx: ToolContext) -> dict[str, Any]:
    """Charge once per idempotency key; every attempt is logged."""
    _record(ctx, (ctx.idempotency_key, amount), amount=amount)
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


@tool
def chaos_wait(seconds: float, label: str, *, ctx: ToolContext) -> WaitUntil:
    """Note ``label`` (a plain write), then have the turn wait ``seconds`` from now, held by no
    worker, before it goes on."""
    _record(ctx, text=label)
    Failpoints(ctx.redis).hit(WAIT_POINT)  # chaos only: the worker runs with DRES_FAILPOINTS=1
    return wait_until(seconds, result={"waited": label, "seconds": seconds})
