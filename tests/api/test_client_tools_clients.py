"""Client tools through the chat front ends' own clients (docs/chat.md; docs/semantics.md, waits):
the AI SDK's ``Chat`` — its ``AbstractChat``, with ``onToolCall`` answering by ``addToolOutput`` and
``sendAutomaticallyWhen`` (``tests/node/chat_session.mjs``) — and AG-UI's ``HttpAgent`` with
frontend tools in its input (``tests/node/agui_client.mjs``), against a real ``dres api`` and one
real ``dres worker`` shared by the module (``DRES_APPROVAL=send_email``; each test on an empty
Redis).

The worker's default model is the OpenAI SDK talking to a fake provider (``rigs.providers``), so
a test reads the requests the model got: the client's output is in the one after the wait. Turns
that name a scripted model run it instead. A call waits for the client held by no run; its answer
is recorded once, resumes the same turn, and a repeat records nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from api_support import (
    DONE_STEP,
    ag_ui_validate,
    kinds,
    post_agui,
    run_client,
    status_of,
    text_of,
    tool_parts,
)

from ledger.events import Event
from ledger.store import Ledger
from rigs import (
    EMAIL,
    ApiProcess,
    FakeProvider,
    Received,
    Script,
    WorkerProcess,
    ended,
    fake_provider,
    having,
    of,
    wait_for,
)
from rigs.providers import OpenAIDialect
from tests.support import require_sdk
from tests.support.fixtures import StartWorker
from worker.demo_tools import outbox

pytestmark = pytest.mark.redis_server

OPENAI = OpenAIDialect()
#: seconds a turn may take to reach the awaited state
TURN_S = 20.0
QUESTION = {"question": "Red or blue?"}
#: a scripted step that asks the person at the client (``sample_tools.ask_user``)
ASK_STEP = {"text": "Let me ask.", "tool_calls": [{"name": "ask_user", "input": QUESTION}]}
#: an AG-UI page's own tool (a frontend tool), as its input declares it
PICK = {
    "name": "pick_colour",
    "description": "Ask the person to pick a colour",
    "parameters": {
        "type": "object",
        "properties": {"options": {"type": "array", "items": {"type": "string"}}},
        "required": ["options"],
    },
}
OPTIONS = {"options": ["red", "blue"]}


@pytest.fixture(scope="module")
def provider() -> Iterator[FakeProvider]:
    with fake_provider() as fake:
        yield fake


@pytest.fixture(scope="module")
def module_worker(start_module_worker: StartWorker, provider: FakeProvider) -> WorkerProcess:
    """One ``dres worker`` for the module's tests, its default model the fake provider's (a
    chunk long enough for a whole turn: each test's turns are short)."""
    require_sdk("openai")
    settings = {
        "DRES_APPROVAL": "send_email",
        "DRES_MODEL": "openai:test-model",
        "DRES_SOFT_LIMIT_S": "6",
        "DRES_HARD_LIMIT_S": "7",
    }
    return start_module_worker(overrides=settings | OPENAI.env(provider.url))


@pytest.fixture
def model(provider: FakeProvider, module_worker: WorkerProcess, http: httpx.Client) -> FakeProvider:
    """The fake provider, emptied for this test, with the module's worker running on an empty
    Redis."""
    with provider.changed:
        provider.replies.clear()
        provider.received.clear()
    return provider


def only_turn(http: httpx.Client, conversation_id: str) -> str:
    (turn,) = http.get(f"/v1/conversations/{conversation_id}").json()["turns"]
    turn_id: str = turn["turn_id"]
    return turn_id


def tool_messages(request: Received) -> list[tuple[str, str]]:
    """The tool results an OpenAI request carries: (the tool's name, the content)."""
    names = {
        call["id"]: call["function"]["name"]
        for message in request.body["messages"]
        for call in message.get("tool_calls") or ()
    }
    return [
        (names[m["tool_call_id"]], m["content"])
        for m in request.body["messages"]
        if m["role"] == "tool"
    ]


def offered(request: Received) -> set[str]:
    """The tools an OpenAI request offers the model."""
    return {tool["function"]["name"] for tool in request.body.get("tools") or ()}


def waited_once(events: list[Event], call_id: str) -> Any:
    """The turn waited for the call's output once and resumed on it: its one ``tool_done``."""
    (done,) = of(events, "tool_done", call_id=call_id)
    assert [e.reason for e in of(events, "run_ended")] == ["waiting", "completed"]
    resumed = of(events, "run_started")[-1]
    assert resumed.cause == "tool_output"
    assert events.index(done) < events.index(resumed)
    return done


# -- the AI SDK's Chat --------------------------------------------------------------------------


def session(nodedir: Path, url: str, chat_id: str, **command: Any) -> dict[str, Any]:
    """One action of a page with the AI SDK's ``Chat`` (``chat_session.mjs``)."""
    return run_client(nodedir, "chat_session.mjs", {"url": url, "chatId": chat_id, **command})


def test_an_ai_sdk_tool_answered_in_on_tool_call_resumes_the_same_turn_and_its_model_reads_it(
    node_clients: Path, api: ApiProcess, http: httpx.Client, model: FakeProvider, ledger: Ledger
) -> None:
    model.script(OPENAI.tool_call("call_ask", "ask_user", QUESTION), OPENAI.text("Red", " it is."))
    picked = {"colour": "red"}

    got = session(
        node_clients,
        api.url,
        "chat-ask",
        op={"do": "send", "text": "pick a colour"},
        answer={"tool": "ask_user", "output": picked},
    )

    asked, answered = got["requests"]
    assert (asked["status"], answered["status"]) == (200, 200)
    turn_id = only_turn(http, "chat-ask")
    said, message = got["messages"]
    assert (said["role"], message["id"]) == ("user", turn_id)
    (part,) = tool_parts(message)
    assert (part["type"], part["state"], part["output"]) == (
        "tool-ask_user",
        "output-available",
        picked,
    )
    assert text_of(message) == "Red it is."
    sent = answered["body"]["messages"][-1]
    assert sent["id"] == turn_id and tool_parts(sent)[0]["output"] == picked
    waiting, finish = got["ends"][:2]  # the first stream's end: the turn waits on the call
    assert waiting["messageMetadata"]["status"] == "waiting"
    assert finish["finishReason"] == "tool-calls"
    assert got["ends"][-1]["messageMetadata"]["status"] == "completed"
    events = ledger.events(turn_id)
    done = waited_once(events, part["toolCallId"])
    assert (done.result, done.is_error) == (picked, False)
    first, second = model.received
    assert "ask_user" in offered(first)
    assert tool_messages(second) == [("ask_user", json.dumps(picked))]

    again = session(
        node_clients, api.url, "chat-ask", op={"do": "resend", "request": answered["body"]}
    )

    assert again["requests"] == [{"status": 200, "body": answered["body"]}]
    assert text_of(again["messages"][-1]) == "Red it is."
    assert ledger.events(turn_id) == events
    assert len(model.received) == 2


def test_an_ai_sdk_output_error_is_recorded_as_the_calls_error_once(
    node_clients: Path,
    api: ApiProcess,
    http: httpx.Client,
    model: FakeProvider,
    ledger: Ledger,
) -> None:
    model.script(OPENAI.tool_call("call_ask", "ask_user", QUESTION), OPENAI.text("No matter."))
    asked = session(node_clients, api.url, "chat-err", op={"do": "send", "text": "pick one"})
    turn_id = only_turn(http, "chat-err")
    (part,) = tool_parts(asked["messages"][-1])
    assert part["state"] == "input-available"
    status = status_of(http, turn_id)
    assert (status["status"], status["waiting_for"]) == ("waiting", "client_tool")
    assert status["awaiting"] == [{"call_id": part["toolCallId"], "tool": "ask_user"}]

    answered = session(
        node_clients,
        api.url,
        "chat-err",
        messages=asked["messages"],
        op={"do": "answer", "errorText": "the person closed the dialog"},
    )

    (request,) = answered["requests"]
    assert request["status"] == 200
    message = answered["messages"][-1]
    assert message["id"] == turn_id and text_of(message) == "No matter."
    (part,) = tool_parts(message)  # as the page answered it, the resumed stream's too
    assert (part["state"], part["errorText"]) == ("output-error", "the person closed the dialog")
    events = wait_for(ledger, turn_id, ended("completed"), timeout=TURN_S)
    done = waited_once(events, part["toolCallId"])
    assert (done.result, done.is_error) == ("the person closed the dialog", True)
    assert tool_messages(model.received[-1]) == [
        ("ask_user", "Error: the person closed the dialog")
    ]

    again = session(
        node_clients, api.url, "chat-err", op={"do": "resend", "request": request["body"]}
    )

    assert again["requests"][0]["status"] == 200
    assert ledger.events(turn_id) == events


# -- AG-UI's HttpAgent --------------------------------------------------------------------------


def agui(nodedir: Path, url: str, thread_id: str, **command: Any) -> dict[str, Any]:
    """A new ``HttpAgent`` (a page opened on the thread) runs (``agui_client.mjs``)."""
    return run_client(nodedir, "agui_client.mjs", {"url": url, "threadId": thread_id, **command})


def test_an_agui_frontend_tool_finishes_the_run_and_a_tool_message_resumes_the_turn_once(
    node_clients: Path, api: ApiProcess, http: httpx.Client, model: FakeProvider, ledger: Ledger
) -> None:
    model.script(OPENAI.tool_call("call_pick", "pick_colour", OPTIONS), OPENAI.text("Blue, then."))
    picked = {"colour": "blue"}

    got = agui(
        node_clients, api.url, "thread-pick", message="pick one", tools=[PICK], answer=picked
    )

    asked, resumed = got["runs"]
    assert kinds(asked["events"])[-2:] == ["TOOL_CALL_END", "RUN_FINISHED"]
    assert "TOOL_CALL_RESULT" not in kinds(asked["events"])
    (call,) = [e for e in asked["events"] if e["type"] == "TOOL_CALL_START"]
    assert call["toolCallName"] == "pick_colour"
    assert asked["outcome"] == {"type": "success"}
    assert asked["pending"] == [call["toolCallId"]]
    turn_id = only_turn(http, "thread-pick")
    assert asked["events"][-1]["result"]["status"] == "waiting"
    assert "TOOL_CALL_RESULT" not in kinds(resumed["events"])  # the input carried it
    (finished,) = [e for e in resumed["events"] if e["type"] == "RUN_FINISHED"]
    assert finished["result"]["turn_id"] == turn_id
    assert finished["result"]["status"] == "completed"
    events = ledger.events(turn_id)
    done = waited_once(events, call["toolCallId"])
    assert (done.tool, done.result) == ("pick_colour", picked)
    first, second = model.received
    assert "pick_colour" in offered(first)
    assert tool_messages(second) == [("pick_colour", json.dumps(picked))]

    held = got["messages"]  # the same answer again: the messages up to the tool message
    cut = [m["role"] for m in held].index("tool") + 1
    rerun = agui(node_clients, api.url, "thread-pick", messages=held[:cut], tools=[PICK])

    (again,) = rerun["runs"]
    assert again["outcome"] == {"type": "success"} and rerun["error"] is None
    assert ledger.events(turn_id) == events
    assert len(model.received) == 2


def agui_input(thread_id: str, model: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``RunAgentInput`` with the frontend tool ``PICK``, as a raw client posts it."""
    return {
        "threadId": thread_id,
        "runId": f"run-{len(messages)}",
        "messages": messages,
        "tools": [PICK],
        "forwardedProps": {"model": model},
    }


def test_agui_runs_with_a_frontend_tool_and_an_interrupt_pass_ag_ui_validate(
    model: FakeProvider,
    http: httpx.Client,
    ledger: Ledger,
    script: Script,
    rdb: redis.Redis,
    tmp_path: Path,
) -> None:
    both = {
        "text": "Asking, and sending.",
        "tool_calls": [
            {"name": "pick_colour", "input": OPTIONS},
            {"name": "send_email", "input": EMAIL},
        ],
    }
    spec = script([both, DONE_STEP])
    said = {"id": "u1", "role": "user", "content": "pick and send"}

    asked = post_agui(http, agui_input("thread-raw", spec, [said]), tmp_path / "asked.sse")

    assert kinds(asked)[:2] == ["RUN_STARTED", "STEP_STARTED"]
    assert kinds(asked)[-1] == "RUN_FINISHED"
    assert "STEP_FINISHED" in kinds(asked)
    (interrupt,) = asked[-1]["outcome"]["interrupts"]
    calls = {e["toolCallName"]: e["toolCallId"] for e in asked if e["type"] == "TOOL_CALL_START"}
    assert set(calls) == {"pick_colour", "send_email"}
    assert interrupt["toolCallId"] == calls["send_email"]
    ag_ui_validate(tmp_path / "asked.sse")

    answer = {"id": "t1", "role": "tool", "toolCallId": calls["pick_colour"], "content": "red"}
    body = agui_input("thread-raw", spec, [said, answer])
    body["resume"] = [
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}
    ]
    resumed = post_agui(http, body, tmp_path / "resumed.sse")

    assert resumed[-1]["type"] == "RUN_FINISHED"
    assert resumed[-1]["result"]["status"] == "completed"
    results = [e["toolCallId"] for e in resumed if e["type"] == "TOOL_CALL_RESULT"]
    assert results == [calls["send_email"]]  # the input carried the frontend tool's
    # that result names a call the first run started, as AG-UI's interrupt lifecycle has it (run
    # 2: "...continue / ToolCallResult", docs.ag-ui.com/concepts/interrupts); the validator reads
    # one capture alone, and finds no start of it there (AGUI207)
    ag_ui_validate(tmp_path / "resumed.sse", "AGUI207")
    turn_id = resumed[-1]["result"]["turn_id"]
    events = wait_for(ledger, turn_id, having("turn_ended"), timeout=TURN_S)
    (done,) = of(events, "tool_done", tool="pick_colour")
    assert done.result == "red"
    assert len(outbox(rdb)) == 1
    assert not model.received


# -- the chat's history -------------------------------------------------------------------------


def history(nodedir: Path, url: str, chat_id: str) -> dict[str, Any]:
    """The chat's messages as ``validateUIMessages`` returns them (``chat_messages.mjs``)."""
    return run_client(nodedir, "chat_messages.mjs", {"url": url, "chatId": chat_id})


def test_the_history_shows_an_awaited_client_call_as_input_available_and_validates(
    node_clients: Path,
    api: ApiProcess,
    model: FakeProvider,
    http: httpx.Client,
    ledger: Ledger,
    script: Script,
) -> None:
    spec = script([ASK_STEP, DONE_STEP])
    asked = session(
        node_clients,
        api.url,
        "chat-h",
        body={"model": spec},
        op={"do": "send", "text": "ask me"},
    )
    message = asked["messages"][-1]

    waiting = history(node_clients, api.url, "chat-h")

    assert waiting["error"] is None
    assert waiting["messages"][1] == message
    (part,) = tool_parts(message)
    assert (part["type"], part["state"], part["input"]) == (
        "tool-ask_user",
        "input-available",
        QUESTION,
    )
    url = f"/v1/turns/{message['id']}/tool-outputs/{part['toolCallId']}"
    assert http.post(url, json={"output": {"answer": "red"}}).status_code == 202
    wait_for(ledger, message["id"], ended("completed"), timeout=TURN_S)

    done = history(node_clients, api.url, "chat-h")

    assert done["error"] is None
    (answered,) = tool_parts(done["messages"][1])
    assert (answered["state"], answered["output"]) == ("output-available", {"answer": "red"})
    assert text_of(done["messages"][1]) == "Let me ask.Done."


def test_an_ai_sdk_page_answering_one_of_two_calls_is_told_the_turn_waits_on_the_other(
    node_clients: Path,
    api: ApiProcess,
    model: FakeProvider,
    http: httpx.Client,
    ledger: Ledger,
    script: Script,
) -> None:
    """A stream that takes an answer leaving the turn waiting ends there (it waited on)."""
    big = {"question": "Big?"}
    both = {
        "text": "Two questions.",
        "tool_calls": [
            {"name": "ask_user", "input": QUESTION},
            {"name": "ask_user", "input": big},
        ],
    }
    spec = script([both, DONE_STEP])
    asked = session(
        node_clients, api.url, "chat-two", body={"model": spec}, op={"do": "send", "text": "ask"}
    )
    said, message = asked["messages"]
    first, second = tool_parts(message)
    first |= {"state": "output-available", "output": {"colour": "red"}}
    request = {"id": "chat-two", "messages": [said, message], "trigger": "submit-message"}

    one = session(
        node_clients, api.url, "chat-two", op={"do": "resend", "request": request | {"model": spec}}
    )

    assert one["requests"][0]["status"] == 200 and one["chunks"][-1] == "finish"
    assert one["messages"][-1]["metadata"]["status"] == "waiting"
    states = [p["state"] for p in tool_parts(one["messages"][-1])]
    assert states == ["output-available", "input-available"]
    status = status_of(http, message["id"])
    assert status["awaiting"] == [{"call_id": second["toolCallId"], "tool": "ask_user"}]

    other = session(
        node_clients,
        api.url,
        "chat-two",
        messages=one["messages"],
        body={"model": spec},
        op={"do": "answer", "output": {"size": "big"}},
    )

    assert text_of(other["messages"][-1]) == "Two questions.Done."
    events = wait_for(ledger, message["id"], ended("completed"), timeout=TURN_S)
    outputs = [(e.call_id, e.result) for e in of(events, "tool_done")]
    assert outputs == [
        (first["toolCallId"], {"colour": "red"}),
        (second["toolCallId"], {"size": "big"}),
    ]
