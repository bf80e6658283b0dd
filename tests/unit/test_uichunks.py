"""A turn's events as the AI SDK's UI message chunks (docs/chat.md), as a pure fold."""

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
    TokenUsage,
    ToolBlocked,
    ToolDone,
    ToolStart,
    TurnEnded,
)
from ledger.usage import UsageFold
from worker.edges.http.uichunks import UIChunks, events_of

_ids = count()


def env() -> dict[str, Any]:
    return {
        "event_id": f"e{next(_ids)}",
        "turn_id": "turn_1",
        "run_id": "run_1",
        "chunk": 0,
        "ts": 1.0,
    }


def fold(events: list[Event], **kw: Any) -> list[dict[str, Any]]:
    chunks = UIChunks("turn_1", **kw)
    out = chunks.opening()
    for event in events:
        out += chunks.map(event)
    return out


def types(chunks: list[dict[str, Any]]) -> list[str]:
    return [c["type"] for c in chunks]


def test_a_model_call_with_text_and_a_tool_call_is_one_step() -> None:
    out = fold(
        [
            ModelStart(**env(), step=0),
            Text(**env(), text="Look"),
            Text(**env(), text="ing."),
            ModelDone(**env(), tool_calls=1),
            ToolStart(**env(), call_id="c1", tool="list_outbox", input={}, signature="s"),
            ToolDone(**env(), call_id="c1", tool="list_outbox", result=[]),
            ModelStart(**env(), step=1),
            ModelDone(**env()),
            TurnEnded(**env(), status="completed"),
        ]
    )
    assert types(out) == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-delta",
        "text-end",
        "tool-input-available",
        "tool-output-available",
        "finish-step",
        "start-step",
        "finish-step",
        "message-metadata",
        "finish",
    ]
    assert out[0] == {"type": "start", "messageId": "turn_1"}
    assert {c["id"] for c in out if c["type"].startswith("text-")} == {out[2]["id"]}


def test_a_model_call_cut_by_its_runs_end_is_reset_when_it_is_made_again() -> None:
    out = fold(
        [
            ModelStart(**env(), step=0),
            Text(**env(), text="half"),
            RunEnded(**env(), reason="soft_limit"),
            RunStarted(**env(), cause="next_chunk"),
            ModelStart(**env(), step=0),
            Text(**env(), text="whole"),
            ModelDone(**env()),
            TurnEnded(**env(), status="completed"),
        ]
    )
    assert types(out) == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "reset-step",
        "text-start",
        "text-delta",
        "text-end",
        "finish-step",
        "message-metadata",
        "finish",
    ]


def test_a_run_that_ends_waiting_ends_the_stream_after_the_approval_request() -> None:
    chunks = UIChunks("turn_1")
    request = ApprovalRequested(
        **env(), approval_id="ap_1", call_id="c1", tool="send_email", signature="s", expires_at=9.0
    )
    out = [c for e in [ModelStart(**env(), step=0), request] for c in chunks.map(e)]
    out += chunks.map(RunEnded(**env(), reason="waiting"))
    assert chunks.paused and not chunks.done
    out += chunks.finish_waiting()  # the turn still waits
    assert types(out)[-5:] == [
        "tool-input-available",
        "tool-approval-request",
        "finish-step",
        "message-metadata",
        "finish",
    ]
    assert out[-4] == {"type": "tool-approval-request", "approvalId": "ap_1", "toolCallId": "c1"}
    assert out[-1]["finishReason"] == "tool-calls"
    assert out[-1]["messageMetadata"]["status"] == "waiting"
    assert chunks.done
    assert chunks.map(TurnEnded(**env(), status="completed")) == []


