"""What must hold of a tenant trial (``make chaos TENANTS=N``), checked from the ledger: at no
instant more than N of a tenant's turns hold a run, and once the trial is over every tenant's
slots and queue are empty again (each slot given back exactly once).

Pure functions, as ``chaos.invariants``: events and plain values in, violations (sentences) out.

A turn holds one of its tenant's slots from its admission until it ends, stops or waits; its
runs lie inside that (a run starts after the turn is admitted, and a turn gives its slot back
after its end, stop or wait is recorded), so no more than N of a tenant's turns may be in a run
at once. A run holds from its ``run_started`` to its ``run_ended`` (its own, or the ``crashed``
one a takeover or a stop writes for a run taken for dead); a run that has neither holds until
the turn's next event written by another run (the next ``run_started``, the reaper's), else
until the turn's last event, else (a turn still running) for ever. Between runs (a wait for
approval, a stop until Continue, a queued turn) the turn holds no run. All times are the
events' ``ts``: one clock, the host's, in a chaos run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ledger.events import RunEnded, RunStarted, TurnStarted


@dataclass(frozen=True)
class Hold:
    """One run of a turn, holding its tenant's slot from ``start`` to ``end`` (seconds)."""

    turn_id: str
    run_id: str
    start: float
    end: float


def tenant_of(events: Sequence[Any]) -> str:
    """The turn's tenant, as its ``turn_started`` records it."""
    opened = next((e for e in events if isinstance(e, TurnStarted)), None)
    return opened.tenant if opened is not None else "default"


def holds(events: Sequence[Any]) -> list[Hold]:
    """Each run of the turn (``events``, its stream in order) and when it held a run."""
    out = []
    for i, event in enumerate(events):
        if not isinstance(event, RunStarted):
            continue
        rest = events[i + 1 :]
        end = next(
            (e.ts for e in rest if isinstance(e, RunEnded) and e.run_id == event.run_id), None
        )
        if end is None:  # killed, and nothing wrote its end: until another run's event
            end = next((e.ts for e in rest if e.run_id != event.run_id), None)
        if end is None:
            end = rest[-1].ts if rest and _ended(events) else math.inf
        out.append(Hold(event.turn_id, event.run_id, event.ts, end))
    return out


def _ended(events: Sequence[Any]) -> bool:
    return bool(events) and events[-1].type == "turn_ended"


def most_at_once(spans: Sequence[Hold]) -> tuple[int, float]:
    """The most ``spans`` held at one instant, and the first instant it was reached (an end at
    the instant of a start comes first: the slot was given back before it was taken)."""
    edges = sorted([(h.start, 1) for h in spans] + [(h.end, -1) for h in spans])
    running = most = 0
    at = math.nan
    for ts, step in edges:
        running += step
        if running > most:
            most, at = running, ts
    return most, at


def by_tenant(turns: Mapping[str, Sequence[Any]]) -> dict[str, list[Hold]]:
    """Every turn's holds (``turns``: turn id -> its events), by the turn's tenant."""
    out: dict[str, list[Hold]] = {}
    for events in turns.values():
        out.setdefault(tenant_of(events), []).extend(holds(events))
    return out


def most_running(turns: Mapping[str, Sequence[Any]]) -> dict[str, int]:
    """Per tenant, the most of its turns that held a run at once."""
    return {tenant: most_at_once(spans)[0] for tenant, spans in by_tenant(turns).items()}


def within_bound(turns: Mapping[str, Sequence[Any]], limit: int) -> list[str]:
    """No tenant had more than ``limit`` of its turns in a run at one instant."""
    spans = by_tenant(turns)
    zero = _first(spans)
    out = []
    for tenant, held in sorted(spans.items()):
        most, at = most_at_once(held)
        if most > limit:
            out.append(
                f"tenant {tenant} had {most} turns running at once at {at - zero:.3f} s "
                f"({limit} at most)"
            )
    return out


def _first(spans: Mapping[str, Sequence[Hold]]) -> float:
    """The trial's first run's start: its timeline's zero."""
    return min((h.start for held in spans.values() for h in held), default=0.0)


def slots_back(counts: Mapping[str, tuple[int, int]]) -> list[str]:
    """After the trial (``counts``: tenant -> its running and queued turns, as
    ``GET /v1/tenants/{t}`` reads them), every slot was given back and nothing waits."""
    return [
        f"tenant {tenant} still counts {running} running, {queued} queued after its turns ended"
        for tenant, (running, queued) in sorted(counts.items())
        if running or queued
    ]


def timeline(turns: Mapping[str, Sequence[Any]]) -> list[str]:
    """The trial's holds, by tenant and start, in seconds from the first (as ``within_bound``
    says when): what to read when the bound broke."""
    spans = by_tenant(turns)
    zero = _first(spans)
    lines = []
    for tenant, hs in sorted(spans.items()):
        for h in sorted(hs, key=lambda h: h.start):
            lines.append(
                f"{tenant:<10} {h.turn_id} {h.run_id} {h.start - zero:8.3f} -> {h.end - zero:8.3f}"
            )
    return lines
