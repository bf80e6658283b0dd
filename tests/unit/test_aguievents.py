"""A turn's events as AG-UI events (docs/chat.md), as a pure fold."""

from __future__ import annotations

from itertools import count
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ledger.event_models import (
    ApprovalRequested,
    Event,
    ModelDone,
    ModelStart,
    RunEnded,
    RunStarted,
    Text,
    TokenUsage,
    ToolDone,
    ToolStart,
    TurnEnded,
)
from ledger.usage import UsageFold
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


def agui(**kw: Any) -> AguiEvents:
    return AguiEvents("conv", "run-1", turn_id="turn_1", **kw)


def fold(events: list[Event], **kw: Any) -> list[dict[str, Any]]:
    agui_events = agui(**kw)
    out = agui_events.opening()
    for event in events:
        out += agui_events.map(event)
    return out


def types(messages: list[dict[str, Any]]) -> list[str]:
    return [m["type"] for m in messages]


def spent(input_tokens: int, output_tokens: int) -> TokenUsage:
    return TokenUsage(input_tokens=input_tokens, output_tokens=output_tokens)


def test_a_run_that_ends_waiting_finishes_with_its_requests_as_interrupts() -> None:
    events = agui()
    out = [
        m
        for e in [request("old"), RunStarted(**env()), ModelStart(**env(), step=0)]
        for m in events.map(e)
    ]
    out += events.map(request("ap_1"))
    out += events.map(RunEnded(**env(), reason="waiting"))
    assert events.paused and not events.done
    out += events.finish_waiting()  # the turn still waits
    assert types(out)[-5:] == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "STEP_FINISHED",  # the model call asking for it, cut by its run's end
        "RUN_FINISHED",
    ]
    (interrupt,) = out[-1]["outcome"]["interrupts"]  # the earlier run's request is not one
    assert interrupt["id"] == "ap_1" and interrupt["toolCallId"] == "c-ap_1"
    assert interrupt["expiresAt"] == "1970-01-01T00:00:00Z"
    assert out[-1]["result"] == {
        "turn_id": "turn_1",
        "status": "waiting",
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }
    assert events.done


def test_a_replay_goes_on_through_a_wait_that_was_decided_since() -> None:
    events = agui()
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


def test_a_run_that_begins_at_a_wait_still_open_finishes_with_the_requests_left() -> None:
    """A run whose input answered a client's call but not the turn's approval request."""
    events = agui(answered=["c1"], waited_run="r", asking=[request("ap_2")])
    out = events.map(ToolDone(**env(), call_id="c1", tool="pick", result="red"))
    assert out == [] and events.paused
    (finished,) = events.finish_waiting()
    (interrupt,) = finished["outcome"]["interrupts"]
    assert (interrupt["id"], interrupt["toolCallId"]) == ("ap_2", "c-ap_2")
    assert finished["result"]["status"] == "waiting"


def test_a_stopped_turn_is_a_run_error_naming_its_code_and_whether_continue_is_available() -> None:
    events = agui()
    (error,) = events.map(
        TurnEnded(**env(), status="stopped", code="cancelled", detail="Stop", can_continue=True)
    )
    assert error == {
        "type": "RUN_ERROR",
        "message": "the turn stopped (cancelled: Stop); Continue is available",
        "code": "cancelled",
    }
    (error,) = agui().map(TurnEnded(**env(), status="stopped", code="crashed"))
    assert error["message"] == "the turn stopped (crashed); Continue is not available"


def test_each_model_call_is_a_step_named_by_its_place_in_the_turn() -> None:
    out = fold(
        [
            ModelStart(**env(), step=0),
            Text(**env(), text="Look."),
            ModelDone(**env(), tool_calls=1),
            ToolStart(**env(), call_id="c1", tool="list_outbox", input={}, signature="s"),
            ToolDone(**env(), call_id="c1", tool="list_outbox", result=[]),
            ModelStart(**env(), step=1),
            ModelDone(**env()),
            TurnEnded(**env(), status="completed"),
        ]
    )
    assert types(out) == [
        "RUN_STARTED",
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "STEP_STARTED",
        "STEP_FINISHED",
        "RUN_FINISHED",
    ]
    steps = [(m["type"], m["stepName"]) for m in out if m["type"].startswith("STEP_")]
    assert steps == [
        ("STEP_STARTED", "model_call_1"),
        ("STEP_FINISHED", "model_call_1"),
        ("STEP_STARTED", "model_call_2"),
        ("STEP_FINISHED", "model_call_2"),
    ]


def test_a_model_call_cut_by_its_runs_end_finishes_with_it_and_starts_again_by_the_same_name() -> (
    None
):
    out = fold(
        [
            ModelStart(**env(), step=0),
            Text(**env(), text="half"),
            RunEnded(**env(), reason="soft_limit"),
            RunStarted(**env(), cause="next_chunk"),
            ModelStart(**env(), step=0),
            ModelStart(**env(), step=0),  # cut by a transport error within the run: made again
            ModelDone(**env()),
            TurnEnded(**env(), status="completed"),
        ]
    )
    steps = [(m["type"], m["stepName"]) for m in out if m["type"].startswith("STEP_")]
    assert steps == [("STEP_STARTED", "model_call_1"), ("STEP_FINISHED", "model_call_1")] * 3
    assert types(out)[1:6] == [
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
    ]


def test_run_finished_carries_the_turns_status_and_its_sum_of_usage_so_far() -> None:
    before = UsageFold().feed([ModelDone(**env(), usage=spent(40, 4))])
    out = fold(
        [
            ModelStart(**env(), step=1),
            ModelDone(**env(), usage=spent(60, 6)),
            ModelStart(**env(), step=2),
            ModelDone(**env()),
            TurnEnded(**env(), status="completed"),
        ],
        spent=before,
    )
    assert out[-1] == {
        "type": "RUN_FINISHED",
        "threadId": "conv",
        "runId": "run-1",
        "outcome": {"type": "success"},
        "result": {
            "turn_id": "turn_1",
            "status": "completed",
            "usage": {"input_tokens": 100, "output_tokens": 10},
        },
    }


#: a turn's events in any order and number: the step events must pair whatever comes
ANY_EVENT = st.sampled_from(
    [
        lambda: ModelStart(**env(), step=0),
        lambda: ModelStart(**env(), step=1),
        lambda: Text(**env(), text="t"),
        lambda: ModelDone(**env()),
        lambda: RunEnded(**env(), reason="soft_limit"),
        lambda: RunStarted(**env(), cause="next_chunk"),
        lambda: ToolStart(**env(), call_id="c", tool="t", signature="s"),
        lambda: ToolDone(**env(), call_id="c", tool="t", result=1),
    ]
)


@given(st.lists(ANY_EVENT, max_size=30), st.booleans())
def test_steps_pair_and_no_step_is_open_when_the_run_ends(makers: list[Any], ok: bool) -> None:
    events: list[Event] = [make() for make in makers]
    if ok:
        events.append(TurnEnded(**env(), status="completed"))
    else:
        events.append(TurnEnded(**env(), status="stopped", code="crashed"))
    open_steps: set[str] = set()
    for message in fold(events):
        if message["type"] == "STEP_STARTED":
            assert message["stepName"] not in open_steps
            open_steps.add(message["stepName"])
        elif message["type"] == "STEP_FINISHED":
            open_steps.remove(message["stepName"])
        elif message["type"] in ("RUN_FINISHED", "RUN_ERROR"):
            assert not open_steps
