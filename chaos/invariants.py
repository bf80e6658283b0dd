"""What must hold after every chaos trial, checked from the ledger and the tools' effects.

Pure functions: events and effect rows in, violations (sentences) out.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from ledger.codec import Envelope
from ledger.events import ToolDone, ToolStart

#: writes that are not idempotent: an interrupted one may never run again
PLAIN_WRITES = frozenset({"chaos_send", "chaos_note"})
IDEMPOTENT_WRITES = frozenset({"chaos_charge"})


def check(
    envelopes: Sequence[Envelope],
    effects: Sequence[dict[str, Any]],
    *,
    status: str,
    can_continue: bool,
    soft_limit_in_tool: bool,
) -> list[str]:
    events = [env.event for env in envelopes]
    return [
        *completed_writes_ran_once(effects),
        *interrupted_writes_not_retried(events),
        *terminal(status, can_continue),
        *no_fenced_out_events(envelopes),
        *no_lost_records(events, effects, soft_limit_in_tool),
    ]


def completed_writes_ran_once(effects: Sequence[dict[str, Any]]) -> list[str]:
    """A plain write's effect happened at most once; an idempotent one was applied at most once."""
    plain = Counter(
        (row["tool"], row.get("to"), row.get("subject"), row.get("text"))
        for row in effects
        if row["tool"] in PLAIN_WRITES
    )
    out = [f"{key[0]} ran {n} times: {key[1:]}" for key, n in plain.items() if n > 1]
    applied = Counter(
        row["amount"] for row in effects if row["tool"] in IDEMPOTENT_WRITES and row["applied"]
    )
    out += [f"chaos_charge of {amount} applied {n} times" for amount, n in applied.items() if n > 1]
    return out


def interrupted_writes_not_retried(events: Sequence[Any]) -> list[str]:
    """A plain write's input is started at most once: a retry of an interrupted one is refused."""
    starts = Counter(
        (e.tool, e.signature) for e in events if isinstance(e, ToolStart) and e.tool in PLAIN_WRITES
    )
    return [f"{tool} started {n} times with one input" for (tool, _), n in starts.items() if n > 1]


def terminal(status: str, can_continue: bool) -> list[str]:
    if status == "completed" or (status == "stopped" and can_continue):
        return []
    return [f"the turn ended {status!r} (can_continue={can_continue}) within the bound"]


def no_fenced_out_events(envelopes: Sequence[Envelope]) -> list[str]:
    """Every event of lease epoch E was written by the run that took E (its first event's run)."""
    holders: dict[int, str] = {}
    out = []
    for env in envelopes:
        epoch = int(env.stream_id.split("-")[0])
        holder = holders.setdefault(epoch, env.event.run_id)
        if env.event.run_id != holder:
            out.append(
                f"{env.stream_id} {env.event.type} by {env.event.run_id}, epoch held by {holder}"
            )
    return out


def no_lost_records(
    events: Sequence[Any], effects: Sequence[dict[str, Any]], soft_limit_in_tool: bool
) -> list[str]:
    """An effect the tools logged has its tool_start; under a soft limit, its tool_done too."""
    started = {e.call_id for e in events if isinstance(e, ToolStart)}
    done: dict[str, list[ToolDone]] = defaultdict(list)
    for e in events:
        if isinstance(e, ToolDone) and e.call_id:
            done[e.call_id].append(e)
    out = [
        f"effect of {r['tool']} call {r['call_id']} has no tool_start"
        for r in effects
        if r["call_id"] not in started
    ]
    if soft_limit_in_tool:
        out += [
            f"soft limit lost the tool_done of {r['tool']} call {r['call_id']}"
            for r in effects
            if not done.get(r["call_id"])
        ]
    return out
