"""Forks, retries and refusals through the chat front ends' own actions (docs/chat.md, "What a
client's action does"; docs/semantics.md, forks): the AI SDK's ``Chat`` — its ``AbstractChat``,
the class ``useChat`` drives, with its own ``regenerate``, ``sendMessage`` and
``addToolApprovalResponse`` (``tests/node/chat_session.mjs``) — and AG-UI's ``HttpAgent``
(``tests/node/agui_client.mjs``), against a real ``dres api`` and one real ``dres worker`` shared by
the module (``DRES_APPROVAL=send_email``; each test on an empty Redis).

Whatever the client does — a retried request, a second tab, a reload, a regenerate, an edit, the
fork route, a re-run — each test's one email is sent once in all; a request that carries nothing
to take starts nothing; ``double_text`` in the chat's body rules a new message while a turn is live.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from api_support import (
    DONE_STEP,
    SEND_STEP,
    post_turn,
    redis_state,
    run_client,
    text_of,
    tool_parts,
)

from ledger.store import Ledger
from rigs import (
    ApiProcess,
    Script,
    WorkerProcess,
    busy,
    ended,
    having,
    of,
    send,
    wait_for,
)
from tests.support.fixtures import StartWorker
from worker.demo_tools import outbox

pytestmark = pytest.mark.redis_server

#: the tool whose calls wait for a person on the module's worker
APPROVAL = "send_email"
#: seconds a turn may take to reach the awaited state
TURN_S = 20.0


@pytest.fixture(scope="module")
def module_worker(start_module_worker: StartWorker) -> WorkerProcess:
    """One ``dres worker`` for the module's tests."""
    return start_module_worker(overrides={"DRES_APPROVAL": APPROVAL})


@pytest.fixture
def ready(module_worker: WorkerProcess, http: httpx.Client) -> httpx.Client:
    """A client of the open server, on an empty Redis, with the module's worker running."""
    return http


def conversation(http: httpx.Client, conversation_id: str) -> list[dict[str, Any]]:
    """The conversation's turns: ``(turn_id, status, replaced_by)`` and the rest."""
    response = http.get(f"/v1/conversations/{conversation_id}")
    assert response.status_code == 200, response.text
    turns: list[dict[str, Any]] = response.json()["turns"]
    return turns


def line(turns: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    return [(t["turn_id"], t["status"], t["replaced_by"]) for t in turns]


def dres_state(client: redis.Redis) -> dict[bytes, Any]:
    """Every ``dres:`` key and its value (the broker's own keys, which the idle worker declares
    again after a test's ``flushall``, left out)."""
    return {k: v for k, v in redis_state(client).items() if k.startswith(b"dres:")}


def sent_by(ledger: Ledger, turn_id: str) -> Any:
    """The result the turn's one email call recorded (its ``tool_done``)."""
    (done,) = of(ledger.events(turn_id), "tool_done", tool=APPROVAL)
    return done.result


def blocked_from(ledger: Ledger, turn_id: str) -> list[tuple[str, str | None, Any]]:
    """The turn's blocked calls: ``(reason, inherited_from, the recorded result given)``."""
    blocked = of(ledger.events(turn_id), "tool_blocked")
    return [(e.reason, e.inherited_from, e.result["result"]) for e in blocked]


# -- the AI SDK's Chat ------------------------------------------------------------------------


@dataclass
class Page:
    """A page with the AI SDK's ``Chat`` of ``chat_id``: each ``do`` is one action of the chat
    (a node run), on the messages the page holds, which it holds after."""

    nodedir: Path
    url: str
    chat_id: str
    model: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)

    def do(
        self, model: str | None = None, body: dict[str, Any] | None = None, **op: Any
    ) -> dict[str, Any]:
        """``op`` (``do``: its name, and its arguments), the transport's ``body`` carrying
        ``model`` (this page's, unless given) and ``body``."""
        got = run_client(
            self.nodedir,
            "chat_session.mjs",
            {
                "url": self.url,
                "chatId": self.chat_id,
                "messages": self.messages,
                "body": {"model": model or self.model, **(body or {})},
                "op": op,
            },
        )
        self.messages = got["messages"]
        return got


