"""Ledger events and their dict form (docs/events.md, docs/architecture.md: ``parse_event``)."""

from __future__ import annotations

from typing import Any, get_args

import pytest

from ledger.errors import EventDecodeError
from ledger.events import (
    ApprovalDecided,
    ApprovalRequested,
    Clear,
    EarlierTurn,
    Event,
    Inherited,
    ModelDone,
    ModelStart,
    Resumed,
    RunEnded,
    RunStarted,
    Text,
    ToolBlocked,
    ToolDone,
    ToolStart,
    TurnContext,
    TurnEnded,
    TurnStarted,
    parse_event,
)
from ledger.signature import input_signature

#: the fields every event has (docs/events.md), with fixed values
BASE: dict[str, Any] = {"event_id": "e1", "turn_id": "t1", "run_id": "r1", "chunk": 2, "ts": 1.5}

SIGNATURE = input_signature({"to": "a@x.io"})

TEXT = Text(**BASE, text="Sending it…")
TOOL_START = ToolStart(
    **BASE,
    call_id="c1",
    tool="send_email",
    input={"to": "a@x.io", "tags": ["x", 1, 2.5, None, True]},
    signature=SIGNATURE,
    read_only=False,
)
TOOL_DONE = ToolDone(**BASE, call_id="c1", tool="send_email", result={"id": 7}, is_error=True)

ONE_OF_EACH: list[Event] = [
    TurnStarted(
        **BASE,
        conversation_id="c1",
        message="hi",
        mode="background",
        prior_turn_note="did X",
        message_id="m1",
        fork_of="t0",
        inherits=("t0", "t00"),
        replaces=("t0",),
    ),
    TurnContext(
        **BASE,
        earlier_turns=(EarlierTurn(turn_id="t0", message="hello", answer="hi"),),
        prior_turn_note="did Y",
    ),
    Inherited(**BASE, turns=("t0",), note="Tool calls already recorded…"),
    RunStarted(**BASE, cause="redelivery", epoch=3),
    Resumed(**BASE, cause="next_chunk", note="Tool calls already recorded…"),
    ModelStart(**BASE, step=4, resume_step=1),
    ModelDone(**BASE, tool_calls=2),
    TEXT,
    TOOL_START,
    TOOL_DONE,
    ToolBlocked(
        **BASE,
        call_id="c2",
        tool="send_email",
        input={"to": "a@x.io"},
        signature=SIGNATURE,
        reason="completed",
        matched_call_id="c1",
        inherited_from="t0",
        result={"id": 7},
        is_error=False,
    ),
    ApprovalRequested(
        **BASE,
        approval_id="apr_1",
        call_id="c3",
        tool="send_email",
        input={"to": "a@x.io"},
        signature=SIGNATURE,
        expires_at=1_700_086_400.0,
    ),
    ApprovalDecided(**BASE, approval_id="apr_1", decision="deny", reason="wrong list", by="ops"),
    Clear(**BASE, reason="abandoned partial"),
    RunEnded(**BASE, reason="waiting", detail="waiting for a person's decision"),
    TurnEnded(**BASE, status="stopped", code="journal_unreadable", can_continue=True),
]


#: the event types docs/events.md names
CONTRACT_TYPES = {
    "turn_started",
    "run_started",
    "model_start",
    "text",
    "tool_start",
    "tool_done",
    "tool_blocked",
    "approval_requested",
    "approval_decided",
    "clear",
    "run_ended",
    "turn_ended",
}


def union_types() -> set[str]:
    union = get_args(Event)[0]
    return {get_args(model.model_fields["type"].annotation)[0] for model in get_args(union)}


def test_every_event_type_of_the_contract_has_a_model() -> None:
    assert union_types() >= CONTRACT_TYPES


def test_these_tests_hold_one_example_of_every_event_type() -> None:
    types = [event.type for event in ONE_OF_EACH]
    assert sorted(types) == sorted(union_types())


@pytest.mark.parametrize("event", ONE_OF_EACH, ids=lambda e: e.type)
def test_an_event_round_trips_through_its_dict_form(event: Event) -> None:
    parsed = parse_event(event.model_dump(mode="json"))
    assert parsed == event
    assert type(parsed) is type(event)


@pytest.mark.parametrize("event", ONE_OF_EACH, ids=lambda e: e.type)
def test_the_dict_form_carries_type_turn_run_chunk_and_timestamp(event: Event) -> None:
    data = event.model_dump(mode="json")
    assert data["type"] == event.type
    assert (data["turn_id"], data["run_id"], data["chunk"], data["ts"]) == ("t1", "r1", 2, 1.5)


def test_the_dict_form_carries_the_schema_version() -> None:
    assert Text(**BASE, text="x").model_dump(mode="json")["v"] == 1


def test_tool_events_carry_the_fields_the_contract_names() -> None:
    start = TOOL_START.model_dump(mode="json")
    done = TOOL_DONE.model_dump(mode="json")
    assert {"call_id", "tool", "input", "signature", "read_only"} <= start.keys()
    assert {"call_id", "tool", "result", "is_error"} <= done.keys()


def test_an_unknown_type_raises_an_event_decode_error_naming_it() -> None:
    with pytest.raises(EventDecodeError, match="tool_exploded"):
        parse_event({**BASE, "type": "tool_exploded"})


def test_a_missing_type_raises_an_event_decode_error_naming_the_type_field() -> None:
    with pytest.raises(EventDecodeError, match="type"):
        parse_event(dict(BASE))


@pytest.mark.parametrize("field", ["event_id", "turn_id", "run_id", "chunk", "ts"])
def test_a_missing_common_field_raises_an_event_decode_error_naming_it(field: str) -> None:
    data = {**BASE, "type": "text", "text": "x"}
    del data[field]
    with pytest.raises(EventDecodeError, match=field):
        parse_event(data)


def test_a_missing_field_of_a_type_raises_an_event_decode_error_naming_it() -> None:
    data = TOOL_START.model_dump(mode="json")
    del data["signature"]
    with pytest.raises(EventDecodeError, match="signature"):
        parse_event(data)


def test_an_unknown_schema_version_raises_an_event_decode_error_naming_v() -> None:
    with pytest.raises(EventDecodeError, match=r"\bv\b") as raised:
        parse_event({**BASE, "type": "text", "text": "x", "v": 99})
    assert "text.v" in str(raised.value)


@pytest.mark.parametrize("data", [[1, 2], "an event", None, 42], ids=repr)
def test_a_non_dict_raises_an_event_decode_error_naming_what_it_got(data: Any) -> None:
    with pytest.raises(EventDecodeError, match=type(data).__name__):
        parse_event(data)


def test_a_wrong_field_type_raises_an_event_decode_error_naming_the_field() -> None:
    with pytest.raises(EventDecodeError, match="chunk"):
        parse_event({**BASE, "type": "text", "text": "x", "chunk": -1})


def test_unknown_extra_fields_are_ignored() -> None:
    data = {**TEXT.model_dump(mode="json"), "added_by_a_newer_writer": {"x": 1}}
    event = parse_event(data)
    assert event == TEXT
    assert "added_by_a_newer_writer" not in event.model_dump(mode="json")


def test_a_decode_error_wraps_the_validation_error() -> None:
    with pytest.raises(EventDecodeError) as raised:
        parse_event({**BASE, "type": "nope"})
    assert raised.value.__cause__ is not None
