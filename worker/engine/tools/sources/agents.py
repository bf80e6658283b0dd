"""``call_agent`` (docs/semantics.md): delegate a message to another dres app, return its answer.

The built-in write tool is registered when DRES_AGENTS names at least one app. It enqueues a
background turn on that app (``POST /v1/turns``) with the call's ``idempotency_key`` as the
``Idempotency-Key``: the key is the same for the same call across every resume, so a repeat
after a soft-limit cut, a crash or a redelivery gets the same child turn from the app, never a
second one. It is ``idempotent=True`` for that reason: an interrupted call is run again, and the
run again finds the child it started.

Then it follows the child's events (Server-Sent Events, ``Last-Event-ID`` on a reconnect) until
its ``turn_ended`` and returns ``{"turn_id", "status", "text"}`` (``text``: the child's final
answer; ``code`` too when it stopped, which is reported, not waited on). A child that waits for a
person's approval (docs/semantics.md) is reported at once too, as ``status: "waiting"`` with its
open requests, so the parent's model can tell the user where to approve; it is not waited on. The
enqueue runs inside the tool call's signal deferral like any write; the wait does not
(``ctx.interruptible()``): a soft limit or a Stop landing while the child works ends the run there,
the call stays interrupted, and the resumed run's identical call follows the same child.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from ledger.errors import EventDecodeError
from ledger.events import Event, ModelStart, RunEnded, Text, TurnEnded, parse_event
from worker.base.errors import DresError
from worker.base.masking import mask_text
from worker.base.tool_sources import AgentApp
from worker.engine.tools.context import ToolContext
from worker.engine.tools.spec import ToolSpec, specs_of, tool

#: seconds to connect to an app's API
CONNECT_S = 5.0
#: seconds the enqueue may wait for its answer. It runs inside the call's signal deferral, so
#: its attempts together stay well inside the 30 s between the default soft and hard limits
ENQUEUE_S = 10.0
#: attempts at the enqueue: a retry is safe, it carries the same Idempotency-Key
ENQUEUE_ATTEMPTS = 2
#: seconds of silence on the child's event stream before it is reconnected (the API sends a
#: keepalive every 15 s)
READ_S = 45.0
#: reconnects of the child's event stream in a row, with nothing received, before the call fails
MAX_RECONNECTS = 5
#: seconds before the first retry or reconnect; doubled at each further one
BACKOFF_S = 0.2
#: how the child turn runs on the other app: a crash there is picked up again, with no person
#: needed to press Continue
CHILD_MODE = "background"

DESCRIPTION = (
    "Delegate a task to another agent (a dres app) and wait for its answer. Known agents: {names}."
    " Returns the child turn's id, its status (completed or stopped) and its final answer."
)


class DelegationError(DresError):
    """A ``call_agent`` call that could not be made or followed; the model gets it as an error."""


def agent_tools(apps: Mapping[str, AgentApp]) -> list[ToolSpec]:
    """The built-in tools for DRES_AGENTS: ``call_agent`` when it names an app, else none."""
    if not apps:
        return []
    names = ", ".join(sorted(apps))

    @tool(name="call_agent", idempotent=True, description=DESCRIPTION.format(names=names))
    def call_agent(agent: str, message: str, *, ctx: ToolContext) -> dict[str, Any]:
        app = apps.get(agent)
        if app is None:
            raise DelegationError(f"unknown agent {agent!r}; known agents: {names}")
        with _client(app) as client:
            turn_id = _enqueue(client, agent, message, ctx.idempotency_key)
            with ctx.interruptible():
                return _follow(client, agent, turn_id)

    return specs_of([call_agent])


def _client(app: AgentApp) -> httpx.Client:
    headers = {"Authorization": f"Bearer {app.token}"} if app.token else {}
    timeout = httpx.Timeout(READ_S, connect=CONNECT_S)
    return httpx.Client(base_url=app.url.rstrip("/"), headers=headers, timeout=timeout)


def _enqueue(client: httpx.Client, agent: str, message: str, key: str) -> str:
    """The child turn's id: a new turn, or the one this key already made."""
    body = {"message": message, "mode": CHILD_MODE}
    timeout = httpx.Timeout(ENQUEUE_S, connect=CONNECT_S)
    for attempt in range(ENQUEUE_ATTEMPTS):
        try:
            response = client.post(
                "/v1/turns", json=body, headers={"Idempotency-Key": key}, timeout=timeout
            )
        except httpx.TransportError as e:
            if attempt + 1 == ENQUEUE_ATTEMPTS:
                why = mask_text(repr(e))
                raise DelegationError(f"agent {agent!r} unreachable: {why}") from None
            time.sleep(BACKOFF_S * 2**attempt)
            continue
        if response.status_code == 202:
            return str(response.json()["turn_id"])
        if response.status_code < 500 or attempt + 1 == ENQUEUE_ATTEMPTS:
            raise DelegationError(
                f"agent {agent!r} refused the turn: {response.status_code} {_detail(response)}"
            )
        time.sleep(BACKOFF_S * 2**attempt)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def _follow(client: httpx.Client, agent: str, turn_id: str) -> dict[str, Any]:
    """Read the child's events until its ``turn_ended``; its outcome."""
    answer = Answer(turn_id)
    last: str | None = None
    quiet = 0  # reconnects in a row that brought nothing
    while True:
        headers = {"Last-Event-ID": last} if last else {}
        got = False
        try:
            with client.stream("GET", f"/v1/turns/{turn_id}/events", headers=headers) as stream:
                if stream.status_code != 200:
                    stream.read()
                    raise DelegationError(
                        f"agent {agent!r}: cannot follow turn {turn_id}: "
                        f"{stream.status_code} {_detail(stream)}"
                    )
                for stream_id, event in sse_events(stream.iter_lines()):
                    last, got = stream_id, True
                    if answer.add(event):
                        return answer.outcome()
                    if answer.waiting and _still_waiting(client, turn_id, answer):
                        return answer.outcome()
        except (httpx.TransportError, httpx.DecodingError) as e:
            failure = mask_text(repr(e))
        else:
            failure = "the event stream closed before the turn ended"
        quiet = 0 if got else quiet + 1
        if quiet > MAX_RECONNECTS:
            raise DelegationError(f"agent {agent!r}: lost turn {turn_id}: {failure}")
        time.sleep(BACKOFF_S * 2 ** max(quiet - 1, 0))