@pytest.fixture
def page(node_clients: Path, api: ApiProcess, ready: httpx.Client, script: Script) -> Page:
    """A page of the chat ``chat-forks`` whose model sends one email (approved), then is done."""
    return Page(node_clients, api.url, "chat-forks", script([SEND_STEP, DONE_STEP]))


def sent_turn(page: Page, ledger: Ledger) -> str:
    """The page's message ``send it`` answered: its email approved and sent; the turn's id."""
    page.do(do="send", text="send it")
    page.do(do="approve", approved=True)
    turn_id: str = page.messages[-1]["id"]
    wait_for(ledger, turn_id, ended("completed"), timeout=TURN_S)
    return turn_id


def test_the_same_request_or_a_reload_while_its_turn_waits_attaches_and_supersedes_nothing(
    page: Page, ready: httpx.Client, ledger: Ledger, rdb: redis.Redis
) -> None:
    asked = page.do(do="send", text="send it")
    (turn,) = conversation(ready, page.chat_id)
    assert asked["messages"][-1]["id"] == turn["turn_id"] and turn["status"] == "waiting"
    (request,) = asked["requests"]
    (part,) = tool_parts(asked["messages"][-1])

    again = page.do(do="resend", request=request["body"])

    assert again["requests"] == [{"status": 200, "body": request["body"]}]
    message = again["messages"][-1]
    assert message["id"] == turn["turn_id"]
    (same,) = tool_parts(message)
    assert same["state"] == "approval-requested" and same["approval"] == part["approval"]
    assert again["chunks"][-4:] == [
        "tool-approval-request",
        "finish-step",
        "message-metadata",
        "finish",
    ]
    assert conversation(ready, page.chat_id) == [turn]

    page.messages = page.messages[:1]  # a page reloaded with its user message alone
    reloaded = page.do(do="reconnect")

    assert reloaded["requests"] == [{"status": 200, "method": "GET"}]
    assert reloaded["messages"][-1]["id"] == turn["turn_id"]
    assert tool_parts(reloaded["messages"][-1]) == [same]
    assert reloaded["chunks"][-1] == "finish"

    before = dres_state(rdb)

    nothing = page.do(do="submit")  # the request shown, answered by no decision

    assert nothing["requests"][0]["status"] == 409 and "nothing to take" in nothing["error"]
    assert dres_state(rdb) == before

    answered = page.do(do="approve", approved=True)

    assert text_of(answered["messages"][-1]) == "Sending.Done."
    assert tool_parts(answered["messages"][-1])[0]["state"] == "output-available"
    wait_for(ledger, turn["turn_id"], ended("completed"), timeout=TURN_S)
    assert len(outbox(rdb)) == 1

    late = page.do(do="resend", request=request["body"])

    assert late["messages"][-1]["id"] == turn["turn_id"]
    assert text_of(late["messages"][-1]) == "Sending.Done."
    assert late["chunks"][-1] == "finish"
    assert line(conversation(ready, page.chat_id)) == [(turn["turn_id"], "completed", None)]
    assert len(outbox(rdb)) == 1


