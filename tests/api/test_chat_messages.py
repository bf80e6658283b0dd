"""A chat's history for ``useChat``'s initial messages (docs/chat.md, ``GET
/v1/chat/{id}/messages``), read as a page reads it and checked by the AI SDK's own
``validateUIMessages`` (``tests/node/chat_messages.mjs``), against a real ``dres api`` and ``dres
worker``: the messages are what the turn's stream built in the AI SDK's client
(``tests/node/chat_client.mjs``), at each point of the turn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from api_support import APPROVERS, DONE_STEP, SEND_STEP, post_turn, run_client, tool_parts

from rigs import ApiProcess, Script, wait_until
from tests.support.fixtures import StartWorker

pytestmark = pytest.mark.redis_server

LOOK_STEP = {"text": "Let me look at the outbox.", "tool_calls": [{"name": "list_outbox"}]}


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


@pytest.fixture
def history(node_clients: Path, api: ApiProcess) -> Any:
    """``history(chat_id, server=api, token=None)``: the chat's messages as validateUIMessages
    returns them, or its refusal (``chat_messages.mjs``)."""

    def run(chat_id: str, server: ApiProcess = api, token: str | None = None) -> dict[str, Any]:
        command = {"url": server.url, "chatId": chat_id, "token": token}
        return run_client(node_clients, "chat_messages.mjs", command)

    return run


def shapes(message: dict[str, Any]) -> list[tuple[str, str]]:
    """Each part's type, and its state or text."""
    return [
        (p["type"], p.get("state") if "toolCallId" in p else p.get("text", ""))
        for p in message["parts"]
    ]


def test_a_chats_messages_pass_validate_ui_messages_and_are_what_its_stream_built(
    chat: Any, history: Any, http: httpx.Client, start_worker: StartWorker, script: Script
) -> None:
    start_worker(overrides={"DRES_APPROVAL": "send_email"})
    spec = script([LOOK_STEP, SEND_STEP, DONE_STEP])
    asked = chat("send", "chat-h", messages=[user("look, then send")], body={"model": spec})

    waiting = history("chat-h")

    assert waiting["error"] is None
    said, answer = waiting["messages"]
    assert said == user("look, then send")
    assert answer == asked["message"]
    assert shapes(answer) == [
        ("step-start", ""),
        ("text", "Let me look at the outbox."),
        ("tool-list_outbox", "output-available"),
        ("step-start", ""),
        ("text", "Sending."),
        ("tool-send_email", "approval-requested"),
    ]
    pending = tool_parts(answer)[-1]
    (approval,) = http.get(f"/v1/turns/{answer['id']}").json()["approvals"]
    assert pending["approval"] == {"id": approval["approval_id"]}

    pending["state"] = "approval-responded"
    pending["approval"] = {"id": approval["approval_id"], "approved": True}
    resumed = chat("send", "chat-h", messages=[said, answer], body={"model": spec})
    wait_until(
        lambda: http.get(f"/v1/turns/{answer['id']}").json()["status"] == "completed",
        timeout=20,
        what="the turn completed",
    )

    done = history("chat-h")

    assert done["error"] is None
    assert done["messages"] == [said, resumed["message"]]
    sent = tool_parts(done["messages"][1])[-1]
    assert sent["state"] == "output-available"
    assert sent["approval"] == {"id": approval["approval_id"], "approved": True}
    assert shapes(done["messages"][1])[-2:] == [("step-start", ""), ("text", "Done.")]


def test_a_queued_turn_is_its_message_and_an_empty_answer_and_an_approver_may_read_it(
    history: Any, http: httpx.Client, approvers_api: ApiProcess
) -> None:
    created = post_turn(http, "hello there", conversation_id="chat-q", message_id="m-1")

    queued = history("chat-q")

    assert queued["messages"] == [
        {"id": "m-1", "role": "user", "parts": [{"type": "text", "text": "hello there"}]},
        {"id": created["turn_id"], "role": "assistant", "parts": []},
    ]
    approver = history("chat-q", approvers_api, token=APPROVERS["ana"])
    assert approver == queued
    assert history("chat-q", approvers_api)["status"] == 401
    unknown = history("chat-none")
    assert (unknown["status"], unknown["error"]) == (404, "unknown conversation 'chat-none'")
