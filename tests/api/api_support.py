"""Helpers of the API and CLI tests: SSE parsing, Redis snapshots, crafted turns, an in-process
server. What the other tests share with these (processes, waiting, scripts) is ``rigs``'.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis
import uvicorn
from harness import Harness

from ledger import keys
from ledger.codec import Envelope
from ledger.events import ApprovalRequested, Event, ToolDone, ToolStart
from ledger.signature import input_signature
from rigs import EMAIL, TICKET, ApiProcess, wait_until
from worker.base.settings import load_settings
from worker.dev.redis_server import free_port
from worker.edges.runtime import Runtime

#: the statuses GET /v1/turns/{id} may report (docs/http-api.md)
STATUSES = {"queued", "running", "resuming", "waiting", "completed", "stopped"}
#: the bearer token of the server that requires one
TOKEN = "test-token-0123456789-0123456789abcdef"
#: DRES_APPROVER_TOKENS of the server with approvers: {NAME: TOKEN}
APPROVERS = {
    "ana": "ana-approver-token-0123456789abcdef",
    "ops": "ops-approver-token-0123456789abcdef",
}

#: ``start(token=None)``: a ``dres api`` of the session, ready on /healthz
StartApi = Callable[..., ApiProcess]
Cli = Callable[..., "subprocess.CompletedProcess[str]"]


# -- Server-Sent Events ----------------------------------------------------------------------


@dataclass(frozen=True)
class Sse:
    """One SSE message: its ``id``, ``event`` and ``data`` fields."""

    id: str
    event: str
    data: str

    @property
    def json(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.data)
        return value


@dataclass(frozen=True)
class Comment:
    """An SSE comment line (``: keepalive``)."""

    text: str


def read_sse(response: httpx.Response) -> Iterator[Sse | Comment]:
    """Parse an event stream as it arrives; ends when the server closes the stream."""
    fields: dict[str, str] = {}
    data: list[str] = []
    for line in response.iter_lines():
        if not line:
            if fields or data:
                yield Sse(fields.get("id", ""), fields.get("event", "message"), "\n".join(data))
            fields, data = {}, []
        elif line.startswith(":"):
            yield Comment(line[1:].strip())
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                data.append(value)
            else:
                fields[name] = value


def sse_events(response: httpx.Response) -> Iterator[Sse]:
    """Only the messages of an event stream, comments left out."""
    for item in read_sse(response):
        if isinstance(item, Sse):
            yield item


def as_ledger(messages: list[Sse]) -> list[tuple[str, str, dict[str, Any]]]:
    """SSE messages in the form of ``ledger_form``, to compare them with the ledger."""
    return [(m.id, m.event, m.json) for m in messages]


def ledger_form(envelopes: list[Envelope]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(e.stream_id, e.event.type, e.event.model_dump(mode="json")) for e in envelopes]


# -- Redis ------------------------------------------------------------------------------------


def redis_state(client: redis.Redis) -> dict[bytes, Any]:
    """Every key of the Redis and its whole value: equal snapshots mean nothing was written.
    The workers' list is left out: a live worker's beats rewrite it every few seconds."""
    state: dict[bytes, Any] = {}
    for key in client.scan_iter("*"):
        if key == keys.workers().encode():
            continue
        kind = client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        readers: dict[str, Callable[[], Any]] = {
            "stream": lambda k=key: client.xrange(k),
            "hash": lambda k=key: client.hgetall(k),
            "list": lambda k=key: client.lrange(k, 0, -1),
            "set": lambda k=key: client.smembers(k),
            "zset": lambda k=key: client.zrange(k, 0, -1, withscores=True),
            "string": lambda k=key: client.get(k),
        }
        state[key] = (kind, readers.get(kind, lambda: None)())
    return state


def turn_count(client: redis.Redis) -> int:
    """How many turns exist (each has one metadata hash)."""
    return sum(1 for _ in client.scan_iter("dres:turn:*:meta"))


# -- turns ------------------------------------------------------------------------------------


def post_turn(http: httpx.Client, message: str = "do the task", **body: Any) -> dict[str, Any]:
    response = http.post("/v1/turns", json={"message": message, **body})
    assert response.status_code == 202, response.text
    created: dict[str, Any] = response.json()
    return created


def turn_with_calls(rt: Runtime) -> str:
    """A running turn with a completed call (call-1) and an interrupted one (call-2).

    call-1 is a ``send_email`` with its ``tool_done``, call-2 a ``create_ticket`` without one,
    both recorded under the lease of the turn's first run.
    """
    turn = rt.lifecycle.create("email and ticket")
    run = rt.lifecycle.claim(turn.turn_id, turn.run_id)
    assert run is not None
    common: dict[str, Any] = {"turn_id": turn.turn_id, "run_id": turn.run_id, "chunk": 0}
    events = [
        ToolStart(
            event_id="ev-1",
            ts=1.0,
            call_id="call-1",
            tool="send_email",
            input=EMAIL,
            signature=input_signature(EMAIL),
            **common,
        ),
        ToolDone(
            event_id="ev-2",
            ts=2.0,
            call_id="call-1",
            tool="send_email",
            result={"sent": True},
            **common,
        ),
        ToolStart(
            event_id="ev-3",
            ts=3.0,
            call_id="call-2",
            tool="create_ticket",
            input=TICKET,
            signature=input_signature(TICKET),
            **common,
        ),
    ]
    for event in events:
        rt.ledger.append(event, lease=run.lease)
    return turn.turn_id


def expected_journal() -> dict[str, list[dict[str, Any]]]:
    """The journal of ``turn_with_calls`` in the JSON form of the API and ``dres journal``."""
    return {
        "completed": [
            {
                "tool": "send_email",
                "call_id": "call-1",
                "input": EMAIL,
                "signature": input_signature(EMAIL),
                "result": {"sent": True},
            }
        ],
        "interrupted": [
            {
                "tool": "create_ticket",
                "call_id": "call-2",
                "input": TICKET,
                "signature": input_signature(TICKET),
                "result": None,
            }
        ],
    }


# (method, path with {turn} for a queued turn, request kwargs, status, words the detail holds)
Case = tuple[str, str, dict[str, Any], int, list[str]]


def check_bad_input(http: httpx.Client, rdb: redis.Redis, cases: dict[str, Case]) -> None:
    """Each case gets its status and a JSON ``detail`` holding its words; Redis stays unchanged.

    The cases run against a queued turn (its ledger must stay as it is); every case is tried
    and the mismatches are reported together.
    """
    turn_id = post_turn(http)["turn_id"]
    before = redis_state(rdb)
    wrong = []
    for name, (method, path, kwargs, status, words) in cases.items():
        if callable(kwargs.get("content")):
            kwargs = {**kwargs, "content": kwargs["content"]()}
        reply = http.request(method, path.format(turn=turn_id), **kwargs)
        try:
            detail = reply.json()["detail"]
        except (ValueError, KeyError, TypeError):
            detail = None
        if (
            reply.status_code != status
            or reply.headers.get("content-type") != "application/json"
            or not isinstance(detail, str)
            or not all(word.lower() in detail.lower() for word in words)
        ):
            wrong.append(f"{name}: {reply.status_code} {reply.text[:300]}")
        if redis_state(rdb) != before:
            wrong.append(f"{name}: Redis changed")
            before = redis_state(rdb)
    assert not wrong, "\n".join(wrong)


def status_of(http: httpx.Client, turn_id: str) -> dict[str, Any]:
    response = http.get(f"/v1/turns/{turn_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


# -- turns that wait for approval (docs/semantics.md) -------------------------------------------

#: a model step that sends an email, which DRES_APPROVAL=send_email makes wait
SEND_STEP = {"text": "Sending.", "tool_calls": [{"name": "send_email", "input": EMAIL}]}
DONE_STEP = {"text": "Done."}


class Approvals:
    """Turns made to wait for approval on the test's Redis by the in-process harness
    (``tests/harness.py``: the chunk path of a worker, DRES_APPROVAL=send_email), for the API
    and the CLI to act on; ``finish`` runs the run a decision queued, in-process too."""

    def __init__(self, client: redis.Redis, tmp: Any, **settings_: Any) -> None:
        settings = load_settings(journal_read_backoff_s=0, approval="send_email", **settings_)
        self.h = Harness(client, tmp, settings=settings)
        # real time, so a request's expiry is in the future for any reaper that looks
        self.h.clock.t = time.time()

    def wait(
        self, steps: list[dict[str, Any]] | None = None, **kw: Any
    ) -> tuple[str, ApprovalRequested]:
        """A new turn, run until it waits; its id and its (last) approval request."""
        self.h.clock.t += 1.0  # each turn's requests a second newer than the previous turn's
        turn_id = self.h.start(steps or [SEND_STEP, DONE_STEP], **kw)
        assert self.h.run_next() is None
        assert self.h.lifecycle.store.meta(turn_id).status == "waiting"
        return turn_id, self.requests(turn_id)[-1]

    def requests(self, turn_id: str) -> list[ApprovalRequested]:
        return [e for e in self.h.ledger.events(turn_id) if isinstance(e, ApprovalRequested)]

    def events(self, turn_id: str, *types: str) -> list[Event]:
        return [e for e in self.h.ledger.events(turn_id) if not types or e.type in types]

    def finish(self, turn_id: str) -> str:
        """Run the turn's pending run (queued by a decision) to the turn's end; its status."""
        self.h.turn_id, self.h.pending = turn_id, self.h.lifecycle.store.meta(turn_id).next_run
        return self.h.run_to_end().status


# -- an in-process server ---------------------------------------------------------------------


@contextmanager
def serve(app: Any) -> Iterator[str]:
    """Serve an ASGI app with uvicorn on a thread of this process; yields its base URL."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, timeout=10, what="the in-process server started")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


