"""A turn's life outside the loop: create it, claim a run, hand it over to the next chunk.

These are the steps the Celery tasks, the API and the tests share, so that the rules (who may
claim, what a handover records) live in one place; each is one atomic ledger script.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ledger import keys
from ledger.cache import EventCache
from ledger.events import Event, RunEnded, TurnEnded, TurnStarted
from ledger.store import Ledger
from worker.clock import Clock, Ids
from worker.recorder import RunContext
from worker.settings import Settings


@dataclass(frozen=True)
class NewTurn:
    turn_id: str
    conversation_id: str
    run_id: str


def create_turn(
    ledger: Ledger,
    message: str,
    *,
    clock: Clock,
    ids: Ids,
    conversation_id: str | None = None,
    mode: str = "foreground",
    model: str | None = None,
    turn_id: str | None = None,
    prior_turn_note: str | None = None,
) -> NewTurn:
    """Record a new turn (``turn_started``, status queued, its first run pending)."""
    turn_id = turn_id or ids.new("turn")
    conversation_id = conversation_id or ids.new("conv")
    run_id = ids.new("run")
    event = TurnStarted(
        event_id=ids.new("ev"),
        turn_id=turn_id,
        run_id=run_id,
        chunk=0,
        ts=clock.now(),
        conversation_id=conversation_id,
        message=message,
        mode=mode,
        model=model,
        prior_turn_note=prior_turn_note,
    )
    meta = {"model": model or "", "dispatched": clock.now(), "redispatches": 0}
    if ledger.create_turn(event, first_run=run_id, meta=meta):
        ledger.client.rpush(keys.conversation_turns(conversation_id), turn_id)
    return NewTurn(turn_id, conversation_id, run_id)


def claim_run(
    ledger: Ledger,
    turn_id: str,
    run_id: str,
    *,
    clock: Clock,
    ids: Ids,
    settings: Settings,
    cache: EventCache | None = None,
) -> RunContext | None:
    """Claim the turn's pending run (recording run_started); None when ``run_id`` is not it.

    The lease lasts the chunk's hard limit plus a grace: the run cannot outlive its hard limit,
    so a lease that ran out means the run is dead and the reaper may take the turn over. With
    the process's ``cache``, the claim also reads what is new of the turn in its atomic step:
    the run's snapshot, with no round trip of its own.
    """
    now = clock.now()
    claim = ledger.claim(
        turn_id,
        run_id,
        lease_until_ms=int((now + settings.lease_s("foreground")) * 1000),
        background_lease_until_ms=int((now + settings.lease_s("background")) * 1000),
        event_id=ids.new("ev"),
        ts=now,
        read_from=cache.read_point(turn_id) if cache is not None else "",
    )
    if claim.lease is None or claim.meta is None:
        return None
    meta = claim.meta
    mode = meta.extra.get("mode", "foreground")
    return RunContext(
        claim.lease,
        mode=mode,
        model=meta.extra.get("model") or None,
        stop_requested=meta.stop_requested,
        snapshot=cache.absorb(claim) if cache is not None else None,
    )


def finish(
    ledger: Ledger,
    run: RunContext,
    *,
    clock: Clock,
    ids: Ids,
    run_reason: str,
    status: str,
    code: str = "",
    detail: str = "",
    can_continue: bool = False,
    first: Sequence[Event] = (),
) -> list[Event]:
    """Record the run's and the turn's end in one fenced step; the turn's keys then expire.

    ``first``: events of the run not yet written (``Recorder.hold``), written before the end.
    """
    common = {"turn_id": run.turn_id, "run_id": run.run_id, "chunk": run.chunk}
    events: list[Event] = [
        RunEnded(
            event_id=ids.new("ev"), ts=clock.now(), reason=run_reason, detail=detail, **common
        ),
        TurnEnded(
            event_id=ids.new("ev"),
            ts=clock.now(),
            status=status,
            code=code,
            detail=detail,
            can_continue=can_continue,
            **common,
        ),
    ]
    meta = {"status": status, "can_continue": int(can_continue), "code": code, "next_run": ""}
    ledger.append_many([*first, *events], lease=run.lease, meta=meta, expire=True)
    return events


def hand_over(
    ledger: Ledger,
    run: RunContext,
    *,
    clock: Clock,
    ids: Ids,
    reason: str = "soft_limit",
    cause: str = "next_chunk",
    detail: str = "",
) -> str:
    """End ``run`` and record its successor (the next chunk) as the turn's pending run.

    One fenced step: a run that no longer holds the turn cannot hand it over. Returns the
    successor's run id, which the caller then dispatches (ids only).
    """
    successor = ids.new("run")
    ended = RunEnded(
        event_id=ids.new("ev"),
        turn_id=run.turn_id,
        run_id=run.run_id,
        chunk=run.chunk,
        ts=clock.now(),
        reason=reason,
        detail=detail,
    )
    meta = {
        "status": "resuming",
        "next_run": successor,
        "next_chunk": run.chunk + 1 if reason == "soft_limit" else run.chunk,
        "next_cause": cause,
        "dispatched": clock.now(),
        "redispatches": 0,
    }
    ledger.append_many([ended], lease=run.lease, meta=meta)
    return successor
