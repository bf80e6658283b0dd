"""Schedules of turns (docs/semantics.md, schedules): a message started as a new background turn
at a time (``at``) or again and again (``every``: seconds or cron), by whichever worker's reaper
looks first, with no beat process to run.

Each tick starts exactly one turn across any number of workers, crashes and restarts: a reaper's
look at a due schedule claims the tick (``ledger.schedules``: one script, so one reaper at a time
holds it), starts the tick's turn under an id derived from the schedule and the tick, and then
advances the schedule past it. A repeat of the tick (the claim expired with a worker that died
in between, or a second reaper whose create lost the race) finds that turn by its id and only
advances: no second turn, no second launch. Which tick a due look fires, and when the next one
is, is ``worker.lifecycle.ticks``'s decision.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from functools import cached_property

import structlog

from ledger.ids import ID_RULE, is_id
from ledger.paging import Cursor
from ledger.schedules import Schedule, ScheduleIndex
from worker.base.errors import ConfigError, InvalidInput, QueueFull, Refused
from worker.engine.models import make_model
from worker.lifecycle.base import LifecycleBase, NewTurn, is_blank
from worker.lifecycle.tenancy import tenant_of
from worker.lifecycle.ticks import CATCH_UP, Every, decide, first_tick, parse_every

log = structlog.get_logger("dres.schedules")

#: how long a reaper's claim on a due tick holds off the others (ms): beyond the start of one
#: turn; a claim that outlives its holder (a crash, a paused process) lets the next look take the
#: tick, so it bounds how late a tick fires after a crash. Short is safe: a second reaper that
#: fires the tick while a slow holder still does finds (or makes, once) the same turn, its id
#: derived from the tick, and only one advance of the schedule past the tick is taken.
CLAIM_MS = 2_000
#: due schedules looked at per sweep, the most overdue first
SCHEDULE_BATCH = 64
#: the earliest and latest ``at`` kept (ms): an ISO 8601 time's years are 1-9999, and one
#: whose offset takes it past them in UTC is kept at the bound (long past, or far ahead, either way)
EARLIEST_AT_MS = round(datetime(1, 1, 1, tzinfo=UTC).timestamp() * 1000)
LATEST_AT_MS = round(datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC).timestamp() * 1000)
#: refusals of a tick's turn that skip the tick (logged) rather than retry it
SKIPPED = (QueueFull, Refused, InvalidInput, ConfigError)


def tick_turn_id(schedule_id: str, tick_ms: int) -> str:
    """The id of the turn a schedule's tick starts: derived, so a repeat of the tick finds it."""
    digest = hashlib.sha256(f"{schedule_id}:{tick_ms}".encode()).hexdigest()
    return "turn_" + digest[:32]


def parse_at(at: str | datetime) -> int:
    """``at`` (ISO 8601 with an offset, or an aware datetime) in ms; else ``InvalidInput``
    naming ``at``."""
    if isinstance(at, str):
        try:
            at = datetime.fromisoformat(at)
        except ValueError:
            raise InvalidInput(f"at: not an ISO 8601 time: {at!r}") from None
    if at.tzinfo is None or at.utcoffset() is None:
        raise InvalidInput(f"at: {at.isoformat()} has no offset (add Z or +HH:MM)")
    return min(max(round(at.timestamp() * 1000), EARLIEST_AT_MS), LATEST_AT_MS)