def _still_waiting(client: httpx.Client, turn_id: str, answer: Answer) -> bool:
    """A run of the child ended waiting: is the child waiting now (a replay may be long past
    that wait)? Its open requests go into the answer when it is."""
    answer.waiting = False
    response = client.get(f"/v1/turns/{turn_id}")
    if response.status_code != 200:
        return False
    body = response.json()
    if body.get("status") != "waiting":
        return False
    answer.status = "waiting"
    answer.approvals = [
        {k: a.get(k) for k in ("approval_id", "tool", "input", "expires_at")}
        for a in body.get("approvals", [])
        if a.get("decision") is None
    ]
    return True


@dataclass
class Answer:
    """The fold of a child turn's events into what ``call_agent`` returns."""

    turn_id: str
    status: str = ""
    code: str = ""
    #: the text of the newest model call: the final answer once the turn ends
    parts: list[str] = field(default_factory=list)
    #: a run of the turn just ended waiting for a person's approval
    waiting: bool = False
    #: the open approval requests of a child that waits
    approvals: list[dict[str, Any]] = field(default_factory=list)

    def add(self, event: Event) -> bool:
        """Fold one event in; True once the turn has ended."""
        if isinstance(event, ModelStart):
            self.parts = []
        elif isinstance(event, Text):
            self.parts.append(event.text)
        elif isinstance(event, TurnEnded):
            self.status, self.code = event.status, event.code
            return True
        self.waiting = isinstance(event, RunEnded) and event.reason == "waiting"
        return False

    def outcome(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "turn_id": self.turn_id,
            "status": self.status,
            "text": "".join(self.parts),
        }
        if self.status == "waiting":
            result["approvals"] = self.approvals
            result["note"] = (
                "The delegated turn waits for a person to approve a call; it goes on once "
                "they decide. Tell the user where to approve: the turn's page, or "
                f"dres approve {self.turn_id} APPROVAL_ID."
            )
        elif self.status != "completed":
            result["code"] = self.code
        return result


def sse_events(lines: Iterable[str]) -> Iterator[tuple[str, Event]]:
    """Server-Sent Events of dres events: ``(id, event)`` for each; what is no event is skipped."""
    stream_id, data = "", []
    for line in lines:
        if line:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "id":
                stream_id = value
            elif name == "data":
                data.append(value)
            continue
        event = _decode("\n".join(data)) if data else None
        if event is not None:
            yield stream_id, event
        data = []


def _decode(data: str) -> Event | None:
    """An SSE message's event; None for a malformed one (skipped, as every reader skips it)."""
    try:
        return parse_event(json.loads(data))
    except (ValueError, EventDecodeError):
        return None


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail", "")) or response.reason_phrase
    except (ValueError, AttributeError):
        return response.text[:200] or response.reason_phrase
