"""The chat front ends people already use, as real clients (docs/chat.md): the AI SDK's
``DefaultChatTransport`` and ``readUIMessageStream`` (``tests/node/chat_client.mjs``) against a
real ``dres api`` and a real ``dres worker``.

The clients are node packages installed into ``tests/node/node_modules`` (gitignored) by the
``node_clients`` fixture (``conftest.py``). Without node, or when the packages cannot be
installed, these tests skip with the reason, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from api_support import (
    CLIENT_TIMEOUT_S,
    DONE_STEP,
    SEND_STEP,
    ag_ui_validate,
    kinds,
    post_agui,
    run_client,
    text_of,
    tool_parts,
)

from rigs import ApiProcess, Script, wait_until
from tests.support.fixtures import StartWorker
from worker.demo_tools import outbox

pytestmark = pytest.mark.redis_server

LOOK_STEP = {"text": "Let me look at the outbox.", "tool_calls": [{"name": "list_outbox"}]}
#: an answer streamed slowly enough to cut mid-way and reconnect to under load: 70 deltas of 5
#: characters, 80 ms apart (within the 6 s chunk these tests give it)
SLOW_TEXT = "".join(f"word{n:02d} " for n in range(50))
SLOW_STEP = {"text": SLOW_TEXT, "chunk_chars": 5, "stream_delay_s": 0.08}


def spending(step: dict[str, Any], input_tokens: int, output_tokens: int) -> dict[str, Any]:
    """A scripted model step whose call reports that usage (docs/models.md)."""
    return {**step, "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}}


def ui_usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    """Usage as the AI SDK stream's message metadata carries it."""
    total = input_tokens + output_tokens
    return {"inputTokens": input_tokens, "outputTokens": output_tokens, "totalTokens": total}


def user(text: str, n: int = 1) -> dict[str, Any]:
    return {"id": f"u{n}", "role": "user", "parts": [{"type": "text", "text": text}]}


@pytest.fixture
def chat(node_clients: Path, api: ApiProcess, redis_url: str) -> Any:
    """``chat(op, chat_id, **command)``: the AI SDK's transport against the open server."""

    def run(op: str, chat_id: str, **command: Any) -> dict[str, Any]:
        return run_client(
            node_clients,
            "chat_client.mjs",
            {"op": op, "url": api.url, "chatId": chat_id, **command},
        )

    return run


def newest_turn(http: httpx.Client, chat_id: str) -> dict[str, Any]:
    turns: list[dict[str, Any]] = http.get(f"/v1/conversations/{chat_id}").json()["turns"]
    return turns[-1]


# -- POST /v1/chat --------------------------------------------------------------------------------


def test_a_turn_with_a_tool_call_is_one_assistant_message_and_a_listed_conversation(
    chat: Any, http: httpx.Client, start_worker: StartWorker, script: Script
) -> None:
    start_worker()
    spec = script([LOOK_STEP, {"text": "Nothing was sent."}])

    got = chat("send", "chat-look", messages=[user("what was sent?")], body={"model": spec})

    message = got["message"]
    turn = newest_turn(http, "chat-look")
    assert message["id"] == turn["turn_id"]
    assert message["role"] == "assistant"
    assert text_of(message) == "Let me look at the outbox.Nothing was sent."
    (part,) = tool_parts(message)
    assert (part["type"], part["state"]) == ("tool-list_outbox", "output-available")
    assert got["chunks"][0] == "start" and got["chunks"][-1] == "finish"
    assert got["chunks"].count("start-step") == got["chunks"].count("finish-step") == 2
    listed = http.get("/v1/conversations").json()["items"]
    assert [c["conversation_id"] for c in listed] == ["chat-look"]
    assert turn["message"] == "what was sent?" and turn["status"] == "completed"


