"""The input rules of docs/http-api.md ("Errors") and the stream cap of docs/configuration.md
(``DRES_MAX_STREAMS``) against what an attack pass sent (issue 46), on real ``dres api`` servers:

- a stream id (``after``, ``Last-Event-ID``) is exactly ``N-N`` (a trailing newline passed
  Python's ``$`` and reached Redis: a 500);
- a decision's ``reason``, from any route or protocol, is a string of at most 2,000 characters
  (an object was a 500 on the chat route, 200,000 characters were stored);
- every id of a path or body is 1-128 characters of ``[A-Za-z0-9._:-]`` and not ``.`` or ``..``
  (a conversation ``..`` was taken, then unreachable), in the CLI too;
- tokenless with approvers, a chat protocol's message is taken as ``POST /v1/turns`` takes it;
- the live streams are capped below the process's open-file limit: one more gets 503 and its
  connection is closed while every other route answers (1,100 streams at 1,024 files hung).

No worker runs: a turn stays queued, or is made to wait by the in-process harness.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import redis
from api_support import APPROVERS, Approvals, Cli, StartApi, check_bad_input, post_turn, redis_state

from ledger.events import ApprovalDecided
from rigs import ROOT, ApiProcess, subprocess_env
from tests.support import DRES_ENV, TESTS
from worker.dev.redis_server import RedisServer, free_port

pytestmark = pytest.mark.redis_server

#: a reason one character over what a decision keeps
LONG_REASON = "x" * 2001


# -- stream ids ---------------------------------------------------------------------------------


def test_a_stream_id_that_is_not_exactly_n_n_is_a_422_naming_its_field(
    http: httpx.Client, rdb: redis.Redis
) -> None:
    """``0-0\\n`` passed ``re.match`` with ``$`` and Redis refused it mid-request (a 500)."""
    events = "/v1/turns/{turn}/events"
    check_bad_input(
        http,
        rdb,
        {
            "after with a newline": ("GET", events, {"params": {"after": "0-0\n"}}, 422, ["after"]),
            "after with a space": ("GET", events, {"params": {"after": "0-0 "}}, 422, ["after"]),
            "after without its sequence": (
                "GET",
                events,
                {"params": {"after": "3"}},
                422,
                ["after"],
            ),
            "Last-Event-ID of one part": (
                "GET",
                events,
                {"headers": {"Last-Event-ID": "3"}},
                422,
                ["Last-Event-ID"],
            ),
        },
    )


# -- a decision's reason ------------------------------------------------------------------------


def chat_answer(chat_id: str, approval_id: str, approval: dict[str, Any]) -> dict[str, Any]:
    """An AI SDK request whose last message answers ``approval_id`` with ``approval``'s fields."""
    part = {
        "type": "tool-send_email",
        "toolCallId": "call-x",
        "state": "approval-responded",
        "input": {},
        "approval": {"id": approval_id, "approved": False} | approval,
    }
    user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}
    answer = {"id": "turn", "role": "assistant", "parts": [part]}
    return {"id": chat_id, "messages": [user, answer], "trigger": "submit-message"}


def agui_resume(thread_id: str, approval_id: str, payload: Any) -> dict[str, Any]:
    return {
        "threadId": thread_id,
        "runId": "run-1",
        "messages": [{"id": "u1", "role": "user", "content": "hi"}],
        "resume": [{"interruptId": approval_id, "status": "resolved", "payload": payload}],
    }


def test_a_reason_that_is_not_a_short_string_is_a_422_on_every_route_and_decides_nothing(
    http: httpx.Client, rdb: redis.Redis, tmp_path: Path, dres_env: dict[str, str]
) -> None:
    ap = Approvals(rdb, tmp_path)
    turn_id, request = ap.wait()
    chat_id = ap.h.lifecycle.store.meta(turn_id).conversation_id
    aid = request.approval_id
    before = redis_state(rdb)

    replies = {
        "chat object": http.post("/v1/chat", json=chat_answer(chat_id, aid, {"reason": {"a": 1}})),
        "chat long": http.post("/v1/chat", json=chat_answer(chat_id, aid, {"reason": LONG_REASON})),
        "ag-ui object": http.post(
            "/v1/ag-ui", json=agui_resume(chat_id, aid, {"approved": False, "reason": [1]})
        ),
        "ag-ui long": http.post(
            "/v1/ag-ui", json=agui_resume(chat_id, aid, {"approved": False, "reason": LONG_REASON})
        ),
        "route long": http.post(
            f"/v1/turns/{turn_id}/approvals/{aid}",
            json={"decision": "deny", "signature": request.signature, "reason": LONG_REASON},
        ),
    }

    got = {name: (r.status_code, r.json().get("detail", "")) for name, r in replies.items()}
    assert all(status == 422 and "reason" in detail for status, detail in got.values()), got
    assert redis_state(rdb) == before
    assert ap.h.lifecycle.store.meta(turn_id).status == "waiting"
    # at the limit it is taken, as it is
    kept = "y" * 2000
    with http.stream("POST", "/v1/chat", json=chat_answer(chat_id, aid, {"reason": kept})) as taken:
        assert taken.status_code == 200  # the resumed turn's stream (no worker runs it here)
    decided = [e for e in ap.events(turn_id, "approval_decided") if isinstance(e, ApprovalDecided)]
    assert [(d.decision, d.reason) for d in decided] == [("deny", kept)]