def test_a_replay_goes_on_through_a_wait_that_was_decided_since() -> None:
    chunks = UIChunks("turn_1")
    request = ApprovalRequested(
        **env(), approval_id="ap_1", call_id="c1", tool="send_email", signature="s", expires_at=9.0
    )
    for event in [ModelStart(**env(), step=0), request, RunEnded(**env(), reason="waiting")]:
        chunks.map(event)
    out = chunks.map(RunStarted(**env(), cause="approval"))
    out += chunks.map(
        ToolStart(**env(), call_id="c1", tool="send_email", signature="s", approval_id="ap_1")
    )
    out += chunks.map(ToolDone(**env(), call_id="c1", tool="send_email", result="sent"))
    assert not chunks.paused
    assert out == [{"type": "tool-output-available", "toolCallId": "c1", "output": "sent"}]


def test_a_wait_holds_through_answers_until_the_next_run_starts() -> None:
    """An answer that leaves the turn waiting (one of two calls) is no resumed turn: the stream
    still waits on the run that ended waiting, whose id the stream checks the turn's against."""
    chunks = UIChunks("turn_1", announced=["c1", "c2"], waited_run="run_1")
    assert chunks.waited_run == "run_1"
    out = chunks.map(ToolDone(**env(), call_id="c1", tool="ask_user", result={"a": 1}))
    assert chunks.paused
    assert types(out + chunks.finish_waiting()) == [
        "tool-output-available",
        "message-metadata",
        "finish",
    ]
    chunks = UIChunks("turn_1")
    chunks.map(RunEnded(**{**env(), "run_id": "run_2"}, reason="waiting"))
    assert chunks.waited_run == "run_2"
    chunks.map(RunStarted(**env(), cause="tool_output"))
    assert not chunks.paused


def test_an_approved_call_is_not_announced_again_and_a_denied_one_is_denied() -> None:
    out = fold(
        [
            ToolStart(**env(), call_id="c1", tool="send_email", signature="s", approval_id="ap_1"),
            ToolDone(**env(), call_id="c1", tool="send_email", result="sent"),
            ToolBlocked(**env(), call_id="c2", tool="send_email", signature="t", reason="denied"),
        ],
        announced=["c1", "c2"],
    )
    assert out[1:] == [
        {"type": "tool-output-available", "toolCallId": "c1", "output": "sent"},
        {"type": "tool-output-denied", "toolCallId": "c2"},
    ]


def test_a_decision_on_a_request_the_stream_showed_is_its_approval_response() -> None:
    request = ApprovalRequested(
        **env(), approval_id="ap_1", call_id="c1", tool="send_email", signature="s", expires_at=9.0
    )
    approve = ApprovalDecided(**env(), approval_id="ap_1", decision="approve")
    out = fold([request, RunEnded(**env(), reason="waiting"), approve])
    assert out[-1] == {"type": "tool-approval-response", "approvalId": "ap_1", "approved": True}
    deny = ApprovalDecided(**env(), approval_id="ap_1", decision="deny", reason="no")
    assert fold([request, deny])[-1] == {
        "type": "tool-approval-response",
        "approvalId": "ap_1",
        "approved": False,
        "reason": "no",
    }
    # a stream that begins after the request (the client's own answer resumes it) says nothing
    assert fold([approve], announced=["c1"])[1:] == []


def test_a_request_that_expired_denies_its_call_on_it() -> None:
    request = ApprovalRequested(
        **env(), approval_id="ap_1", call_id="c1", tool="send_email", signature="s", expires_at=9.0
    )
    expired = ApprovalDecided(**env(), approval_id="ap_1", decision="expired")
    assert fold([request, expired])[-2:] == [
        {
            "type": "tool-approval-response",
            "approvalId": "ap_1",
            "approved": False,
            "reason": "expired",
        },
        {"type": "tool-output-denied", "toolCallId": "c1"},
    ]


def test_a_persons_stop_is_an_abort_naming_its_code_and_whether_continue_is_available() -> None:
    stop = fold(
        [
            TurnEnded(
                **env(),
                status="stopped",
                code="cancelled",
                detail="Stop requested",
                can_continue=True,
            )
        ]
    )
    assert types(stop) == ["start", "message-metadata", "abort"]
    assert stop[-1] == {
        "type": "abort",
        "reason": "the turn stopped (cancelled: Stop requested); Continue is available",
    }
    assert stop[1]["messageMetadata"]["status"] == "stopped"