def test_a_reconnect_after_the_request_was_cut_mid_answer_yields_the_whole_text(
    chat: Any, http: httpx.Client, start_worker: StartWorker, script: Script
) -> None:
    # a chunk long enough for the whole answer: the turn is live while the client reconnects
    start_worker(overrides={"DRES_SOFT_LIMIT_S": "6", "DRES_HARD_LIMIT_S": "7"})
    spec = script([SLOW_STEP])

    cut = chat("send", "chat-cut", messages=[user("talk")], body={"model": spec}, cutAfterChars=10)
    assert 10 <= len(text_of(cut["message"])) < len(SLOW_TEXT)

    again = chat("reconnect", "chat-cut")

    assert again["message"]["id"] == cut["message"]["id"]
    assert text_of(again["message"]) == SLOW_TEXT
    assert again["chunks"][-1] == "finish"


def test_a_reconnect_with_no_live_turn_yields_no_stream(chat: Any, http: httpx.Client) -> None:
    assert http.get("/v1/chat/chat-none/stream").status_code == 204

    assert chat("reconnect", "chat-none") == {"message": None, "chunks": [], "ends": []}


def test_an_approval_answered_through_the_transport_sends_once_and_a_repeat_sends_nothing(
    chat: Any,
    http: httpx.Client,
    start_worker: StartWorker,
    script: Script,
    rdb: redis.Redis,
) -> None:
    start_worker(overrides={"DRES_APPROVAL": "send_email"})
    spec = script([spending(SEND_STEP, 100, 10), spending(DONE_STEP, 200, 20)])
    asked = chat("send", "chat-send", messages=[user("send it")], body={"model": spec})

    message = asked["message"]
    turn_id = message["id"]
    (part,) = tool_parts(message)
    assert (part["type"], part["state"]) == ("tool-send_email", "approval-requested")
    assert asked["chunks"][-4:] == [
        "tool-approval-request",
        "finish-step",
        "message-metadata",
        "finish",
    ]
    waiting = {"turnId": turn_id, "status": "waiting", "usage": ui_usage(100, 10)}
    assert asked["ends"] == [
        {"type": "message-metadata", "messageMetadata": waiting},
        {"type": "finish", "finishReason": "tool-calls", "messageMetadata": waiting},
    ]
    assert message["metadata"] == waiting
    assert outbox(rdb) == []
    part["state"] = "approval-responded"
    part["approval"] = {"id": part["approval"]["id"], "approved": True}
    answered = [user("send it"), message]

    resumed = chat("send", "chat-send", messages=answered, body={"model": spec})

    final = resumed["message"]
    (part,) = tool_parts(final)
    assert part["state"] == "output-available"
    assert text_of(final) == "Sending.Done."
    # the resumed stream starts mid-turn: its usage is still the turn's, the first call's too
    done = {"turnId": turn_id, "status": "completed", "usage": ui_usage(300, 30)}
    assert final["metadata"] == done
    assert resumed["ends"][-1] == {
        "type": "finish",
        "finishReason": "stop",
        "messageMetadata": done,
    }
    turn = http.get(f"/v1/turns/{turn_id}").json()
    assert turn["usage"] == {"input_tokens": 300, "output_tokens": 30}
    assert len(outbox(rdb)) == 1

    repeated = chat("send", "chat-send", messages=answered, body={"model": spec})

    assert tool_parts(repeated["message"])[0]["state"] == "output-available"
    wait_until(
        lambda: newest_turn(http, "chat-send")["status"] == "completed", timeout=20, what="done"
    )
    assert len(outbox(rdb)) == 1


# -- POST /v1/ag-ui -------------------------------------------------------------------------------


@pytest.fixture
def agui(node_clients: Path, api: ApiProcess, redis_url: str) -> Any:
    """``agui(thread_id, message, model, **command)``: AG-UI's HttpAgent against the open server."""

    def run(thread_id: str, message: str, model: str, **command: Any) -> dict[str, Any]:
        return run_client(
            node_clients,
            "agui_client.mjs",
            {"url": api.url, "threadId": thread_id, "message": message, "model": model, **command},
        )

    return run


