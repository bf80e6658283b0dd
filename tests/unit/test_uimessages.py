"""A conversation as the AI SDK's UIMessage list (docs/chat.md, ``GET /v1/chat/{id}/messages``):
a pure fold of each turn's events, through the chunks its stream sends."""

from __future__ import annotations

from itertools import count
from typing import Any

from ledger.event_models import (
    ApprovalDecided,
    ApprovalRequested,
    Event,
    ModelDone,
    ModelStart,
    RunEnded,
    RunStarted,
    Text,
    ToolBlocked,
    ToolDone,
    ToolStart,
    TurnEnded,
    TurnStarted,
)
from worker.edges.http.uichunks import UIChunks
from worker.edges.http.uimessages import (
    TurnRecord,
    conversation_messages,
    fold_chunks,
    turn_chunks,
    turn_message,
)

_ids = count()


def env() -> dict[str, Any]:
    return {
        "event_id": f"e{next(_ids)}",
        "turn_id": "turn_1",
        "run_id": "run_1",
        "chunk": 0,
        "ts": 1.0,
    }


def started(message: str = "hi") -> TurnStarted:
    return TurnStarted(**env(), conversation_id="c1", message=message, message_id="m1")


def said(text: str, step: int = 0, tool_calls: int = 0) -> list[Event]:
    """One model call that says ``text``."""
    return [
        ModelStart(**env(), step=step),
        Text(**env(), text=text),
        ModelDone(**env(), tool_calls=tool_calls),
    ]


def call(call_id: str, tool: str = "list_outbox", **start: Any) -> ToolStart:
    return ToolStart(**env(), call_id=call_id, tool=tool, input={"n": 1}, signature="s", **start)


def done(call_id: str, result: Any, tool: str = "list_outbox", **kw: Any) -> ToolDone:
    return ToolDone(**env(), call_id=call_id, tool=tool, result=result, **kw)


def asked(approval_id: str = "ap_1", call_id: str = "c2") -> ApprovalRequested:
    return ApprovalRequested(
        **env(),
        approval_id=approval_id,
        call_id=call_id,
        tool="send_email",
        input={"to": "a@x.io"},
        signature="t",
        expires_at=9.0,
    )


def decided(decision: Any, reason: str = "", approval_id: str = "ap_1") -> ApprovalDecided:
    return ApprovalDecided(**env(), approval_id=approval_id, decision=decision, reason=reason)


def ended(status: Any = "completed", **kw: Any) -> TurnEnded:
    return TurnEnded(**env(), status=status, **kw)


def waiting() -> RunEnded:
    return RunEnded(**env(), reason="waiting")


def parts(events: list[Event]) -> list[dict[str, Any]]:
    message = turn_message("turn_1", [started(), *events])
    assert (message["id"], message["role"]) == ("turn_1", "assistant")
    parts_: list[dict[str, Any]] = message["parts"]
    return parts_


def tool_parts(events: list[Event]) -> list[dict[str, Any]]:
    return [p for p in parts(events) if p["type"].startswith("tool-")]


def test_a_completed_turn_is_its_steps_texts_and_calls_in_their_last_state() -> None:
    events = [
        *said("Let me look.", tool_calls=1),
        call("c1"),
        done("c1", []),
        *said("Nothing was sent.", step=1),
        ended(),
    ]
    assert parts(events) == [
        {"type": "step-start"},
        {"type": "text", "text": "Let me look.", "state": "done"},
        {"type": "tool-list_outbox", "toolCallId": "c1", "state": "output-available"}
        | {"input": {"n": 1}, "output": []},
        {"type": "step-start"},
        {"type": "text", "text": "Nothing was sent.", "state": "done"},
    ]


def test_a_failed_call_is_output_error_with_its_error_text() -> None:
    (part,) = tool_parts([call("c1"), done("c1", {"error": "boom"}, is_error=True)])
    assert part == {
        "type": "tool-list_outbox",
        "toolCallId": "c1",
        "state": "output-error",
        "input": {"n": 1},
        "errorText": '{"error": "boom"}',
    }


def test_a_call_with_no_output_yet_is_input_available() -> None:
    """A client tool's call (the turn waits for the client's output), or one still running."""
    (part,) = tool_parts([*said("Asking.", tool_calls=1), call("c1", tool="pick_date")])
    assert part == {
        "type": "tool-pick_date",
        "toolCallId": "c1",
        "state": "input-available",
        "input": {"n": 1},
    }


def test_a_pending_approval_is_approval_requested_with_its_id() -> None:
    (part,) = tool_parts([*said("Sending.", tool_calls=1), asked(), waiting()])
    assert part == {
        "type": "tool-send_email",
        "toolCallId": "c2",
        "state": "approval-requested",
        "input": {"to": "a@x.io"},
        "approval": {"id": "ap_1"},
    }


def test_an_approved_call_shows_its_output_and_the_approval_granted() -> None:
    events = [
        asked(),
        waiting(),
        decided("approve"),
        RunStarted(**env(), cause="approval"),
        call("c2", tool="send_email", approval_id="ap_1"),
        done("c2", {"sent": True}, tool="send_email"),
    ]
    (part,) = tool_parts(events)
    assert part["state"] == "output-available"
    assert part["output"] == {"sent": True}
    assert part["approval"] == {"id": "ap_1", "approved": True}


