"""Who may call the chat front ends' routes (docs/chat.md, docs/http-api.md "Who may call"): the
same token, ``Host`` and ``Origin`` rules as every route, and with approvers set only an
approver's token decides through a chat's answer. On the session's real ``dres api`` servers;
turns are made to wait by the in-process harness (``api_support.Approvals``), so no worker runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import redis
from api_support import APPROVERS, TOKEN, Approvals, StartApi, redis_state

from ledger.events import ApprovalDecided
from rigs import ApiProcess

pytestmark = pytest.mark.redis_server

AUTH = {"Authorization": f"Bearer {TOKEN}"}
ANA = {"Authorization": f"Bearer {APPROVERS['ana']}"}
FOREIGN = "http://attacker.example"


def message_body(chat_id: str) -> dict[str, Any]:
    user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}
    return {"id": chat_id, "messages": [user], "trigger": "submit-message"}


def answer_body(chat_id: str, approval_id: str, call_id: str, approved: bool) -> dict[str, Any]:
    part = {
        "type": "tool-send_email",
        "toolCallId": call_id,
        "state": "approval-responded",
        "input": {},
        "approval": {"id": approval_id, "approved": approved},
    }
    body = message_body(chat_id)
    body["messages"].append({"id": "turn", "role": "assistant", "parts": [part]})
    return body


def agui_body(thread_id: str) -> dict[str, Any]:
    return {
        "threadId": thread_id,
        "runId": "run-1",
        "messages": [{"id": "u1", "role": "user", "content": "hi"}],
    }


def first_chunk(client: httpx.Client, path: str, body: dict[str, Any], **kw: Any) -> Any:
    """The first SSE data of a POST's stream (the stream is closed after it), or the error."""
    with client.stream("POST", path, json=body, **kw) as response:
        if response.status_code != 200:
            response.read()
            return response
        for line in response.iter_lines():
            if line.startswith("data: "):
                return json.loads(line[6:])
    raise AssertionError("the stream ended without data")


def test_the_chat_routes_want_the_token_and_refuse_another_sites_page(
    guarded: httpx.Client, rdb: redis.Redis
) -> None:
    before = redis_state(rdb)
    replies = [
        guarded.post("/v1/chat", json=message_body("c1")),
        guarded.post("/v1/ag-ui", json=agui_body("c1")),
        guarded.get("/v1/chat/c1/stream"),
        guarded.post("/v1/chat", json=message_body("c1"), headers={**AUTH, "Origin": FOREIGN}),
        guarded.post("/v1/ag-ui", json=agui_body("c1"), headers={**AUTH, "Origin": FOREIGN}),
    ]
    assert [r.status_code for r in replies] == [401, 401, 401, 403, 403]
    assert redis_state(rdb) == before  # nothing was enqueued
    assert guarded.get("/v1/chat/c1/stream", headers=AUTH).status_code == 204


def test_a_tokenless_api_refuses_a_rebound_host_on_the_chat_routes(
    http: httpx.Client, api: ApiProcess
) -> None:
    host = {"Host": f"rebind.attacker.example:{urlsplit(api.url).port}"}
    replies = [
        http.post("/v1/chat", json=message_body("c1"), headers=host),
        http.post("/v1/ag-ui", json=agui_body("c1"), headers=host),
        http.get("/v1/chat/c1/stream", headers=host),
    ]
    assert [r.status_code for r in replies] == [421, 421, 421]