def test_regenerate_and_the_fork_route_replace_the_answer_and_never_send_its_email_again(
    page: Page, ready: httpx.Client, ledger: Ledger, rdb: redis.Redis
) -> None:
    first = sent_turn(page, ledger)

    regenerated = page.do(do="regenerate", messageId=first)

    (request,) = regenerated["requests"]
    body = request["body"]
    assert (body["trigger"], body["messageId"]) == ("regenerate-message", first)
    assert [m["role"] for m in body["messages"]] == ["user"]
    assert [m["role"] for m in page.messages] == ["user", "assistant"]
    fork = page.messages[-1]["id"]
    assert fork != first
    sent = sent_by(ledger, first)
    (part,) = tool_parts(page.messages[-1])
    assert (part["state"], part["output"]["result"]) == ("output-available", sent)
    wait_for(ledger, fork, ended("completed"), timeout=TURN_S)
    assert blocked_from(ledger, fork) == [("completed", first, sent)]
    assert not of(ledger.events(fork), "approval_requested")

    response = ready.post(f"/v1/turns/{fork}/fork", json={})

    assert response.status_code == 202, response.text
    routed = response.json()
    assert routed["replaces"] == [fork]
    wait_for(ledger, routed["turn_id"], ended("completed"), timeout=TURN_S)
    assert blocked_from(ledger, routed["turn_id"]) == [("completed", first, sent)]
    assert line(conversation(ready, page.chat_id)) == [
        (first, "completed", fork),
        (fork, "completed", routed["turn_id"]),
        (routed["turn_id"], "completed", None),
    ]

    bare = page.do(do="regenerate")  # useChat's regenerate(): no messageId

    assert "messageId" not in bare["requests"][0]["body"]
    last = page.messages[-1]["id"]
    wait_for(ledger, last, ended("completed"), timeout=TURN_S)
    assert blocked_from(ledger, last) == [("completed", first, sent)]
    assert conversation(ready, page.chat_id)[-2]["replaced_by"] == last
    assert [m["turn_id"] for m in outbox(rdb)] == [first]


def test_an_edit_of_an_earlier_message_forks_it_and_stops_and_replaces_every_later_turn(
    page: Page, ready: httpx.Client, ledger: Ledger, rdb: redis.Redis, script: Script
) -> None:
    first = sent_turn(page, ledger)
    page.do(do="send", text="and one to bo", model=script([send("bo@x.io", "Later"), DONE_STEP]))
    second = page.messages[-1]["id"]
    assert tool_parts(page.messages[-1])[0]["state"] == "approval-requested"
    asked = page.messages[0]

    edited = page.do(do="edit", messageId=asked["id"], text="send it again")

    (request,) = edited["requests"]
    assert request["body"]["trigger"] == "submit-message"
    assert [(m["id"], text_of(m)) for m in request["body"]["messages"]] == [
        (asked["id"], "send it again")
    ]
    fork = page.messages[-1]["id"]
    assert [m["role"] for m in page.messages] == ["user", "assistant"]
    wait_for(ledger, fork, ended("completed"), timeout=TURN_S)
    assert blocked_from(ledger, fork) == [("completed", first, sent_by(ledger, first))]
    turns = conversation(ready, page.chat_id)
    assert line(turns) == [
        (first, "completed", fork),
        (second, "stopped", fork),
        (fork, "completed", None),
    ]
    assert turns[1]["code"] == "superseded"
    assert (turns[-1]["message"], turns[-1]["message_id"]) == ("send it again", asked["id"])

    again = page.do(do="resend", request=request["body"])

    assert again["messages"][-1]["id"] == fork
    assert len(conversation(ready, page.chat_id)) == 3
    assert [m["turn_id"] for m in outbox(rdb)] == [first]


def test_a_request_whose_last_message_is_the_assistants_starts_nothing(
    page: Page, ready: httpx.Client, ledger: Ledger, rdb: redis.Redis, script: Script
) -> None:
    page.do(do="send", text="hello", model=script([{"text": "Hi."}]))
    (turn,) = conversation(ready, page.chat_id)
    wait_for(ledger, turn["turn_id"], ended("completed"), timeout=TURN_S)
    before = dres_state(rdb)

    refused = page.do(do="submit")

    (request,) = refused["requests"]
    assert request["status"] == 409 and "nothing to take" in refused["error"]
    assert request["body"]["messages"][-1]["role"] == "assistant"
    assert dres_state(rdb) == before
    assert len(conversation(ready, page.chat_id)) == 1


def test_double_text_in_the_chats_body_refuses_or_interrupts_the_live_turn(
    page: Page, ready: httpx.Client, ledger: Ledger, script: Script
) -> None:
    work = {"message": "work", "conversation_id": page.chat_id, "model": script(busy(40))}
    live = post_turn(ready, **work)["turn_id"]
    wait_for(ledger, live, having("model_start"), timeout=TURN_S)
    hello = script([{"text": "Hi."}])

    refused = page.do(do="send", text="hello", model=hello, body={"double_text": "reject"})

    assert refused["requests"][0]["status"] == 409 and live in refused["error"]
    assert [t["turn_id"] for t in conversation(ready, page.chat_id)] == [live]

    page.messages = []
    page.do(do="send", text="hello", model=hello, body={"double_text": "interrupt"})

    assert text_of(page.messages[-1]) == "Hi."
    turns = conversation(ready, page.chat_id)
    assert line(turns) == [(live, "stopped", None), (page.messages[-1]["id"], "completed", None)]
    assert turns[0]["code"] == "superseded"