def test_any_other_stop_is_an_error_between_the_metadata_and_a_finish_with_reason_error() -> None:
    failed = fold([TurnEnded(**env(), status="stopped", code="rate_limit", detail="429")])
    assert types(failed) == ["start", "message-metadata", "error", "finish"]
    assert failed[2] == {
        "type": "error",
        "errorText": "the turn stopped (rate_limit: 429); Continue is not available",
    }
    assert failed[3]["finishReason"] == "error"
    assert failed[3]["messageMetadata"] == failed[1]["messageMetadata"]
    bare = fold([TurnEnded(**env(), status="stopped", code="crashed", can_continue=True)])
    assert bare[2]["errorText"] == "the turn stopped (crashed); Continue is available"


def spent(input_tokens: int, output_tokens: int) -> TokenUsage:
    return TokenUsage(input_tokens=input_tokens, output_tokens=output_tokens)


def test_a_completed_turns_metadata_is_its_sum_of_every_model_calls_usage() -> None:
    out = fold(
        [
            ModelStart(**env(), step=0),
            ModelDone(**env(), tool_calls=1, usage=spent(100, 20)),
            ModelStart(**env(), step=1),
            ModelDone(**env()),  # a provider that said nothing: nothing added
            ModelStart(**env(), step=2),
            ModelDone(**env(), usage=spent(300, 7)),
            TurnEnded(**env(), status="completed"),
        ]
    )
    metadata = {
        "turnId": "turn_1",
        "status": "completed",
        "usage": {"inputTokens": 400, "outputTokens": 27, "totalTokens": 427},
    }
    assert out[-2:] == [
        {"type": "message-metadata", "messageMetadata": metadata},
        {"type": "finish", "finishReason": "stop", "messageMetadata": metadata},
    ]


def test_a_stream_that_starts_mid_turn_counts_what_the_turn_spent_before_it() -> None:
    before = UsageFold().feed([ModelDone(**env(), usage=spent(50, 5))])
    out = fold(
        [
            ToolStart(**env(), call_id="c1", tool="send_email", signature="s", approval_id="ap_1"),
            ToolDone(**env(), call_id="c1", tool="send_email", result="sent"),
            ModelStart(**env(), step=1),
            ModelDone(**env(), usage=spent(70, 3)),
            TurnEnded(**env(), status="completed"),
        ],
        announced=["c1"],
        spent=before,
    )
    usage = out[-1]["messageMetadata"]["usage"]
    assert usage == {"inputTokens": 120, "outputTokens": 8, "totalTokens": 128}
    assert before.input_tokens == 50, "the stream counts on a copy of what it was given"


def test_a_waiting_turns_metadata_is_what_it_spent_until_its_wait() -> None:
    chunks = UIChunks("turn_1")
    for event in [
        ModelStart(**env(), step=0),
        ModelDone(**env(), tool_calls=1, usage=spent(10, 2)),
        RunEnded(**env(), reason="waiting"),
    ]:
        chunks.map(event)
    metadata, finish = chunks.finish_waiting()[-2:]
    assert metadata["messageMetadata"] == {
        "turnId": "turn_1",
        "status": "waiting",
        "usage": {"inputTokens": 10, "outputTokens": 2, "totalTokens": 12},
    }
    assert finish == {
        "type": "finish",
        "finishReason": "tool-calls",
        "messageMetadata": metadata["messageMetadata"],
    }


def test_sse_messages_read_back_as_their_events() -> None:
    text = Text(**env(), text="hi")
    message = f"id: 1-0\nevent: text\ndata: {text.model_dump_json()}\n\n".encode()
    assert events_of(message * 2) == [text, text]
    assert events_of(b": keepalive\n\n") == []
