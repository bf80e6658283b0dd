"""A turn is one trace (docs/tracing.md): ``dres api`` and prefork workers export over OTLP/HTTP to
a real receiver in the test (``rigs.otlp``), which decodes what they sent."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest
from api_support import StartApi

from ledger.store import Ledger
from rigs import (
    DONE,
    MULTI_CHUNK,
    ApiProcess,
    Script,
    ended,
    having,
    of,
    send,
    show,
    think,
    wait_for,
)
from rigs.otlp import Receiver, Span, otlp_receiver
from rigs.waiting import wait_until
from tests.support.fixtures import StartWorker

pytestmark = pytest.mark.redis_server

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"
#: OTLP span kinds (rigs.otlp.Span.kind)
INTERNAL, CLIENT = 1, 3


@pytest.fixture(scope="session")
def receiver() -> Iterator[Receiver]:
    with otlp_receiver() as running:
        yield running


def otel_env(receiver: Receiver) -> dict[str, str]:
    """Traces to the receiver, each batch sent within 50 ms."""
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "50"}


@pytest.fixture(scope="session")
def traced_api(api_servers: StartApi, receiver: Receiver) -> ApiProcess:
    """The session's ``dres api`` that exports its traces to the receiver."""
    return api_servers(**otel_env(receiver))


@pytest.fixture
def traced(traced_api: ApiProcess, redis_url: str) -> Iterator[httpx.Client]:
    """A client of the traced API, on an empty Redis."""
    with httpx.Client(base_url=traced_api.url, timeout=10) as client:
        yield client


def spans_of(receiver: Receiver, turn_id: str, ready: Callable[[list[Span]], object]) -> list[Span]:
    """The turn's spans once ``ready(spans)`` holds (they arrive in batches, process by process)."""

    def read() -> list[Span] | None:
        spans = [s for s in receiver.received() if s.attributes.get("dres.turn_id") == turn_id]
        return spans if ready(spans) else None

    return wait_until(read, timeout=10, what="the turn's spans")


def named(spans: list[Span], prefix: str) -> list[Span]:
    return [s for s in spans if s.name == prefix or s.name.startswith(prefix + " ")]


def test_a_turn_cut_by_its_soft_limit_is_one_trace_under_the_callers_traceparent(
    start_worker: StartWorker,
    traced: httpx.Client,
    receiver: Receiver,
    script: Script,
    ledger: Ledger,
) -> None:
    start_worker(overrides=otel_env(receiver))
    body = {"message": "send it", "model": script(MULTI_CHUNK)}
    reply = traced.post("/v1/turns", json=body, headers={"traceparent": TRACEPARENT})
    assert reply.status_code == 202, reply.text
    turn_id = reply.json()["turn_id"]

    events = wait_for(ledger, turn_id, ended("completed"), what="the turn's end")
    runs = of(events, "run_started")
    assert len(runs) >= 2, show(events)
    calls = of(events, "model_start")
    spans = spans_of(
        receiver,
        turn_id,
        lambda s: (
            len(named(s, "run")) == len(runs)
            and len(named(s, "chat")) == len(calls)
            and named(s, "turn")
        ),
    )

    assert {s.trace_id for s in spans} == {TRACE_ID}
    [root] = named(spans, "turn")
    assert root.parent_id == CALLER_SPAN
    run_spans = named(spans, "run")
    assert {s.parent_id for s in run_spans} == {root.span_id}
    assert sorted(s.attributes["dres.run_id"] for s in run_spans) == sorted(r.run_id for r in runs)
    assert len({s.attributes["dres.chunk"] for s in run_spans}) >= 2
    handing = [s for s in run_spans if "dres.hand_over" in s.event_names()]
    resuming = [s for s in run_spans if "dres.resume" in s.event_names()]
    assert handing and resuming, run_spans

    run_ids = {s.span_id for s in run_spans}
    chats = named(spans, "chat")
    for chat in chats:
        assert chat.parent_id in run_ids
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "scripted"
        assert {"dres.turn_id", "dres.run_id", "dres.chunk"} <= chat.attributes.keys()
    # the call whose delay the soft limit cut still ended its span, as an error
    assert any(c.status == 2 for c in chats), chats
    assert any(c.attributes.get("gen_ai.response.finish_reasons") == ["stop"] for c in chats)

    tools = named(spans, "execute_tool")
    started = {e.call_id: e.tool for e in of(events, "tool_start")}
    assert {
        t.attributes["gen_ai.tool.call.id"]: t.attributes["gen_ai.tool.name"] for t in tools
    } == (started)
    by_tool = {t.attributes["gen_ai.tool.name"]: t for t in tools}
    assert by_tool["list_outbox"].attributes["dres.tool.read_only"] is True
    assert by_tool["send_email"].attributes["dres.tool.read_only"] is False
    assert all("gen_ai.tool.call.arguments" not in t.attributes for t in tools), "no content"

    # a model call is a call out (the GenAI conventions' inference spans are CLIENT); the rest is
    # work done in dres's own processes
    assert {c.kind for c in chats} == {CLIENT}
    assert {s.kind for s in [root, *run_spans, *tools]} == {INTERNAL}