def test_with_approvers_only_an_approvers_answer_decides_and_only_once(
    approving: httpx.Client, rdb: redis.Redis, tmp_path: Path, dres_env: dict[str, str]
) -> None:
    ap = Approvals(rdb, tmp_path)
    turn_id, request = ap.wait()
    chat_id = ap.h.lifecycle.store.meta(turn_id).conversation_id
    answer = answer_body(chat_id, request.approval_id, request.call_id, approved=True)

    by_caller = approving.post("/v1/chat", json=answer, headers=AUTH)
    message_by_approver = approving.post("/v1/chat", json=message_body(chat_id), headers=ANA)
    assert (by_caller.status_code, message_by_approver.status_code) == (403, 403)
    assert approving.post("/v1/chat", json=answer).status_code == 401

    start = first_chunk(approving, "/v1/chat", answer, headers=ANA)
    assert start == {"type": "start", "messageId": turn_id}
    again = first_chunk(approving, "/v1/chat", answer, headers=ANA)
    assert again == start

    decided = [e for e in ap.events(turn_id, "approval_decided") if isinstance(e, ApprovalDecided)]
    assert [(d.decision, d.by) for d in decided] == [("approve", "ana")]


def test_an_agui_resume_that_is_not_approved_denies_with_its_reason(
    http: httpx.Client, rdb: redis.Redis, tmp_path: Path, dres_env: dict[str, str]
) -> None:
    ap = Approvals(rdb, tmp_path)
    turn_id, request = ap.wait()
    thread_id = ap.h.lifecycle.store.meta(turn_id).conversation_id
    body = agui_body(thread_id) | {
        "resume": [
            {
                "interruptId": request.approval_id,
                "status": "resolved",
                "payload": {"approved": False, "reason": "not today"},
            }
        ]
    }

    started = first_chunk(http, "/v1/ag-ui", body)

    assert started == {"type": "RUN_STARTED", "threadId": thread_id, "runId": "run-1"}
    decided = [e for e in ap.events(turn_id, "approval_decided") if isinstance(e, ApprovalDecided)]
    assert [(d.decision, d.reason) for d in decided] == [("deny", "not today")]
    unknown = body | {"resume": [{"interruptId": "ap_nope", "status": "cancelled"}]}
    refused = http.post("/v1/ag-ui", json=unknown)  # no request of the newest turn: nothing taken
    assert refused.status_code == 409 and "ap_nope" in refused.json()["detail"]


def test_over_dres_max_streams_a_chat_is_refused_with_503_before_anything_is_written(
    api_servers: StartApi, rdb: redis.Redis, tmp_path: Path, dres_env: dict[str, str]
) -> None:
    server = api_servers(DRES_MAX_STREAMS="1")
    ap = Approvals(rdb, tmp_path)
    turn_id, _ = ap.wait()  # a waiting turn: its event stream stays open
    with (
        httpx.Client(base_url=server.url, timeout=10) as client,
        client.stream("GET", f"/v1/turns/{turn_id}/events") as held,
    ):
        assert held.status_code == 200
        before = redis_state(rdb)
        replies = [
            client.post("/v1/chat", json=message_body("c-full")),
            client.post("/v1/ag-ui", json=agui_body("c-full")),
        ]
        assert [r.status_code for r in replies] == [503, 503]
        assert all(r.headers["Retry-After"].isdigit() for r in replies)
        assert "DRES_MAX_STREAMS" in replies[0].json()["detail"]
        assert redis_state(rdb) == before


def test_a_chat_without_text_or_with_parts_of_no_shape_is_a_422_and_writes_nothing(
    http: httpx.Client, rdb: redis.Redis
) -> None:
    before = redis_state(rdb)
    blank = message_body("c-blank")
    blank["messages"][0]["parts"] = [7, None, {"type": "text", "text": "  "}]
    no_user = {"id": "c-blank", "messages": [{"role": "assistant", "parts": "x"}]}
    agui_blank = agui_body("c-blank") | {"messages": [{"role": "user", "content": [1, {}]}]}
    replies = [
        http.post("/v1/chat", json=blank),
        http.post("/v1/chat", json=no_user),
        http.post("/v1/ag-ui", json=agui_blank),
        http.post("/v1/ag-ui", json=agui_body("c-blank") | {"forwardedProps": {"model": 3}}),
    ]
    assert [r.status_code for r in replies] == [422, 422, 422, 422], [r.text for r in replies]
    assert redis_state(rdb) == before