# -- AG-UI's HttpAgent ------------------------------------------------------------------------


@pytest.fixture
def agui(node_clients: Path, api: ApiProcess, ready: httpx.Client) -> Any:
    """``agui(thread_id, message, model, **command)``: a new ``HttpAgent`` (a page opened on the
    thread) runs once (``agui_client.mjs``)."""

    def run(thread_id: str, message: str, model: str, **command: Any) -> dict[str, Any]:
        return run_client(
            node_clients,
            "agui_client.mjs",
            {"url": api.url, "threadId": thread_id, "message": message, "model": model, **command},
        )

    return run


def calls(run: dict[str, Any]) -> list[str]:
    return [e["toolCallId"] for e in run["events"] if e["type"] == "TOOL_CALL_START"]


def test_an_agui_rerun_attaches_and_an_edit_and_a_regenerate_fork_without_sending_again(
    agui: Any, ready: httpx.Client, ledger: Ledger, rdb: redis.Redis, script: Script
) -> None:
    spec, thread = script([SEND_STEP, DONE_STEP]), "thread-forks"
    (asked,) = agui(thread, "send it", spec)["runs"]
    (interrupt,) = asked["outcome"]["interrupts"]
    (turn,) = conversation(ready, thread)
    first = turn["turn_id"]
    assert turn["status"] == "waiting"

    # a second page re-runs the same messages, then answers the interrupt it is shown
    tab = agui(thread, "send it", spec, approve=True)

    rerun, resumed = tab["runs"]
    assert rerun["outcome"]["interrupts"] == [interrupt]
    assert calls(rerun) == calls(asked)
    assert resumed["outcome"] == {"type": "success"}
    wait_for(ledger, first, ended("completed"), timeout=TURN_S)
    assert [m["turn_id"] for m in outbox(rdb)] == [first]

    (late,) = agui(thread, "send it", spec)["runs"]  # a page opened after the end re-runs

    assert late["outcome"] == {"type": "success"}, late["outcome"]
    assert calls(late) == calls(asked)
    assert "TOOL_CALL_RESULT" in [e["type"] for e in late["events"]]
    assert line(conversation(ready, thread)) == [(first, "completed", None)]
    held = tab["messages"]
    roles = [m["role"] for m in held]
    before = dres_state(rdb)

    for cut in (roles.index("tool") + 1, len(held)):  # tool-last, then assistant-last
        assert held[cut - 1]["role"] in {"tool", "assistant"}
        refused = agui(thread, "send it", spec, messages=held[:cut])
        assert refused["runs"] == [] and "HTTP 409" in refused["error"], refused
        assert "resumes nothing" in refused["error"]

    assert dres_state(rdb) == before

    (edited,) = agui(thread, "send it now", spec)["runs"]

    assert edited["outcome"] == {"type": "success"}
    fork = conversation(ready, thread)[-1]["turn_id"]
    sent = sent_by(ledger, first)
    assert blocked_from(ledger, fork) == [("completed", first, sent)]

    (regenerated,) = agui(thread, "send it now", spec, props={"regenerate": True})["runs"]

    assert regenerated["outcome"] == {"type": "success"}
    again = conversation(ready, thread)[-1]["turn_id"]
    wait_for(ledger, again, ended("completed"), timeout=TURN_S)
    assert blocked_from(ledger, again) == [("completed", first, sent)]
    assert line(conversation(ready, thread)) == [
        (first, "completed", fork),
        (fork, "completed", again),
        (again, "completed", None),
    ]
    assert [m["turn_id"] for m in outbox(rdb)] == [first]
