"""Acting on a turn from outside its run: Stop, Continue, and taking over from a dead run.

Every action here is one atomic ``Ledger.seize`` guarded by the state it was decided on, so two
clients, two reapers or a reaper and a late message racing for the same turn get one winner and
the others a clear refusal. Used by the API, the CLI, the chunk task and the reaper.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import redis
import structlog

from ledger import keys
from ledger.codec import text
from ledger.events import Event, RunEnded, TurnEnded
from ledger.store import Ledger, TurnMeta
from worker.clock import Clock, Ids
from worker.settings import Settings

log = structlog.get_logger("dres.control")

#: stops that may be continued automatically: the turn was cut off, not refused
AUTO_CONTINUABLE = frozenset({"crashed", "transport_error", "handoff_lost"})
FINISHED = frozenset({"completed", "failed", "cancelled"})
#: seconds the Stop flag outlives the request (a run checks it at every safe point)
CANCEL_FLAG_TTL_S = 24 * 3600


class Dispatcher(Protocol):
    def dispatch(self, turn_id: str, run_id: str, mode: str) -> None:
        """Send the message that runs ``run_id`` (ids only)."""

    def revoke(self, turn_id: str, run_id: str) -> None:
        """Best effort: tell the workers not to run a queued message."""


@dataclass(frozen=True)
class Outcome:
    ok: bool
    #: why not, in words a client can show (or what was done)
    reason: str = ""
    run_id: str | None = None


class TurnControl:
    def __init__(
        self, ledger: Ledger, settings: Settings, clock: Clock, ids: Ids, dispatcher: Dispatcher
    ) -> None:
        self.ledger = ledger
        self.settings = settings
        self.clock = clock
        self.ids = ids
        self.dispatcher = dispatcher

    # -- the reaper's index ------------------------------------------------------------------

    def watch(self, turn_id: str, after_s: float) -> None:
        """Have the reaper look at the turn ``after_s`` seconds from now."""
        at_ms = int((self.clock.now() + after_s) * 1000)
        self.ledger.client.zadd(keys.active_turns(), {turn_id: at_ms})

    def unwatch(self, turn_id: str) -> None:
        self.ledger.client.zrem(keys.active_turns(), turn_id)

    def launch(self, turn_id: str, run_id: str, mode: str) -> None:
        """Dispatch a recorded pending run, watched for a lost message."""
        self.watch(turn_id, self.settings.handoff_grace_s)
        self.dispatcher.dispatch(turn_id, run_id, mode)

    # -- Stop ---------------------------------------------------------------------------------

    def is_cancelled(self, turn_id: str) -> bool:
        """Was Stop requested? A check that cannot reach Redis says no: the next one asks again."""
        try:
            return bool(self.ledger.client.exists(keys.turn_cancel(turn_id)))
        except (redis.ConnectionError, redis.TimeoutError) as e:
            log.warning("could not check for a Stop request", error=repr(e))
            return False

    def stop(self, turn_id: str) -> Outcome:
        """Cancel a running or resuming turn; a queued chunk never runs."""
        meta = self.ledger.meta(turn_id)
        if meta.status in FINISHED or meta.status == "stopped":
            return Outcome(False, f"the turn is not running (status {meta.status})")
        self.ledger.client.set(keys.turn_cancel(turn_id), "1", ex=CANCEL_FLAG_TTL_S)
        if meta.next_run:
            ended = self._event(
                meta, TurnEnded, status="cancelled", code="cancelled", detail="Stop requested"
            )
            taken = self.ledger.seize(
                meta,
                expect={"next_run": meta.next_run},
                events=[ended],
                set_meta={"status": "cancelled", "next_run": "", "code": "cancelled"},
                expire=True,
            )
            if taken is not None:
                self.dispatcher.revoke(turn_id, meta.next_run)
                self.unwatch(turn_id)
                return Outcome(True, "cancelled before the next chunk ran")
        return Outcome(True, "stopping at the next safe point")

    # -- Continue -----------------------------------------------------------------------------

    def continue_turn(self, turn_id: str, *, auto: bool) -> Outcome:
        """Continue a stopped turn with a new run (CONTRACT §7.7); refusals say why."""
        meta = self.ledger.meta(turn_id)
        refusal = self._continue_refusal(meta, auto)
        if refusal:
            return Outcome(False, refusal)
        count = int(meta.extra.get("auto_continues", 0) or 0)
        run_id = self.ids.new("run")
        fields: dict[str, str | int] = {
            "status": "queued",
            "next_run": run_id,
            "next_chunk": meta.chunk,
            "next_cause": "auto_continue" if auto else "continue",
            "can_continue": 0,
            "code": "",
            "dispatched": self.clock.now(),
            "redispatches": 0,
        }
        if auto:
            fields["auto_continues"] = count + 1
        expect = {"status": "stopped", "auto_continues": meta.extra.get("auto_continues", "")}
        taken = self.ledger.seize(meta, expect=expect, set_meta=fields, expire=False)
        if taken is None:
            return Outcome(False, "the turn was continued or changed by another request")
        self.ledger.client.delete(keys.turn_cancel(turn_id))
        self.launch(turn_id, run_id, meta.extra.get("mode", "foreground"))
        return Outcome(True, "continuing", run_id)

    def _continue_refusal(self, meta: TurnMeta, auto: bool) -> str:
        if meta.status != "stopped":
            return f"the turn is not stopped (status {meta.status})"
        if meta.extra.get("can_continue") != "1":
            return f"the turn cannot be continued (stopped by {meta.extra.get('code') or 'error'})"
        newest = self.ledger.client.lindex(
            keys.conversation_turns(meta.extra.get("conversation_id", "")), -1
        )
        if newest is not None and text(newest) != meta.turn_id:
            return "only the conversation's newest stop can be continued"
        code = meta.extra.get("code", "")
        if auto and code not in AUTO_CONTINUABLE:
            return f"no automatic continuation after {code or 'this stop'}"
        count = int(meta.extra.get("auto_continues", 0) or 0)
        if auto and count >= self.settings.max_auto_continue:
            limit = self.settings.max_auto_continue
            return f"automatic continuation limit reached ({count} of {limit})"
        return ""

    # -- a dead run ---------------------------------------------------------------------------

    def take_over(self, meta: TurnMeta, why: str) -> Outcome:
        """The run holding ``meta`` died: resume a background turn, stop a foreground one.

        Guarded by the holder, its epoch and its lease deadline as read, so a run that renewed
        its lease or finished in between is left alone.
        """
        expect = {
            "run_id": meta.run_id,
            "status": "running",
            "lease_until": meta.extra.get("lease_until", ""),
        }
        crashed = self._event(meta, RunEnded, reason="crashed", detail=why, run_id=meta.run_id)
        if self.is_cancelled(meta.turn_id):
            ended = self._event(meta, TurnEnded, status="cancelled", code="cancelled")
            fields: dict[str, str | int] = {"status": "cancelled", "code": "cancelled"}
            if (
                self.ledger.seize(
                    meta, expect=expect, events=[crashed, ended], set_meta=fields, expire=True
                )
                is None
            ):
                return Outcome(False, "the turn changed")
            self.unwatch(meta.turn_id)
            return Outcome(True, "cancelled")
        if meta.extra.get("mode") == "background":
            run_id = self.ids.new("run")
            fields = {
                "status": "resuming",
                "next_run": run_id,
                "next_chunk": meta.chunk,
                "next_cause": "reaper",
                "dispatched": self.clock.now(),
                "redispatches": 0,
            }
            if self.ledger.seize(meta, expect=expect, events=[crashed], set_meta=fields) is None:
                return Outcome(False, "the turn changed")
            self.launch(meta.turn_id, run_id, "background")
            log.warning("resuming a turn whose run died", turn_id=meta.turn_id, why=why)
            return Outcome(True, "resumed", run_id)
        return self.stop_loudly(meta, expect, "crashed", why, [crashed])

    def stop_loudly(
        self,
        meta: TurnMeta,
        expect: dict[str, str],
        code: str,
        detail: str,
        events: list[Event] | None = None,
    ) -> Outcome:
        """End the turn as stopped with Continue available, recording why."""
        ended = self._event(
            meta, TurnEnded, status="stopped", code=code, detail=detail, can_continue=True
        )
        fields: dict[str, str | int] = {
            "status": "stopped",
            "code": code,
            "can_continue": 1,
            "next_run": "",
        }
        taken = self.ledger.seize(
            meta, expect=expect, events=[*(events or []), ended], set_meta=fields, expire=True
        )
        if taken is None:
            return Outcome(False, "the turn changed")
        self.unwatch(meta.turn_id)
        log.error("turn stopped", turn_id=meta.turn_id, code=code, detail=detail)
        return Outcome(True, f"stopped: {code}")

    def _event(self, meta: TurnMeta, cls: type[Event], run_id: str = "", **fields: object) -> Event:
        return cls(  # type: ignore[misc, operator]
            event_id=self.ids.new("ev"),
            turn_id=meta.turn_id,
            run_id=run_id or meta.run_id or "control",
            chunk=meta.chunk,
            ts=self.clock.now(),
            **fields,
        )