class Schedules(LifecycleBase):
    """The schedule steps of ``Lifecycle``; its ``enqueue`` starts a tick's turn."""

    @cached_property
    def schedule_records(self) -> ScheduleIndex:
        """The schedules' records (``ledger.schedules``)."""
        return ScheduleIndex(self.ledger)

    def enqueue_for_tick(self, schedule: Schedule, tick_ms: int, turn_id: str) -> NewTurn:
        raise NotImplementedError  # ``Lifecycle.enqueue`` with the schedule's options

    def add_schedule(
        self,
        message: str,
        *,
        at: str | datetime | None = None,
        every: int | str | None = None,
        conversation_id: str | None = None,
        model: str | None = None,
        tenant: str | None = None,
        catch_up: str | None = None,
    ) -> Schedule:
        """A new schedule of ``message`` (docs/semantics.md, schedules): exactly one of ``at``
        and ``every``; every field checked before anything is recorded (``InvalidInput``
        naming it)."""
        if is_blank(message):
            raise InvalidInput("message is empty")
        if (at is None) == (every is None):
            raise InvalidInput("at, every: give exactly one of at and every")
        catch_up = catch_up or "one"
        if catch_up not in CATCH_UP:
            raise InvalidInput(f"catch_up must be one or none, not {catch_up!r}")
        if conversation_id is not None and not is_id(conversation_id):
            raise InvalidInput(f"conversation_id: {ID_RULE}, not {conversation_id!r}")
        tenant = tenant_of(tenant)
        make_model(model or self.settings.model, self.clock)  # a bad spec fails here
        repeat: Every | None = None if every is None else parse_every(every)
        at_ms = None if at is None else parse_at(at)
        made_ms = self.ms()
        next_ms = first_tick(repeat, at_ms, made_ms)  # None: a cron no date matches
        schedule = Schedule(
            schedule_id=self.ids.new("sched"),
            message=message,
            conversation_id=conversation_id,
            model=model,
            tenant=tenant,
            at_ms=at_ms,
            every=every,
            catch_up=catch_up,
            next_ms=next_ms,
            last_turn_id=None,
            created_ms=made_ms,
        )
        self.schedule_records.make(schedule)
        log.info("schedule made", schedule_id=schedule.schedule_id, next_ms=next_ms)
        return schedule

    def schedules(
        self, cursor: Cursor | str | None = None, limit: int = 50
    ) -> tuple[list[Schedule], Cursor | None]:
        """Schedules, newest first, paged (``ledger.paging``)."""
        return self.schedule_records.page(limit=limit, cursor=cursor)

    def schedule(self, schedule_id: str) -> Schedule | None:
        """The schedule (None: there is none)."""
        _check_id(schedule_id)
        return self.schedule_records.get(schedule_id)

    def remove_schedule(self, schedule_id: str) -> bool:
        """Delete the schedule: no tick of it fires after (one being fired now may still start
        its turn). False when there was none."""
        _check_id(schedule_id)
        removed = self.schedule_records.delete(schedule_id)
        if removed:
            log.info("schedule deleted", schedule_id=schedule_id)
        return removed

    def fire_due_schedules(self) -> dict[str, str]:
        """The reaper's look at the due schedules: each due tick fired once (or skipped, by its
        ``catch_up``), the schedule advanced; what was done to each."""
        now_ms = self.ms()
        done: dict[str, str] = {}
        for schedule_id in self.schedule_records.due(now_ms, SCHEDULE_BATCH):
            try:
                done[schedule_id] = self.fire_schedule(schedule_id, now_ms)
            except Exception as e:  # one schedule's failure holds up none of the others
                log.warning("could not fire a schedule", schedule_id=schedule_id, error=repr(e))
                done[schedule_id] = "failed"
        return done

    def fire_schedule(self, schedule_id: str, now_ms: int) -> str:
        """One due look at a schedule: claim its due tick, start the tick's turn (or find it),
        advance. Returns what was done."""
        records = self.schedule_records
        schedule = records.get(schedule_id)
        if schedule is None or schedule.next_ms is None:
            return "gone"
        due = schedule.next_ms
        if due > now_ms:
            return "not due"
        every = None if schedule.every is None else parse_every(schedule.every)
        firing = decide(every, schedule.catch_up, due, now_ms, schedule.created_ms)
        claimed = records.claim(schedule_id, due, now_ms, CLAIM_MS, firing.tick_ms)
        if claimed is None:
            return "held"
        self.failpoints.hit("schedule.claimed")  # chaos only: a crash or a pause holding the claim
        turn_id = self.start_tick(schedule, int(claimed)) if claimed else None
        self.failpoints.hit("schedule.started")  # chaos only: a crash before the advance
        if not records.advance(schedule_id, due, firing.next_ms, turn_id):
            return "moved on"
        return "skipped" if turn_id is None else "fired"

    def start_tick(self, schedule: Schedule, tick_ms: int) -> str | None:
        """The turn of ``schedule``'s tick ``tick_ms``: found by its id, or started; None when
        it was refused (a tenant's full queue, a conversation that refuses it): the tick is
        skipped."""
        turn_id = tick_turn_id(schedule.schedule_id, tick_ms)
        if self.store.lines.metas([turn_id])[0] is not None:
            return turn_id  # a repeat of the tick: its turn is there
        try:
            turn = self.enqueue_for_tick(schedule, tick_ms, turn_id)
        except SKIPPED as e:
            log.warning(
                "a schedule's tick was refused: skipped",
                schedule_id=schedule.schedule_id,
                tick_ms=tick_ms,
                error=str(e),
            )
            return None
        if not turn.existed:
            log.info("schedule fired", schedule_id=schedule.schedule_id, turn_id=turn_id)
        return turn.turn_id


def _check_id(schedule_id: str) -> None:
    if not is_id(schedule_id):
        raise InvalidInput(f"schedule_id: {ID_RULE}, not {schedule_id!r}")