# -- ids ----------------------------------------------------------------------------------------


def test_an_id_of_dots_or_another_form_is_a_422_naming_its_field_in_every_path_and_body(
    http: httpx.Client, rdb: redis.Redis
) -> None:
    """``.`` and ``..`` were taken as a conversation id, then no client could reach it again
    (a URL's path normalises them away); ``%2E%2E`` is how a path still carries them."""
    user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}
    cases: dict[str, Any] = {}
    for name in (".", ".."):
        dots = name.replace(".", "%2E")
        cases |= {
            f"turn conversation_id {name}": (
                "POST",
                "/v1/turns",
                {"json": {"message": "hi", "conversation_id": name}},
                422,
                ["conversation_id"],
            ),
            f"turn message_id {name}": (
                "POST",
                "/v1/turns",
                {"json": {"message": "hi", "message_id": name}},
                422,
                ["message_id"],
            ),
            f"chat id {name}": (
                "POST",
                "/v1/chat",
                {"json": {"id": name, "messages": [user]}},
                422,
                ["id"],
            ),
            f"ag-ui threadId {name}": (
                "POST",
                "/v1/ag-ui",
                {"json": {"threadId": name, "runId": "r", "messages": [user]}},
                422,
                ["threadId"],
            ),
            f"conversation path {name}": (
                "GET",
                f"/v1/conversations/{dots}",
                {},
                422,
                ["conversation_id"],
            ),
            f"delete conversation path {name}": (
                "DELETE",
                f"/v1/conversations/{dots}",
                {},
                422,
                ["conversation_id"],
            ),
            f"turn path {name}": ("GET", f"/v1/turns/{dots}/journal", {}, 422, ["turn_id"]),
            f"approval path {name}": (
                "POST",
                f"/v1/turns/{{turn}}/approvals/{dots}",
                {"json": {"decision": "deny", "signature": "0" * 64}},
                422,
                ["approval_id"],
            ),
            f"call path {name}": (
                "POST",
                f"/v1/turns/{{turn}}/tool-outputs/{dots}",
                {"json": {"output": 1}},
                422,
                ["call_id"],
            ),
            f"chat approval id {name}": (
                "POST",
                "/v1/chat",
                {"json": chat_answer("c-dots", name, {})},
                422,
                ["approval", "id"],
            ),
        }
    cases["chat approval id of no form"] = (
        "POST",
        "/v1/chat",
        {"json": chat_answer("c-dots", "a b", {})},
        422,
        ["approval", "id"],
    )
    cases["ag-ui tool message call id"] = (
        "POST",
        "/v1/ag-ui",
        {
            "json": {
                "threadId": "c-dots",
                "runId": "r",
                "messages": [user, {"role": "tool", "toolCallId": "..", "content": "1"}],
            }
        },
        422,
        ["toolCallId"],
    )
    check_bad_input(http, rdb, cases)


def test_the_cli_refuses_a_conversation_id_of_dots_in_one_line(cli: Cli) -> None:
    for name in (".", "..", "a b"):
        done = cli("enqueue", "hi", "--conversation", name)
        assert done.returncode == 2, done
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "--conversation" in done.stderr and done.stdout == ""


# -- who may call: tokenless with approvers -------------------------------------------------------


@pytest.fixture(scope="session")
def tokenless_approvers_api(api_servers: StartApi) -> ApiProcess:
    """A ``dres api`` with approvers and no API token (loopback only)."""
    return api_servers(DRES_APPROVER_TOKENS=json.dumps(APPROVERS))


