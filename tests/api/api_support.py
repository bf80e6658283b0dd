"""Helpers of the API and CLI tests: SSE parsing, Redis snapshots, crafted turns, waiting."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis
import uvicorn

from ledger.codec import Envelope
from ledger.events import ToolDone, ToolStart
from ledger.signature import input_signature
from worker.dev.redis_server import free_port
from worker.edges.runtime import Runtime

ROOT = Path(__file__).resolve().parents[2]

#: seconds between looks at state that cannot be waited on with XREAD BLOCK (HTTP status, files)
POLL_S = 0.02
#: the statuses GET /v1/turns/{id} may report (CONTRACT §10)
STATUSES = {"queued", "running", "resuming", "completed", "stopped"}
#: the bearer token of the server that requires one
TOKEN = "test-token-0123456789"
#: the inputs of the write tools the tests' turns call
EMAIL = {"to": "a@x.io", "subject": "Hi", "body": "hello"}
TICKET = {"title": "Printer on fire"}


# -- subprocesses -----------------------------------------------------------------------------

#: seconds a server may take to answer GET /healthz, or a worker to log "ready."
READY_S = 20.0
#: seconds a server or worker may take to exit after SIGTERM before its group is killed
STOP_S = 5.0


@dataclass
class Service:
    """A ``dres`` subprocess (api or worker) in its own session, its output in a log file."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    url: str = ""

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait(self, ready: Callable[[], bool], timeout: float = READY_S) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if self.process.poll() is not None:
                raise AssertionError(
                    f"{self.name} exited with {self.process.returncode}:\n{self.log()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} not ready within {timeout} s:\n{self.log()}")
            time.sleep(POLL_S)

    def terminate(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        """SIGTERM, a wait, then SIGKILL of whatever is left of the process's session."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=STOP_S)
        # Whatever is left of its session (a pool process outliving its parent) goes too.
        with suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


Script = Callable[..., str]
StartApi = Callable[..., Service]
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
    """Every key of the Redis and its whole value: equal snapshots mean nothing was written."""
    state: dict[bytes, Any] = {}
    for key in client.scan_iter("*"):
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


def crashed_stop(
    rt: Runtime, *, conversation_id: str | None = None, interrupted_write: bool = False
) -> str:
    """A foreground turn whose first run died, stopped as the reaper stops it (crashed).

    Crafted at the ledger level, deterministically and without a worker: the turn is created,
    its first run claimed (``run_started``) and then taken over as a dead run by
    ``TurnControl.take_over``, which for a foreground turn is ``stop_loudly`` with code crashed
    and Continue available. With ``interrupted_write`` the run first records the ``tool_start``
    of a write that never got its ``tool_done``.
    """
    turn = rt.lifecycle.create(
        "do the task",
        conversation_id=conversation_id,
    )
    run = rt.lifecycle.claim(turn.turn_id, turn.run_id)
    assert run is not None
    if interrupted_write:
        start = ToolStart(
            event_id=rt.ids.new("ev"),
            turn_id=turn.turn_id,
            run_id=turn.run_id,
            chunk=0,
            ts=rt.clock.now(),
            call_id=rt.ids.new("call"),
            tool="send_email",
            input=EMAIL,
            signature=input_signature(EMAIL),
        )
        rt.ledger.append(start, lease=run.lease)
    outcome = rt.lifecycle.take_over(rt.ledger.meta(turn.turn_id), "lease expired (test)")
    assert outcome.ok and outcome.reason == "stopped: crashed", outcome
    return turn.turn_id


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


# -- waiting ----------------------------------------------------------------------------------


def wait_until(check: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s")
        time.sleep(POLL_S)
    return value


def status_of(http: httpx.Client, turn_id: str) -> dict[str, Any]:
    response = http.get(f"/v1/turns/{turn_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


# -- scripts ----------------------------------------------------------------------------------

#: a turn of three model calls with text and a read and a write; the second call's first attempt
#: takes 1 s, twice the 0.5 s soft limit, so the turn always spans at least two chunks
MULTI_CHUNK: list[dict[str, Any]] = [
    {
        "text": "Let me look at the outbox before sending anything.",
        "tool_calls": [{"name": "list_outbox"}],
    },
    {
        "delay_s": 1.0,
        "text": "Sending the email now.",
        "tool_calls": [{"name": "send_email", "input": EMAIL}],
    },
    {"text": "Done: the email is sent."},
]


def busy(steps: int, delay_s: float = 0.3) -> list[dict[str, Any]]:
    """A long turn: ``steps`` model calls each thinking ``delay_s`` and then reading the outbox."""
    step = {"delay_s": delay_s, "text": "Thinking.", "tool_calls": [{"name": "list_outbox"}]}
    return [step] * steps + [{"text": "Done."}]


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
