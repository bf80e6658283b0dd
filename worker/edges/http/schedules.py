"""``/v1/schedules`` (docs/http-api.md, "Schedules"): make, list, read and delete schedules of
turns, and the bodies they take and answer. The schedule steps are the lifecycle's
(``worker.lifecycle.schedules``); every field is checked there, and what its checks refuse is a
422 naming the field (``InvalidInput``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Response
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from starlette.exceptions import HTTPException

from ledger.ids import ID, TENANT
from ledger.paging import CURSOR_PATTERN, encode_cursor
from ledger.schedules import Schedule
from worker.edges.http.deps import RT, authorize
from worker.edges.http.models import admit_model
from worker.edges.http.schemas import (
    CREATE_ERRORS,
    ERRORS,
    WRITE_ERRORS,
    Message,
)
from worker.edges.http.tenants import TenantHeader, tenant_of
from worker.lifecycle.ticks import EVERY_PATTERN, MOST_EVERY_S

#: characters: the longest cron expression taken
MAX_EVERY_CHARS = 200

#: a whole number (a JSON number such as 274.0 is one too, as JSON Schema reads it), or a string
Every = int | Annotated[str, Field(min_length=1, max_length=MAX_EVERY_CHARS)]


def _document(schema: dict[str, Any]) -> None:
    """The body as the server takes it, exactly, for a client or a fuzzer: ``at`` a date-time,
    ``every`` seconds or a string of ``EVERY_PATTERN``, and exactly one of them (neither one
    null: left out)."""
    properties = schema["properties"]
    properties["at"] = {
        "type": "string",
        "format": "date-time",
        "description": "one tick at this time (ISO 8601 with an offset); or `every`",
    }
    properties["every"] = {
        "anyOf": [
            {"type": "integer", "minimum": 1, "maximum": MOST_EVERY_S},
            {"type": "string", "maxLength": MAX_EVERY_CHARS, "pattern": EVERY_PATTERN},
        ],
        "description": "a tick every so many seconds (a number, or digits), or a five-field "
        "cron expression in UTC; or `at`",
    }
    schema["oneOf"] = [{"required": ["at"]}, {"required": ["every"]}]


class ScheduleRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_document)
    message: Message
    conversation_id: str | None = Field(
        None,
        pattern=ID,
        description="each tick's turn joins this conversation (absent: a new conversation per "
        "tick)",
    )
    model: str | None = Field(
        None,
        max_length=500,
        description="a model spec, as `POST /v1/turns` takes it (absent: the server's default)",
    )
    tenant: str | None = Field(
        None, pattern=TENANT, description="the turns' tenant (a Dres-Tenant header wins)"
    )
    at: AwareDatetime | None = None
    every: Every | None = None
    catch_up: Literal["one", "none"] = Field(
        "one",
        description="ticks missed while no worker ran: fire the newest once (`one`), or none",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_null_times(cls, data: Any) -> Any:
        # absent, not null: the document says a time or seconds when given
        for name in ("at", "every"):
            if isinstance(data, dict) and name in data and data[name] is None:
                raise ValueError(f"{name}: null is no value here: leave it out")
        return data

    @field_validator("at", mode="before")
    @classmethod
    def _a_string(cls, value: Any) -> Any:
        # a string only: pydantic would read a number as seconds since the epoch
        if value is not None and not isinstance(value, str | datetime):
            raise ValueError("an ISO 8601 time with an offset, as a string")
        return value

    @field_validator("every", mode="before")
    @classmethod
    def _not_a_truth_value(cls, value: Any) -> Any:
        # a JSON true is no number of seconds (pydantic would read it as 1)
        if isinstance(value, bool):
            raise ValueError("seconds or a cron expression, not true or false")
        return value


class ScheduleCreated(BaseModel):
    schedule_id: str
    #: its first tick, ISO 8601 UTC
    next_at: str | None


class ScheduleOut(BaseModel):
    schedule_id: str
    message: str
    conversation_id: str | None
    model: str | None
    tenant: str
    at: str | None
    every: int | str | None
    catch_up: Literal["one", "none"]
    #: its next tick, ISO 8601 UTC; null once an ``at`` fired
    next_at: str | None
    #: the turn its last fired tick started
    last_turn_id: str | None


class ScheduleList(BaseModel):
    items: list[ScheduleOut]
    #: pass as ``cursor`` for the next page; null on the last
    next_cursor: str | None


def iso(ms: int | None) -> str | None:
    """A time in ms as ISO 8601 UTC (``…Z``); None stays None."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def schedule_out(schedule: Schedule) -> ScheduleOut:
    return ScheduleOut(
        schedule_id=schedule.schedule_id,
        message=schedule.message,
        conversation_id=schedule.conversation_id,
        model=schedule.model,
        tenant=schedule.tenant,
        at=iso(schedule.at_ms),
        every=schedule.every,
        catch_up="none" if schedule.catch_up == "none" else "one",
        next_at=iso(schedule.next_ms),
        last_turn_id=schedule.last_turn_id,
    )


router = APIRouter(prefix="/v1/schedules", dependencies=[Depends(authorize)], responses=ERRORS)
ScheduleId = Annotated[str, Path(pattern=ID, description="the schedule's id")]


@router.post(
    "",
    status_code=201,
    response_model=ScheduleCreated,
    responses={**WRITE_ERRORS, **CREATE_ERRORS},
)
def create_schedule(
    rt: RT, body: ScheduleRequest, dres_tenant: TenantHeader = None
) -> ScheduleCreated:
    """A schedule of turns: ``at`` one time or ``every`` so many seconds or cron time; each tick
    starts one background turn of ``message``. 422 naming ``at`` or ``every`` when it is not one
    (a naive time, a malformed cron) or both or neither are given."""
    admit_model(rt, body.model)
    if body.conversation_id and rt.lifecycle.store.conversations.erased(body.conversation_id):
        raise HTTPException(
            409, f"conversation {body.conversation_id!r} was deleted: start a new one"
        )
    schedule = rt.lifecycle.add_schedule(
        body.message,
        at=body.at,
        every=body.every,
        conversation_id=body.conversation_id,
        model=body.model,
        tenant=tenant_of(body.tenant, dres_tenant),
        catch_up=body.catch_up,
    )
    return ScheduleCreated(schedule_id=schedule.schedule_id, next_at=iso(schedule.next_ms))


@router.get("", response_model=ScheduleList)
def list_schedules(
    rt: RT,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[
        str | None, Query(pattern=CURSOR_PATTERN, description="a page's next_cursor")
    ] = None,
) -> ScheduleList:
    """Schedules, newest first, paged."""
    found, nxt = rt.lifecycle.schedules(cursor, limit)
    return ScheduleList(
        items=[schedule_out(s) for s in found],
        next_cursor=None if nxt is None else encode_cursor(nxt),
    )


@router.get("/{schedule_id}", response_model=ScheduleOut)
def get_schedule(rt: RT, schedule_id: ScheduleId) -> ScheduleOut:
    """The schedule: its next tick and the turn its last tick started."""
    found = rt.lifecycle.schedule(schedule_id)
    if found is None:
        raise HTTPException(404, f"unknown schedule {schedule_id!r}")
    return schedule_out(found)


@router.delete("/{schedule_id}", status_code=204, responses=WRITE_ERRORS)
def delete_schedule(rt: RT, schedule_id: ScheduleId) -> Response:
    """Delete the schedule: no later tick of it starts a turn."""
    if not rt.lifecycle.remove_schedule(schedule_id):
        raise HTTPException(404, f"unknown schedule {schedule_id!r}")
    return Response(status_code=204)
