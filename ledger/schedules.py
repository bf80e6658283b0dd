"""Schedules' records (docs/semantics.md, schedules): each schedule, the index of the due ones,
and the listing.

A schedule is a hash (its message and the new turns' options, ``at`` or ``every``, ``catch_up``,
its next tick and the last turn it started), listed in a sorted set by when it was made and, while
it has a next tick, in a sorted set by that tick (ms), which the workers' reapers read for the
due ones. Every key is in one Redis slot (``keys.SCHEDULES``) and every change is one script
(``lua/schedule.lua``): a due tick is **claimed** (only while the schedule's next tick is still
that one and no unexpired claim is held) before its turn is started, and the schedule is
**advanced** past it (only while its next tick is still that one) after. The turn's id is derived
from the schedule and the tick, so a claim that expired with its holder (a crash between the turn
and the advance) is taken by another reaper, which finds that turn and only advances. Deleting a
schedule removes its hash and index entries: a tick being fired meanwhile may still start its one
turn, whose advance then finds nothing and does nothing.

Times here are ms since the epoch; what a tick means (seconds, cron, ``at``) is the worker's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ledger import keys
from ledger.codec import text
from ledger.paging import Cursor, Row, read_page
from ledger.store import Ledger, MetaValue, script


@dataclass(frozen=True, slots=True)
class Schedule:
    schedule_id: str
    message: str
    conversation_id: str | None
    model: str | None
    tenant: str
    #: ``at``'s time (ms); None: the schedule repeats (``every``)
    at_ms: int | None
    #: ``every`` as given: seconds, or a cron expression; None: an ``at``
    every: int | str | None
    #: ``one`` or ``none``
    catch_up: str
    #: the next tick (ms); None: spent (an ``at`` that fired)
    next_ms: int | None
    #: the turn the last fired tick started
    last_turn_id: str | None
    created_ms: int
    #: the tick a claim being held (or left by a crash) fires: its ms, "" nothing; None: no claim
    firing: str | None = None

    def fields(self) -> dict[str, MetaValue]:
        """The hash's fields but ``next_at`` (written by the script)."""
        return {
            "schedule_id": self.schedule_id,
            "message": self.message,
            "conversation_id": self.conversation_id or "",
            "model": self.model or "",
            "tenant": self.tenant,
            "at": "" if self.at_ms is None else self.at_ms,
            "every": "" if self.every is None else json.dumps(self.every),
            "catch_up": self.catch_up,
            "last_turn_id": self.last_turn_id or "",
            "created": self.created_ms,
        }


def _ms(raw: str) -> int | None:
    return int(raw) if raw else None


def schedule_from_hash(raw: dict[Any, Any]) -> Schedule:
    found = {text(k): text(v) for k, v in raw.items()}
    every = found.get("every", "")
    return Schedule(
        schedule_id=found["schedule_id"],
        message=found["message"],
        conversation_id=found.get("conversation_id") or None,
        model=found.get("model") or None,
        tenant=found["tenant"],
        at_ms=_ms(found.get("at", "")),
        every=json.loads(every) if every else None,
        catch_up=found.get("catch_up", "one"),
        next_ms=_ms(found.get("next_at", "")),
        last_turn_id=found.get("last_turn_id") or None,
        created_ms=int(found.get("created", "0")),
        firing=found.get("firing"),
    )


def _tick(ms: int | None) -> str:
    return "" if ms is None else str(ms)


class ScheduleIndex:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.client = ledger.client
        self._script = self.client.register_script(script("schedule.lua"))

    def _call(self, op: str, schedule_id: str, *args: MetaValue) -> Any:
        script_keys = [keys.schedule(schedule_id), keys.schedules_due(), keys.schedules_listed()]
        argv: list[MetaValue] = [op, schedule_id, *args]
        return self.ledger.retry(lambda: self._script(keys=script_keys, args=argv))

    def make(self, schedule: Schedule) -> bool:
        """Record a new schedule, due at its ``next_ms``; False (nothing changed) when its id is
        taken."""
        flat: list[MetaValue] = []
        for name, value in schedule.fields().items():
            flat += [name, value]
        made = self._call(
            "make", schedule.schedule_id, _tick(schedule.next_ms), schedule.created_ms, *flat
        )
        return bool(int(made))

    def get(self, schedule_id: str) -> Schedule | None:
        key = keys.schedule(schedule_id)
        raw = self.ledger.retry(lambda: self.client.hgetall(key), "read")
        return schedule_from_hash(raw) if raw else None

    def due(self, now_ms: int, count: int) -> list[str]:
        """The schedules whose next tick is at or before ``now_ms``, the most overdue first."""
        found: Any = self.ledger.retry(
            lambda: self.client.zrangebyscore(
                keys.schedules_due(), "-inf", now_ms, start=0, num=count
            ),
            "read",
        )
        return [text(s) for s in found]

    def claim(
        self, schedule_id: str, tick_ms: int, now_ms: int, hold_ms: int, fire: int | None
    ) -> str | None:
        """Claim the due tick ``tick_ms`` for ``hold_ms``: the tick to fire (``fire``'s ms, or an
        expired claim's own choice; "" none), or None when the schedule moved on, is gone, or
        another claim is held."""
        reply = self._call("claim", schedule_id, tick_ms, now_ms, hold_ms, _tick(fire))
        return text(reply[1]) if int(reply[0]) else None

    def advance(
        self, schedule_id: str, tick_ms: int, next_ms: int | None, turn_id: str | None
    ) -> bool:
        """Move the schedule past ``tick_ms`` to ``next_ms`` (None: spent), recording the turn
        the tick started; the claim goes. False when it moved on or is gone."""
        done = self._call("advance", schedule_id, tick_ms, _tick(next_ms), turn_id or "")
        return bool(int(done))

    def delete(self, schedule_id: str) -> bool:
        """Remove the schedule and its index entries; False when there was none."""
        return bool(int(self._call("delete", schedule_id)))

    def page(
        self, *, limit: int, cursor: Cursor | str | None = None
    ) -> tuple[list[Schedule], Cursor | None]:
        """Schedules, newest first, a page of at most ``limit`` after ``cursor``
        (``ledger.paging``), and the next page's cursor or None."""
        return read_page(
            self.client, keys.schedules_listed(), self._listed, limit=limit, cursor=cursor
        )

    def _listed(self, rows: Sequence[Row]) -> list[tuple[str, int, Schedule]]:
        pipe = self.client.pipeline(transaction=False)
        for schedule_id, _ in rows:
            pipe.hgetall(keys.schedule(schedule_id))
        found = pipe.execute()
        return [
            (schedule_id, score, schedule_from_hash(raw))
            for (schedule_id, score), raw in zip(rows, found, strict=True)
            if raw
        ]
