"""The reaper: finds turns nobody is moving and moves them, loudly (CONTRACT §2, §7.7).

It looks at the turns in the active index whose time has come:
- a running turn whose lease ran out (its worker was killed, or the hard limit struck): a
  background turn resumes under a new run, a foreground one stops with Continue available;
- a successor recorded but never claimed (its message was lost): the same run id is sent again,
  up to ``max_redispatches`` times, then the turn stops with Continue available;
- a finished turn leaves the index.
Every action is an atomic claim (``TurnControl``), so every worker may run a reaper.
"""

from __future__ import annotations

import threading

import structlog

from ledger import keys
from ledger.codec import text
from ledger.errors import UnknownTurn
from worker.control import FINISHED, TurnControl

log = structlog.get_logger("dres.reaper")

#: turns looked at per sweep
BATCH = 100


class Reaper:
    def __init__(self, control: TurnControl) -> None:
        self.control = control
        self.ledger = control.ledger
        self.settings = control.settings
        self.clock = control.clock

    def sweep(self) -> dict[str, str]:
        """Look at every due turn once; returns what was done to each."""
        now_ms = int(self.clock.now() * 1000)
        due = self.ledger.client.zrangebyscore(
            keys.active_turns(), "-inf", now_ms, start=0, num=BATCH
        )
        return {text(turn_id): self.check(text(turn_id), now_ms) for turn_id in due}

    def check(self, turn_id: str, now_ms: int) -> str:
        control = self.control
        try:
            meta = self.ledger.meta(turn_id)
        except UnknownTurn:
            control.unwatch(turn_id)
            return "gone"
        if meta.status in FINISHED or meta.status == "stopped":
            control.unwatch(turn_id)
            return "finished"
        if meta.status == "running":
            lease_until = int(meta.extra.get("lease_until", "0") or 0)
            if lease_until > now_ms:
                control.watch(turn_id, (lease_until - now_ms) / 1000)
                return "alive"
            return control.take_over(meta, "lease expired: the run's worker died").reason
        if not meta.next_run:
            control.watch(turn_id, self.settings.handoff_grace_s)
            return "idle"
        waited = self.clock.now() - float(meta.extra.get("dispatched", 0) or 0)
        if waited < self.settings.handoff_grace_s:
            control.watch(turn_id, self.settings.handoff_grace_s - waited)
            return "waiting"
        sent = int(meta.extra.get("redispatches", 0) or 0)
        if sent < self.settings.max_redispatches:
            self.ledger.client.hset(
                keys.turn_meta(turn_id),
                mapping={"redispatches": sent + 1, "dispatched": self.clock.now()},
            )
            control.launch(turn_id, meta.next_run, meta.extra.get("mode", "foreground"))
            log.warning("re-dispatched a lost handoff", turn_id=turn_id, run_id=meta.next_run)
            return "redispatched"
        detail = f"the next chunk was sent {sent + 1} times and never started"
        expect = {"next_run": meta.next_run}
        return control.stop_loudly(meta, expect, "handoff_lost", detail).reason


class ReaperThread(threading.Thread):
    """Sweeps every ``reaper_interval_s`` in the worker's main process until stopped."""

    def __init__(self, reaper: Reaper) -> None:
        super().__init__(name="dres-reaper", daemon=True)
        self.reaper = reaper
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(self.reaper.settings.reaper_interval_s):
            try:
                actions = self.reaper.sweep()
            except Exception as e:  # a sweep must never kill the thread; the next one retries
                log.error("reaper sweep failed", error=repr(e))
                continue
            moved = {t: a for t, a in actions.items() if a not in {"alive", "waiting"}}
            if moved:
                log.info("reaper sweep", actions=moved)

    def stop(self) -> None:
        self.stopping.set()