def test_a_denied_call_is_output_denied_with_the_reason() -> None:
    events = [
        asked(),
        waiting(),
        decided("deny", reason="not now"),
        ToolBlocked(**env(), call_id="c2", tool="send_email", signature="t", reason="denied"),
    ]
    (part,) = tool_parts(events)
    assert part["state"] == "output-denied"
    assert part["approval"] == {"id": "ap_1", "approved": False, "reason": "not now"}


def test_a_request_voided_by_a_stop_is_denied_on_it_and_asked_again_on_a_continue() -> None:
    stopped = [asked(), waiting(), decided("voided", reason="Stop requested")]
    stopped.append(ended("stopped", code="cancelled", can_continue=True))
    (part,) = tool_parts(stopped)
    assert part["state"] == "output-denied"
    assert part["approval"] == {"id": "ap_1", "approved": False, "reason": "Stop requested"}

    again = [*stopped, RunStarted(**env(), cause="continue"), asked("ap_2"), waiting()]
    (part,) = tool_parts(again)
    assert (part["state"], part["approval"]) == ("approval-requested", {"id": "ap_2"})


def test_a_call_answered_from_the_record_is_output_available_with_that_answer() -> None:
    recorded = {"status": "already_completed", "result": {"sent": True}}
    blocked = ToolBlocked(
        **env(),
        call_id="c3",
        tool="send_email",
        signature="t",
        reason="completed",
        inherited_from="turn_0",
        result=recorded,
    )
    (part,) = tool_parts([blocked])
    assert (part["state"], part["output"]) == ("output-available", recorded)


def test_a_model_call_cut_by_its_runs_end_keeps_only_the_text_of_the_call_made_again() -> None:
    events: list[Event] = [
        ModelStart(**env(), step=0),
        Text(**env(), text="half"),
        RunEnded(**env(), reason="soft_limit"),
        RunStarted(**env(), cause="next_chunk"),
        *said("whole"),
        ended(),
    ]
    assert parts(events) == [
        {"type": "step-start"},
        {"type": "text", "text": "whole", "state": "done"},
    ]


def test_a_running_turn_shows_its_text_so_far_and_a_queued_one_nothing() -> None:
    so_far = parts([ModelStart(**env(), step=0), Text(**env(), text="Wor")])
    assert so_far[-1] == {"type": "text", "text": "Wor", "state": "streaming"}
    assert parts([]) == []


def test_a_waiting_turn_ends_as_its_stream_ends_there_with_its_metadata() -> None:
    """A client tool's call the turn waits on: the stream closes the message with its status."""
    events = [started(), *said("Asking.", tool_calls=1), call("c1", tool="pick_date"), waiting()]
    message = turn_message("turn_1", events, waiting=True)
    chunks = UIChunks("turn_1")
    stream = chunks.opening() + [c for e in events for c in chunks.map(e)]
    assert chunks.paused
    assert message == fold_chunks("turn_1", stream + chunks.finish_waiting())
    assert message["metadata"]["status"] == "waiting"
    assert "metadata" not in turn_message("turn_1", events)  # answered since: it goes on


def test_a_continued_turn_goes_on_after_its_first_end() -> None:
    events = [
        *said("Part one."),
        ended("stopped", code="rate_limit", can_continue=True),
        RunStarted(**env(), cause="continue"),
        *said("Part two.", step=1),
        ended(),
    ]
    texts = [p["text"] for p in parts(events) if p["type"] == "text"]
    assert texts == ["Part one.", "Part two."]


def test_the_message_is_what_the_stream_says_whatever_the_chunks_of_its_frame() -> None:
    """The fold of a turn equals the fold of its stream's chunks, frame chunks and all."""
    events: list[Event] = [*said("a", tool_calls=1), call("c1"), done("c1", 1), ended()]
    chunks = UIChunks("turn_1")
    stream = chunks.opening() + [c for e in events for c in chunks.map(e)]
    assert [c["type"] for c in turn_chunks("turn_1", events)] == [c["type"] for c in stream]
    assert fold_chunks("x", stream) == turn_message("turn_1", events)
    metadata = [{"type": "message-metadata", "messageMetadata": {"usage": {"inputTokens": 3}}}]
    with_metadata = fold_chunks("x", stream + metadata)
    # merged into what the stream's own metadata said, as the AI SDK merges it
    assert with_metadata["metadata"]["usage"]["inputTokens"] == 3
    assert with_metadata["metadata"]["turnId"] == "turn_1"


def record(turn_id: str, message_id: str, message: str, **kw: Any) -> TurnRecord:
    events = [started(message), *said(f"answer to {message}"), ended()]
    return TurnRecord(turn_id, message_id, message, events, **kw)


def test_a_conversation_is_each_user_message_and_its_answer_leaving_out_replaced_turns() -> None:
    turns = [
        record("t1", "m1", "first"),
        record("t2", "m2", "second", replaced_by="t3"),
        record("t3", "m2", "second, edited"),
        record("t4", "", "an old turn with no message id"),
    ]
    messages = conversation_messages(turns)
    assert [(m["id"], m["role"]) for m in messages] == [
        ("m1", "user"),
        ("t1", "assistant"),
        ("m2", "user"),
        ("t3", "assistant"),
        ("t4:message", "user"),
        ("t4", "assistant"),
    ]
    assert messages[2]["parts"] == [{"type": "text", "text": "second, edited"}]
    assert messages[3]["parts"][-1]["text"] == "answer to second, edited"