def test_tokenless_with_approvers_a_chat_message_is_taken_as_post_turns_takes_it(
    tokenless_approvers_api: ApiProcess, redis_url: str
) -> None:
    """docs/http-api.md: with no API token, loopback writes need no token, as without approvers;
    only deciding wants an approver's. ``/v1/chat`` and ``/v1/ag-ui`` refused a message (401)
    that ``POST /v1/turns`` took."""
    user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}
    with httpx.Client(base_url=tokenless_approvers_api.url, timeout=10) as client:
        assert client.post("/v1/turns", json={"message": "hi"}).status_code == 202
        for path, body in (
            ("/v1/chat", {"id": "c-chat", "messages": [user]}),
            (
                "/v1/ag-ui",
                {
                    "threadId": "c-agui",
                    "runId": "r",
                    "messages": [{"id": "u1", "role": "user", "content": "hi"}],
                },
            ),
        ):
            with client.stream("POST", path, json=body) as reply:
                assert reply.status_code == 200, (path, reply.read())
        decision = {"decision": "approve", "signature": "0" * 64}
        refused = client.post("/v1/turns/t1/approvals/a1", json=decision)
        assert refused.status_code == 401, refused.text  # deciding still wants an approver


# -- the stream cap under the open-file limit -----------------------------------------------------

#: the API's open-file limit, soft and hard, in the cap's test
FILES = 256
#: seconds a stream may take to answer before it counts as hung
ANSWER_S = 10.0


def start_api_with_few_files(redis_server: RedisServer, log_path: Path) -> ApiProcess:
    """``dres api`` whose RLIMIT_NOFILE is (FILES, FILES): it cannot raise its soft limit."""

    def few_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (FILES, FILES))

    port = free_port()
    dres = {
        **DRES_ENV,
        "DRES_REDIS_URL": redis_server.url,
        "DRES_MAX_STREAMS": "2000",
        "DRES_LOG_FORMAT": "json",
    }
    args = ["api", "--host", "127.0.0.1", "--port", str(port)]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "worker.edges.cli", *args],
            cwd=ROOT,
            env=subprocess_env(dres, TESTS),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=few_files,
        )
    api = ApiProcess(process, log_path, url=f"http://127.0.0.1:{port}")
    api.wait_ready()
    return api


def open_stream(port: int, turn_id: str) -> tuple[socket.socket, bytes]:
    """A raw ``GET /v1/turns/{id}/events``: the socket and its response head (empty: hung)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_S)
    sock.sendall(
        f"GET /v1/turns/{turn_id}/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    )
    head = b""
    with suppress(TimeoutError):
        while b"\r\n\r\n" not in head:
            got = sock.recv(4096)
            if not got:
                break
            head += got
    return sock, head


def read_to_close(sock: socket.socket) -> bytes:
    """Everything until the server closes the connection (raises if it does not in time)."""
    out = b""
    while got := sock.recv(4096):
        out += got
    return out


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.fixture
def few_files_api(redis_server: RedisServer, tmp_path: Path) -> Iterator[ApiProcess]:
    api = start_api_with_few_files(redis_server, tmp_path / "api.log")
    try:
        yield api
    finally:
        api.stop()


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc")
def test_streams_past_the_open_file_limit_get_503_and_every_other_route_still_answers(
    few_files_api: ApiProcess, redis_url: str
) -> None:
    """With 256 files and DRES_MAX_STREAMS=2000, streams are refused with 503 (and their
    connections closed) before the API's descriptors run out: /healthz and the other routes
    answer, and asyncio never logs "out of system resource"."""
    api = few_files_api
    port = urlsplit(api.url).port
    assert port is not None
    with httpx.Client(base_url=api.url, timeout=ANSWER_S) as http:
        turn_id = post_turn(http)["turn_id"]  # queued: its stream stays open
    with ExitStack() as held:
        refused = b""
        for opened in range(FILES + 50):
            sock, head = open_stream(port, turn_id)
            held.callback(sock.close)
            assert head, f"stream {opened + 1} hung: no answer in {ANSWER_S} s"
            if head.startswith(b"HTTP/1.1 503"):
                files_then = open_files(api.pid)
                refused = head + read_to_close(sock)
                break
            assert head.startswith(b"HTTP/1.1 200"), head
        assert refused, f"{FILES + 50} streams and no 503"
        assert b"retry-after:" in refused.lower() and b"DRES_MAX_STREAMS" in refused
        assert files_then < FILES, f"the 503 came with {files_then} of {FILES} files open"
        with httpx.Client(base_url=api.url, timeout=ANSWER_S) as http:
            assert http.get("/healthz").status_code == 200
            assert http.get(f"/v1/turns/{turn_id}").status_code == 200
            assert http.get("/v1/conversations").status_code == 200
    log = api.log()
    assert "out of system resource" not in log
    capped = [json.loads(line) for line in log.splitlines() if '"live event streams' in line]
    assert len(capped) == 1, log[-3000:]
    assert capped[0]["streams"] == opened, capped