# -- the chat clients (tests/node) ------------------------------------------------------------

#: the node scripts that drive the chat front ends' own clients, and their packages
NODE_DIR = Path(__file__).resolve().parents[1] / "node"
#: seconds one client run may take
CLIENT_TIMEOUT_S = 60


def run_client(nodedir: Path, script: str, command: dict[str, Any]) -> dict[str, Any]:
    """Run ``node SCRIPT`` with ``command`` as its JSON input; its JSON output."""
    done = subprocess.run(
        ["node", script],
        cwd=nodedir,
        input=json.dumps(command),
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def text_of(message: dict[str, Any]) -> str:
    """A UI message's text parts, joined."""
    return "".join(p["text"] for p in message["parts"] if p["type"] == "text")


def tool_parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in message["parts"] if p["type"].startswith("tool-")]


# -- raw AG-UI streams --------------------------------------------------------------------------


def kinds(events: list[dict[str, Any]]) -> list[str]:
    """AG-UI events' types."""
    return [e["type"] for e in events]


def post_agui(http: httpx.Client, body: dict[str, Any], capture: Path) -> list[dict[str, Any]]:
    """``POST /v1/ag-ui`` with ``body``: its raw stream written to ``capture``; its events."""
    with http.stream("POST", "/v1/ag-ui", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        capture.write_bytes(response.read())
    datas = [line[6:] for line in capture.read_text().splitlines() if line.startswith("data: ")]
    return [json.loads(data) for data in datas]


def ag_ui_validate(capture: Path, *off: str) -> None:
    """``ag-ui-validate`` on a captured stream: no error, no warning (but the rules ``off``)."""
    validator = Path(sys.executable).with_name("ag-ui-validate")
    rules = [arg for rule in off for arg in ("--off", rule)]
    done = subprocess.run(
        [str(validator), str(capture), "--json", "--fail-on", "warning", *rules],
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
