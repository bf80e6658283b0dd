"""A turn's events as AG-UI events (docs/chat.md), as a pure fold."""

from __future__ import annotations

from itertools import count
from typing import Any

from ledger.event_models import (
    ApprovalRequested,
    ModelStart,
    RunEnded,
    RunStarted,
    ToolDone,
    ToolStart,
    TurnEnded,
)
from worker.edges.http.aguievents import AguiEvents

_ids = count()


def env() -> dict[str, Any]:
    return {"event_id": f"e{next(_ids)}", "turn_id": "turn_1", "run_id": "r", "chunk": 0, "ts": 1.0}


def request(approval_id: str) -> ApprovalRequested:
    return ApprovalRequested(
        **env(),
        approval_id=approval_id,
        call_id=f"c-{approval_id}",
        tool="send_email",
        input={"to": "a"},
        signature="s",
        expires_at=0.0,
    )


def test_a_run_that_ends_waiting_finishes_with_its_requests_as_interrupts() -> None:
    events = AguiEvents("conv", "run-1")
    out = [
        m
        for e in [request("old"), RunStarted(**env()), ModelStart(**env(), step=0)]
        for m in events.map(e)
    ]
    out += events.map(request("ap_1"))
    out += events.map(RunEnded(**env(), reason="waiting"))
    assert events.paused and not events.done
    out += events.finish_waiting()  # the turn still waits
    assert [m["type"] for m in out][-4:] == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "RUN_FINISHED",
    ]
    (interrupt,) = out[-1]["outcome"]["interrupts"]  # the earlier run's request is not one
    assert interrupt["id"] == "ap_1" and interrupt["toolCallId"] == "c-ap_1"
    assert interrupt["expiresAt"] == "1970-01-01T00:00:00Z"
    assert events.done


def test_a_replay_goes_on_through_a_wait_that_was_decided_since() -> None:
    events = AguiEvents("conv", "run-1")
    for event in [request("ap_1"), RunEnded(**env(), reason="waiting")]:
        events.map(event)
    out = events.map(RunStarted(**env(), cause="approval"))
    out += events.map(
        ToolStart(**env(), call_id="c-ap_1", tool="send_email", signature="s", approval_id="ap_1")
    )
    out += events.map(ToolDone(**env(), call_id="c-ap_1", tool="send_email", result="sent"))
    out += events.map(TurnEnded(**env(), status="completed"))
    assert [m["type"] for m in out] == ["TOOL_CALL_RESULT", "RUN_FINISHED"]
    assert out[-1]["outcome"] == {"type": "success"}


def test_a_stopped_turn_is_a_run_error_with_its_code() -> None:
    events = AguiEvents("conv", "run-1")
    (error,) = events.map(TurnEnded(**env(), status="stopped", code="cancelled", detail="Stop"))
    assert error == {"type": "RUN_ERROR", "message": "the turn stopped: Stop", "code": "cancelled"}