def test_a_repeat_blocked_by_layer_2_is_an_execute_tool_span_with_its_blocked_reason(
    start_worker: StartWorker,
    traced: httpx.Client,
    receiver: Receiver,
    script: Script,
    ledger: Ledger,
) -> None:
    start_worker(overrides=otel_env(receiver))
    model = script([send("a@x.io", "Hi"), {"delay_s": 1.0, "text": "Thinking."}, DONE], "restart")
    turn_id = traced.post("/v1/turns", json={"message": "send it", "model": model}).json()[
        "turn_id"
    ]

    events = wait_for(ledger, turn_id, ended("completed"), what="the turn's end")
    [blocked] = of(events, "tool_blocked")
    spans = spans_of(
        receiver, turn_id, lambda s: any("dres.tool.blocked_reason" in t.attributes for t in s)
    )
    [span] = [s for s in named(spans, "execute_tool") if "dres.tool.blocked_reason" in s.attributes]
    assert span.attributes["dres.tool.blocked_reason"] == blocked.reason == "completed"
    assert span.attributes["gen_ai.tool.call.id"] == blocked.call_id
    assert span.name == "execute_tool send_email"
    assert len({s.trace_id for s in spans}) == 1


def test_a_turn_whose_worker_was_killed_and_taken_over_keeps_one_trace(
    start_worker: StartWorker,
    traced: httpx.Client,
    receiver: Receiver,
    script: Script,
    ledger: Ledger,
) -> None:
    first = start_worker(overrides=otel_env(receiver))
    model = script([send("ada@x.io", "Launch"), think(2.0), DONE], "restart")
    body = {"message": "email Ada, then think", "mode": "background", "model": model}
    turn_id = traced.post("/v1/turns", json=body).json()["turn_id"]
    wait_for(ledger, turn_id, having("model_start", step=1), what="the second call")
    # the first run's finished spans are exported before it dies
    spans_of(receiver, turn_id, lambda s: named(s, "execute_tool"))

    first.kill_group()
    start_worker(overrides=otel_env(receiver))
    events = wait_for(ledger, turn_id, ended("completed"), timeout=15, what="the turn's end")
    first_run, second_run = of(events, "run_started")
    assert second_run.cause == "reaper", show(events)

    def taken_over(spans: list[Span]) -> bool:
        return any(
            s.attributes.get("dres.run_id") == second_run.run_id for s in named(spans, "run")
        )

    spans = spans_of(receiver, turn_id, taken_over)
    assert len({s.trace_id for s in spans}) == 1, spans
    [root] = named(spans, "turn")
    [second] = [s for s in named(spans, "run") if s.attributes["dres.run_id"] == second_run.run_id]
    assert second.parent_id == root.span_id
    assert second.attributes["dres.cause"] == "reaper"
    assert "dres.takeover" in second.event_names()
    assert any(s.attributes.get("dres.run_id") == first_run.run_id for s in spans)


def test_a_turn_resumed_by_an_approval_goes_on_in_its_trace_with_both_span_events(
    start_worker: StartWorker,
    traced: httpx.Client,
    receiver: Receiver,
    script: Script,
    ledger: Ledger,
) -> None:
    start_worker(overrides={**otel_env(receiver), "DRES_APPROVAL": "send_email"})
    model = script([send("a@x.io", "Hi"), DONE])
    body = {"message": "send it", "model": model}
    reply = traced.post("/v1/turns", json=body, headers={"traceparent": TRACEPARENT})
    turn_id = reply.json()["turn_id"]
    events = wait_for(ledger, turn_id, having("approval_requested"), what="the request")
    [request] = of(events, "approval_requested")
    wait_until(lambda: ledger.meta(turn_id).status == "waiting", what="the turn waiting")
    decided = traced.post(
        f"/v1/turns/{turn_id}/approvals/{request.approval_id}",
        json={"decision": "approve", "signature": request.signature},
    )
    assert decided.status_code == 202, decided.text

    events = wait_for(ledger, turn_id, ended("completed"), what="the turn's end")
    first_run, resumed = of(events, "run_started")
    assert resumed.cause == "approval"

    def both_runs(spans: list[Span]) -> bool:
        return len(named(spans, "run")) == 2 and bool(named(spans, "turn"))

    spans = spans_of(receiver, turn_id, both_runs)
    assert {s.trace_id for s in spans} == {TRACE_ID}
    runs = {s.attributes["dres.run_id"]: s for s in named(spans, "run")}
    assert "dres.approval.requested" in runs[first_run.run_id].event_names()
    assert "dres.approval.decided" in runs[resumed.run_id].event_names()
    [ran] = [
        t for t in named(spans, "execute_tool") if t.attributes["dres.run_id"] == resumed.run_id
    ]
    assert ran.attributes["gen_ai.tool.call.id"] == request.call_id