def test_an_agui_run_with_a_tool_call_streams_its_text_and_tool_events(
    agui: Any, http: httpx.Client, start_worker: StartWorker, script: Script
) -> None:
    start_worker()
    spec = script([LOOK_STEP, {"text": "Nothing was sent."}])

    (run,) = agui("thread-look", "what was sent?", spec)["runs"]

    assert kinds(run["events"]) == [
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
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "RUN_FINISHED",
    ]
    assert run["outcome"] == {"type": "success"}
    steps = [e["stepName"] for e in run["events"] if e["type"].startswith("STEP_")]
    assert steps == ["model_call_1"] * 2 + ["model_call_2"] * 2
    texts = [e["delta"] for e in run["events"] if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert texts == ["Let me look at the outbox.", "Nothing was sent."]
    assert newest_turn(http, "thread-look")["status"] == "completed"


def test_an_agui_write_needing_approval_is_an_interrupt_whose_resume_runs_it_once(
    agui: Any, http: httpx.Client, start_worker: StartWorker, script: Script, rdb: redis.Redis
) -> None:
    start_worker(overrides={"DRES_APPROVAL": "send_email"})
    spec = script([spending(SEND_STEP, 100, 10), spending(DONE_STEP, 200, 20)])

    asked, resumed = agui("thread-send", "send it", spec, approve=True)["runs"]

    outcome = asked["outcome"]
    assert outcome["type"] == "interrupt"
    (interrupt,) = outcome["interrupts"]
    turn = http.get(f"/v1/turns/{newest_turn(http, 'thread-send')['turn_id']}").json()
    (approval,) = turn["approvals"]
    assert interrupt["id"] == approval["approval_id"]
    call = next(e for e in asked["events"] if e["type"] == "TOOL_CALL_START")
    assert (interrupt["toolCallId"], call["toolCallName"]) == (call["toolCallId"], "send_email")
    assert interrupt["expiresAt"].endswith("Z")
    assert kinds(resumed["events"])[0] == "RUN_STARTED"
    assert "TOOL_CALL_RESULT" in kinds(resumed["events"])
    assert resumed["outcome"] == {"type": "success"}
    turn_id = turn["turn_id"]
    (waited,) = [e for e in asked["events"] if e["type"] == "RUN_FINISHED"]
    assert waited["result"] == {
        "turn_id": turn_id,
        "status": "waiting",
        "usage": {"input_tokens": 100, "output_tokens": 10},
    }
    (finished,) = [e for e in resumed["events"] if e["type"] == "RUN_FINISHED"]
    assert finished["result"] == {
        "turn_id": turn_id,
        "status": "completed",
        "usage": {"input_tokens": 300, "output_tokens": 30},
    }
    assert len(outbox(rdb)) == 1
    assert turn["status"] == "completed"


def agui_input(thread_id: str, message: str, model: str) -> dict[str, Any]:
    """A ``RunAgentInput`` of one user message, as a raw client posts it."""
    return {
        "threadId": thread_id,
        "runId": f"run-{thread_id}",
        "messages": [{"id": "u1", "role": "user", "content": message}],
        "forwardedProps": {"model": model},
    }


def test_raw_agui_streams_of_an_interrupt_and_of_a_completed_run_pass_ag_ui_validate(
    http: httpx.Client, start_worker: StartWorker, script: Script, tmp_path: Path
) -> None:
    start_worker(overrides={"DRES_APPROVAL": "send_email"})
    send = script([spending(SEND_STEP, 100, 10), spending(DONE_STEP, 200, 20)])
    asked = post_agui(http, agui_input("thread-raw", "send it", send), tmp_path / "interrupt.sse")
    look = script([LOOK_STEP, {"text": "Nothing was sent."}])
    done = post_agui(http, agui_input("thread-look", "what was sent?", look), tmp_path / "done.sse")

    assert kinds(asked)[:2] == ["RUN_STARTED", "STEP_STARTED"]
    assert kinds(asked)[-2:] == ["TOOL_CALL_END", "RUN_FINISHED"]
    assert asked[-1]["outcome"]["type"] == "interrupt"
    assert asked[-1]["result"]["status"] == "waiting"
    assert kinds(done).count("STEP_STARTED") == kinds(done).count("STEP_FINISHED") == 2
    assert done[-1]["outcome"] == {"type": "success"}
    ag_ui_validate(tmp_path / "interrupt.sse")
    ag_ui_validate(tmp_path / "done.sse")


def test_a_stopped_turn_ends_the_chat_stream_with_abort(
    node_clients: Path,
    api: ApiProcess,
    http: httpx.Client,
    start_worker: StartWorker,
    script: Script,
) -> None:
    start_worker(overrides={"DRES_SOFT_LIMIT_S": "6", "DRES_HARD_LIMIT_S": "7"})
    command = {
        "op": "send",
        "url": api.url,
        "chatId": "chat-stop",
        "messages": [user("talk")],
        "body": {"model": script([SLOW_STEP])},
    }
    with subprocess.Popen(
        ["node", "chat_client.mjs"],
        cwd=node_clients,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as client:
        assert client.stdin is not None
        client.stdin.write(json.dumps(command))
        client.stdin.close()
        turn = wait_until(
            lambda: (
                http.get("/v1/conversations/chat-stop").status_code == 200
                and newest_turn(http, "chat-stop")
            ),
            timeout=20,
            what="the chat's turn",
        )
        assert http.post(f"/v1/turns/{turn['turn_id']}/stop").status_code == 202
        assert client.stdout is not None
        out = client.stdout.read()  # to its end: the client has read the stream's last chunk
        assert client.wait(timeout=CLIENT_TIMEOUT_S) == 0

    result = json.loads(out)
    assert result["chunks"][-1] == "abort"
    assert len(text_of(result["message"])) < len(SLOW_TEXT)
    told, aborted = result["ends"]
    assert told["messageMetadata"]["status"] == result["message"]["metadata"]["status"] == "stopped"
    assert aborted == {
        "type": "abort",
        "reason": "the turn stopped (cancelled: Stop requested); Continue is available",
    }


def test_a_turn_stopped_by_its_budget_ends_both_protocols_naming_its_code_and_continue(
    chat: Any, http: httpx.Client, start_worker: StartWorker, script: Script, tmp_path: Path
) -> None:
    start_worker(overrides={"DRES_TURN_TOKEN_BUDGET": "1000"})
    look = spending(LOOK_STEP, 450, 150)
    spec = script([look, look, {"text": "Nothing was sent."}])

    got = chat("send", "chat-budget", messages=[user("what was sent?")], body={"model": spec})

    turn_id = got["message"]["id"]
    stopped = {"turnId": turn_id, "status": "stopped", "usage": ui_usage(900, 300)}
    told, error, finish = got["ends"]
    assert told == {"type": "message-metadata", "messageMetadata": stopped}
    assert error["type"] == "error"
    assert error["errorText"].startswith("the turn stopped (budget: ")
    assert error["errorText"].endswith("; Continue is available")
    assert finish == {"type": "finish", "finishReason": "error", "messageMetadata": stopped}
    assert got["message"]["metadata"] == stopped

    spec = script([look, look, {"text": "Nothing was sent."}])
    capture = tmp_path / "stopped.sse"
    failed = post_agui(http, agui_input("thread-budget", "what was sent?", spec), capture)[-1]
    assert failed["type"] == "RUN_ERROR" and failed["code"] == "budget"
    assert failed["message"].startswith("the turn stopped (budget: ")
    assert failed["message"].endswith("; Continue is available")
    ag_ui_validate(capture)


def test_a_reconnect_to_a_turn_resumed_by_an_approval_replays_through_its_wait(
    chat: Any, start_worker: StartWorker, script: Script, rdb: redis.Redis
) -> None:
    start_worker(
        overrides={
            "DRES_APPROVAL": "send_email",
            "DRES_SOFT_LIMIT_S": "6",
            "DRES_HARD_LIMIT_S": "7",
        }
    )
    spec = script([SEND_STEP, SLOW_STEP])
    message = chat("send", "chat-replay", messages=[user("send it")], body={"model": spec})[
        "message"
    ]
    (part,) = tool_parts(message)
    part["state"] = "approval-responded"
    part["approval"] = {"id": part["approval"]["id"], "approved": True}
    answered = [user("send it"), message]
    cut = chat("send", "chat-replay", messages=answered, body={"model": spec}, cutAfterChars=20)
    assert len(text_of(cut["message"])) < len("Sending." + SLOW_TEXT)

    again = chat("reconnect", "chat-replay")

    assert text_of(again["message"]) == "Sending." + SLOW_TEXT
    (part,) = tool_parts(again["message"])
    assert part["state"] == "output-available"
    assert again["chunks"][-1] == "finish"
    assert len(outbox(rdb)) == 1


def test_a_turn_stopped_then_continued_is_streamed_through_its_old_stop_to_its_end(
    chat: Any, http: httpx.Client, start_worker: StartWorker, script: Script
) -> None:
    """A retried request (the same message) of a turn that stopped and was continued since is
    streamed from its start: the stop it went on from is passed through, not its end."""
    start_worker()
    spec = script([{"fail": "auth", **DONE_STEP}])  # a failure on the step's first attempt
    first = chat("send", "chat-continued", messages=[user("hi")], body={"model": spec})
    assert first["chunks"][-1] == "finish" and "error" in first["chunks"]
    turn_id = newest_turn(http, "chat-continued")["turn_id"]
    assert http.post(f"/v1/turns/{turn_id}/continue", json={"auto": False}).status_code == 202
    wait_until(
        lambda: http.get(f"/v1/turns/{turn_id}").json()["status"] == "completed",
        timeout=20,
        what="the continued turn completed",
    )

    again = chat("send", "chat-continued", messages=[user("hi")], body={"model": spec})

    assert again["chunks"][-1] == "finish" and "error" not in again["chunks"]
    assert text_of(again["message"]) == DONE_STEP["text"]
    assert again["message"]["metadata"]["status"] == "completed"


def test_a_pydantic_ai_agents_turn_is_one_assistant_message_through_the_ai_sdk(
    chat: Any, http: httpx.Client, start_worker: StartWorker, tmp_path: Path
) -> None:
    """A worker whose DRES_LOOP is a framework's agent (docs/loops.md): the chat protocol is
    unchanged — the same ledger events, the same message."""
    from rigs.providers import OpenAIDialect, fake_provider

    openai = OpenAIDialect()
    with fake_provider() as fake:
        fake.script(
            openai.tool_call("c1", "get_ticket", {"ticket_id": "T-1"}), openai.text("It is open.")
        )
        start_worker(
            overrides={
                **openai.env(fake.url),
                "DRES_LOOP": "pydantic_ai:tests.frameworks.pydantic_ai_agent:agent",
                "DRES_SOFT_LIMIT_S": "10",
                "DRES_HARD_LIMIT_S": "20",
                "DRES_VISIBILITY_TIMEOUT_S": "40",
                "DRES_TEST_EFFECTS": str(tmp_path / "effects.txt"),
            }
        )
        got = chat("send", "chat-framework", messages=[user("is T-1 open?")])

    message = got["message"]
    assert text_of(message) == "It is open."
    (part,) = tool_parts(message)
    assert (part["type"], part["state"]) == ("tool-get_ticket", "output-available")
    assert part["output"] == {"ticket_id": "T-1", "status": "open"}
    assert newest_turn(http, "chat-framework")["status"] == "completed"
