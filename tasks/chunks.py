"""The chunk task: claim a run, run the chunk through ``worker.loop``, chain the next chunk.

A message carries ids only. The claim decides whether this delivery runs anything: only the
turn's pending run can claim, once, so a duplicated message does nothing. A message delivered
again after its worker was lost (``redelivered``) finds its own run still holding the turn and
hands the turn to ``TurnControl.take_over``. At the soft time limit the chunk records its end and
its successor in one fenced step, then sends the successor's message — well inside the
soft/hard margin.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import redis
import structlog
from celery import Task, current_app, shared_task
from celery.exceptions import SoftTimeLimitExceeded

from ledger.errors import FencedOut, LedgerError, UnknownTurn
from worker.celery_app import CHUNK_TASK
from worker.recorder import RunContext
from worker.runtime import Runtime
from worker.settings import get_settings
from worker.turns import claim_run, finish, hand_over

log = structlog.get_logger("dres.tasks")


@cache
def runtime() -> Runtime:
    return Runtime.from_settings(get_settings(), current_app._get_current_object())


@shared_task(bind=True, name=CHUNK_TASK)
def run_chunk(self: Task, turn_id: Any, run_id: Any) -> str:
    if not isinstance(turn_id, str) or not isinstance(run_id, str) or not turn_id or not run_id:
        log.error("rejected a chunk message with bad ids", turn_id=turn_id, run_id=run_id)
        return "bad-message"
    rt = runtime()
    try:
        run = claim_run(
            rt.ledger,
            turn_id,
            run_id,
            clock=rt.clock,
            ids=rt.ids,
            settings=rt.settings,
            cache=rt.events,
        )
    except UnknownTurn:
        log.error("chunk for an unknown or expired turn")
        return "unknown-turn"
    if run is None:
        return _not_claimed(
            rt, turn_id, run_id, bool(self.request.delivery_info.get("redelivered"))
        )
    structlog.contextvars.bind_contextvars(chunk=run.chunk)
    # No watch here: the dispatch that sent this run already has the reaper look at the turn,
    # and a reaper finding it running re-arms the look for the lease's end.
    try:
        result = rt.loop(turn_id, interrupts=(SoftTimeLimitExceeded,)).run(run)
    except SoftTimeLimitExceeded:
        return _chain(rt, run)
    except FencedOut as e:
        log.warning("another run holds the turn; this one stops writing", error=str(e))
        return "fenced-out"
    except (LedgerError, redis.ConnectionError, redis.TimeoutError):
        raise  # Redis is unreachable: nothing can be recorded; the lease runs out, the reaper acts
    except Exception as e:
        log.exception("chunk failed")
        _record_failure(rt, run, e)
        return "failed"
    rt.control.unwatch(turn_id)
    rt.events.forget(turn_id)
    return result.status


def _not_claimed(rt: Runtime, turn_id: str, run_id: str, redelivered: bool) -> str:
    meta = rt.ledger.meta(turn_id)
    if redelivered and meta.run_id == run_id and meta.status == "running":
        # This very run held the turn and its worker was lost (killed pool child, dead worker).
        outcome = rt.control.take_over(meta, "the run's worker was lost (message redelivered)")
        return f"took over: {outcome.reason}"
    log.info("duplicate or stale chunk message; nothing to run", status=meta.status)
    return "not-claimed"


def _chain(rt: Runtime, run: RunContext) -> str:
    settings = rt.settings
    if run.chunk + 1 >= settings.max_chunks:
        detail = f"the turn used its {settings.max_chunks} chunks"
        finish(
            rt.ledger,
            run,
            clock=rt.clock,
            ids=rt.ids,
            run_reason="soft_limit",
            status="stopped",
            code="max_chunks",
            detail=detail,
            can_continue=True,
        )
        rt.control.unwatch(run.turn_id)
        return "stopped: max_chunks"
    successor = hand_over(rt.ledger, run, clock=rt.clock, ids=rt.ids)
    fault = rt.failpoints.hit("chunk.handoff")  # chaos only: crash, drop or duplicate here
    if fault == "drop":
        rt.control.watch(run.turn_id, rt.settings.handoff_grace_s)
        return "chained (message dropped)"
    # The message first: the turn is in the reaper's index already (a running turn stays there
    # until its lease ends), so a crash right after the send is still looked at, and the look
    # for a lost message is set while the next chunk is on its way, not before.
    rt.control.dispatcher.dispatch(run.turn_id, successor, run.mode)
    rt.control.watch(run.turn_id, rt.settings.handoff_grace_s)
    if fault == "duplicate":
        rt.control.dispatcher.dispatch(run.turn_id, successor, run.mode)
    log.info("soft limit: chained the next chunk", successor=successor)
    return "chained"


def _record_failure(rt: Runtime, run: RunContext, error: Exception) -> None:
    try:
        finish(
            rt.ledger,
            run,
            clock=rt.clock,
            ids=rt.ids,
            run_reason="error",
            status="failed",
            code="internal_error",
            detail=repr(error)[:500],
            can_continue=True,
        )
        rt.control.unwatch(run.turn_id)
    except LedgerError:
        log.exception("could not record the failure")
