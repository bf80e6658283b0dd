"""Agents from other frameworks on real workers (docs/loops.md): a ``dres worker`` whose
``DRES_LOOP`` names a pydantic-ai or an OpenAI Agents SDK agent runs each turn with that agent,
whose model is the fake OpenAI-compatible server (rigs/providers.py) and whose tools count their
effects in a file. Per framework: a turn end to end, a real soft limit mid-write (the next chunk
rebuilds the framework's history from the ledger, and the model's repeat of the write is blocked),
a SIGKILLed pool process (one effect), the framework's own approval flag asking through dres.
The in-process counterpart: tests/contract/test_framework_runs.py."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ledger.events import ApprovalRequested
from rigs import ended, having, of, show, wait_for, wait_until
from rigs.otlp import otlp_receiver
from rigs.providers import FakeProvider, OpenAIDialect, fake_provider
from tests.support.fixtures import BOTH_POOLS, StartWorker
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server

OPENAI = OpenAIDialect()
#: a chunk's limits: long enough for a model round trip, short against the write that sleeps
LIMITS = {
    "DRES_SOFT_LIMIT_S": "2",
    "DRES_HARD_LIMIT_S": "20",
    "DRES_BG_SOFT_LIMIT_S": "2",
    "DRES_BG_HARD_LIMIT_S": "20",
    "DRES_VISIBILITY_TIMEOUT_S": "60",
}
TURN_S = 30.0


@dataclass(frozen=True)
class Framework:
    name: str
    module: str
    #: the agent whose write needs approval, and that write's name and input
    approval_agent: str
    approval_tool: str
    approval_input: dict[str, object]
    approval_effect: str

    def loop(self, attr: str = "agent") -> str:
        return f"{self.name}:{self.module}:{attr}"

    def __repr__(self) -> str:
        return self.name


PYDANTIC_AI = Framework(
    "pydantic_ai",
    "tests.frameworks.pydantic_ai_agent",
    "approval_agent",
    "refund",
    {"order_id": "o-1", "amount": 5},
    "refund o-1 5",
)
AGENTS_SDK = Framework(
    "openai_agents",
    "tests.frameworks.agents_sdk_agent",
    "approval_agent",
    "send_email",
    {"to": "ann@x", "subject": "hi"},
    "send_email ann@x hi",
)
FRAMEWORKS = [PYDANTIC_AI, AGENTS_SDK]
EMAIL = {"to": "ann@x", "subject": "hi"}


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with fake_provider() as server:
        yield server


@pytest.fixture
def effects(tmp_path: Path) -> Path:
    return tmp_path / "effects.txt"


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def start(
    start_worker: StartWorker,
    fake: FakeProvider,
    effects: Path,
    loop: str,
    **overrides: str,
) -> None:
    start_worker(
        overrides={
            **LIMITS,
            **OPENAI.env(fake.url),
            "DRES_LOOP": loop,
            "DRES_TEST_EFFECTS": str(effects),
            **overrides,
        }
    )


@BOTH_POOLS
@pytest.mark.parametrize("framework", FRAMEWORKS, ids=repr)
def test_a_framework_turn_runs_end_to_end_with_its_text_and_calls_in_the_ledger(
    runtime: Runtime,
    start_worker: StartWorker,
    fake: FakeProvider,
    effects: Path,
    framework: Framework,
) -> None:
    fake.script(
        OPENAI.tool_call("c1", "get_ticket", {"ticket_id": "T-1"}),
        OPENAI.tool_call("c2", "send_email", EMAIL),
        OPENAI.text("Sent ", "it."),
    )
    start(start_worker, fake, effects, framework.loop())
    turn = runtime.lifecycle.enqueue("email ann")
    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=TURN_S, what="the end")
    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    calls = [(e.tool, e.read_only) for e in of(events, "tool_start")]
    assert calls == [("get_ticket", True), ("send_email", False)], show(events)
    assert len(of(events, "tool_done")) == 2
    assert "".join(e.text for e in of(events, "text")) == "Sent it."
    assert [(d.usage.input_tokens, d.usage.output_tokens) for d in of(events, "model_done")] == [
        OPENAI.USAGE
    ] * 3
    assert lines(effects) == ["send_email ann@x hi"]


@BOTH_POOLS
@pytest.mark.parametrize("framework", FRAMEWORKS, ids=repr)
def test_a_soft_limit_mid_write_resumes_with_the_history_rebuilt_and_the_repeat_blocked(
    runtime: Runtime,
    start_worker: StartWorker,
    fake: FakeProvider,
    effects: Path,
    framework: Framework,
) -> None:
    fake.script(
        OPENAI.tool_call("c1", "send_email", EMAIL),
        OPENAI.tool_call("c7", "send_email", EMAIL),  # the next chunk's model repeats it
        OPENAI.text("Done."),
    )
    # the write sleeps past the chunk's soft limit once its effect happened
    start(start_worker, fake, effects, framework.loop(), DRES_TEST_SOFT_LIMIT="sleep:3")
    turn = runtime.lifecycle.enqueue("email ann")
    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=TURN_S, what="the end")
    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    first, second = of(events, "run_started")
    assert of(events, "run_ended", run_id=first.run_id)[0].reason == "soft_limit", show(events)
    assert second.chunk == first.chunk + 1
    assert lines(effects) == ["send_email ann@x hi"], "the write ran twice"
    assert [b.reason for b in of(events, "tool_blocked")] == ["completed"], show(events)
    # the second chunk's request: the rebuilt history, the nudge and the note last
    resumed = fake.received[1].body["messages"]
    assert [m["role"] for m in resumed][-3:] == ["assistant", "tool", "user"], resumed
    assert "send_email" in resumed[-1]["content"]


@pytest.mark.parametrize("framework", FRAMEWORKS, ids=repr)
def test_a_killed_pool_process_mid_write_completes_the_turn_with_one_effect(
    runtime: Runtime,
    start_worker: StartWorker,
    fake: FakeProvider,
    effects: Path,
    framework: Framework,
) -> None:
    fake.script(
        OPENAI.tool_call("c1", "send_email", EMAIL),
        OPENAI.tool_call("c7", "send_email", EMAIL),
        OPENAI.text("Done."),
    )
    worker = start_worker(
        overrides={
            **OPENAI.env(fake.url),
            "DRES_LOOP": framework.loop(),
            "DRES_TEST_EFFECTS": str(effects),
            "DRES_TEST_SOFT_LIMIT": "sleep:30",
            "DRES_SOFT_LIMIT_S": "60",
            "DRES_HARD_LIMIT_S": "90",
            "DRES_BG_SOFT_LIMIT_S": "60",
            "DRES_BG_HARD_LIMIT_S": "90",
            "DRES_VISIBILITY_TIMEOUT_S": "120",
        }
    )
    turn = runtime.lifecycle.enqueue("email ann", mode="background")
    wait_for(runtime.ledger, turn.turn_id, having("tool_start", tool="send_email"), what="write")
    wait_until(lambda: lines(effects), timeout=10, what="the write's effect")
    events = runtime.ledger.events(turn.turn_id)
    [run] = of(events, "run_started")
    os.kill(worker.pool_child(), signal.SIGKILL)
    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=TURN_S, what="the end")
    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    assert of(events, "run_ended", run_id=run.run_id)[0].reason == "crashed", show(events)
    assert lines(effects) == ["send_email ann@x hi"], "the write ran twice"
    [blocked] = of(events, "tool_blocked")
    assert blocked.reason == "interrupted", show(events)


@pytest.mark.parametrize("framework", FRAMEWORKS, ids=repr)
def test_the_frameworks_approval_flag_waits_for_dres_and_runs_once_when_approved(
    runtime: Runtime,
    start_worker: StartWorker,
    fake: FakeProvider,
    effects: Path,
    framework: Framework,
) -> None:
    fake.script(
        OPENAI.tool_call("c1", framework.approval_tool, framework.approval_input),
        OPENAI.text("Done."),
    )
    start(start_worker, fake, effects, framework.loop(framework.approval_agent))
    turn = runtime.lifecycle.enqueue("refund o-1")
    events = wait_for(
        runtime.ledger, turn.turn_id, having("approval_requested"), timeout=TURN_S, what="ask"
    )
    wait_until(
        lambda: runtime.ledger.meta(turn.turn_id).status == "waiting", timeout=TURN_S, what="wait"
    )
    assert lines(effects) == []
    [request] = [e for e in events if isinstance(e, ApprovalRequested)]
    decided = runtime.lifecycle.decide(
        turn.turn_id, request.approval_id, "approve", signature=request.signature
    )
    assert decided.run_id is not None
    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=TURN_S, what="the end")
    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    assert lines(effects) == [framework.approval_effect]
    [started] = of(events, "tool_start")
    assert started.approval_id == request.approval_id


@BOTH_POOLS
@pytest.mark.parametrize("framework", FRAMEWORKS, ids=repr)
def test_stop_mid_stream_stops_a_framework_turn_with_the_text_it_streamed_and_continue_ends_it(
    runtime: Runtime,
    start_worker: StartWorker,
    fake: FakeProvider,
    effects: Path,
    framework: Framework,
) -> None:
    fake.script(OPENAI.stalled("Half an "), OPENAI.text("All of it."))
    start(
        start_worker,
        fake,
        effects,
        framework.loop(),
        DRES_SOFT_LIMIT_S="20",
        DRES_HARD_LIMIT_S="40",
    )
    turn = runtime.lifecycle.enqueue("say it")
    wait_for(runtime.ledger, turn.turn_id, having("text"), timeout=TURN_S, what="streamed text")
    assert runtime.lifecycle.stop(turn.turn_id).ok
    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=TURN_S, what="the stop")
    [stop] = of(events, "turn_ended")
    assert (stop.status, stop.code) == ("stopped", "cancelled"), show(events)
    assert "".join(e.text for e in of(events, "text")) == "Half an "
    assert runtime.lifecycle.continue_turn(turn.turn_id, auto=False).ok
    events = wait_for(
        runtime.ledger, turn.turn_id, having("turn_ended", 2), timeout=TURN_S, what="the end"
    )
    assert [e.status for e in of(events, "turn_ended")] == ["stopped", "completed"], show(events)


@pytest.mark.parametrize("framework", FRAMEWORKS, ids=repr)
def test_a_framework_turns_model_and_tool_calls_are_traced_as_dres_traces_its_own(
    runtime: Runtime,
    start_worker: StartWorker,
    fake: FakeProvider,
    effects: Path,
    framework: Framework,
) -> None:
    fake.script(OPENAI.tool_call("c1", "get_ticket", {"ticket_id": "T-1"}), OPENAI.text("Open."))
    with otlp_receiver() as receiver:
        otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "50"}
        start(start_worker, fake, effects, framework.loop(), **otel)
        turn = runtime.lifecycle.enqueue("look T-1 up")
        wait_for(runtime.ledger, turn.turn_id, ended("completed"), timeout=TURN_S, what="the end")

        def spans() -> list[object] | None:
            mine = [
                s for s in receiver.received() if s.attributes.get("dres.turn_id") == turn.turn_id
            ]
            names = [s.name for s in mine]
            chats = [n for n in names if n.startswith("chat")]
            return mine if len(chats) == 2 and "execute_tool get_ticket" in names else None

        found = wait_until(spans, timeout=10, what="the turn's spans")
    chats = [s for s in found if s.name.startswith("chat")]  # type: ignore[attr-defined]
    assert {s.attributes.get("gen_ai.usage.output_tokens") for s in chats} == {OPENAI.USAGE[1]}
    assert len({s.trace_id for s in found}) == 1  # type: ignore[attr-defined]
