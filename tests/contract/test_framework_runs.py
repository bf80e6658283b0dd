"""A framework's agent run by dres's loop in this process (docs/loops.md), on a real
redis-server, the real framework and the fake OpenAI-compatible server: what the ledger holds,
both layers at a soft limit, approvals through dres. (Real workers: tests/integration/
test_framework_loops.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from rigs.providers import FakeProvider, OpenAIDialect, fake_provider
from tests.harness import Harness
from worker.engine.frameworks.base import Adapter
from worker.engine.loop import AgentLoop

OPENAI = OpenAIDialect()


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProvider]:
    with fake_provider() as fake:
        for name, value in OPENAI.env(fake.url).items():
            monkeypatch.setenv(name, value)
        yield fake


def adapter_of(name: str) -> Adapter:
    import importlib

    from worker.engine.frameworks.pydantic_ai_loop import PydanticAiAdapter

    module = importlib.reload(importlib.import_module("tests.frameworks.pydantic_ai_agent"))
    return PydanticAiAdapter(getattr(module, name))


class FrameworkHarness(Harness):
    adapter: Adapter | None = None

    def loop(self, ledger: Any = None) -> AgentLoop:
        loop = super().loop(ledger)
        loop.frameworks = lambda spec: self.adapter
        return loop


@pytest.fixture
def h(rdb: redis.Redis, tmp_path: Path, effects: Path, provider: FakeProvider) -> FrameworkHarness:
    harness = FrameworkHarness(rdb, tmp_path)
    harness.adapter = adapter_of("agent")
    return harness


@pytest.fixture
def effects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "effects.txt"
    monkeypatch.setenv("DRES_TEST_EFFECTS", str(path))
    return path


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_turn_runs_end_to_end_with_its_text_and_calls_in_the_ledger(
    h: FrameworkHarness, provider: FakeProvider, effects: Path
) -> None:
    provider.script(
        OPENAI.tool_call("c1", "get_ticket", {"ticket_id": "T-1"}),
        OPENAI.tool_call("c2", "send_email", {"to": "ann@x", "subject": "hi"}),
        OPENAI.text("Sent ", "it."),
    )
    h.start([], message="email ann")
    ended = h.run_to_end()
    assert ended.status == "completed", ended
    types = [e.type for e in h.events()]
    assert types.count("model_start") == 3 and types.count("model_done") == 3
    starts = h.events("tool_start")
    assert [(e.tool, e.input, e.read_only) for e in starts] == [  # type: ignore[attr-defined]
        ("get_ticket", {"ticket_id": "T-1"}, True),
        ("send_email", {"to": "ann@x", "subject": "hi"}, False),
    ]
    done = h.events("tool_done")
    assert done[1].result == {"sent": "ann@x"}  # type: ignore[attr-defined]
    text = "".join(e.text for e in h.events("text"))  # type: ignore[attr-defined]
    assert text == "Sent it."
    usage = [e.usage for e in h.events("model_done")]  # type: ignore[attr-defined]
    assert usage[0].input_tokens == 3 and usage[0].output_tokens == 9
    assert lines(effects) == ["send_email ann@x hi"]
    # the model saw the tool's recorded result
    last = provider.received[-1].body
    assert any(m.get("role") == "tool" for m in last["messages"])


@pytest.fixture
def soft_limit_on_signal(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """SIGUSR1 raises the simulated soft limit (the agent's write sends it once)."""
    import signal

    from tests.harness import SimulatedSoftLimit

    def raise_soft_limit(signum: int, frame: Any) -> None:
        raise SimulatedSoftLimit("soft time limit exceeded (SIGUSR1)")

    previous = signal.signal(signal.SIGUSR1, raise_soft_limit)
    monkeypatch.setenv("DRES_TEST_SOFT_LIMIT", "signal")
    yield
    signal.signal(signal.SIGUSR1, previous)


def test_a_soft_limit_mid_turn_resumes_with_the_history_rebuilt_and_the_repeat_blocked(
    h: FrameworkHarness, provider: FakeProvider, effects: Path, soft_limit_on_signal: None
) -> None:
    provider.script(
        OPENAI.tool_call("c1", "send_email", {"to": "ann@x", "subject": "hi"}),
        # the next chunk's model, shown the rebuilt history, makes the same call again
        OPENAI.tool_call("c9", "send_email", {"to": "ann@x", "subject": "hi"}),
        OPENAI.text("Done."),
    )
    h.start([], message="email ann")
    assert h.run_next() is None, "the soft limit did not end the chunk"
    assert [e.type for e in h.events()][-3:] == ["tool_start", "tool_done", "run_ended"]
    ended = h.run_to_end()
    assert ended.status == "completed", ended
    assert lines(effects) == ["send_email ann@x hi"], "the write ran twice"
    blocked = h.events("tool_blocked")
    assert [b.reason for b in blocked] == ["completed"]  # type: ignore[attr-defined]
    # the second chunk's first request: the history from the ledger, the call and its result,
    # then the nudge and the layer-1 note as the user's message
    resumed = provider.received[1].body["messages"]
    roles = [m["role"] for m in resumed]
    assert roles[:2] == ["system", "user"] and "assistant" in roles and "tool" in roles
    assert roles[-1] == "user"
    assert "send_email" in resumed[-1]["content"] and "Continue" in resumed[-1]["content"]
    assert h.events("resumed")


def test_requires_approval_waits_for_dres_and_runs_once_when_approved(
    h: FrameworkHarness, provider: FakeProvider, effects: Path
) -> None:
    h.adapter = adapter_of("approval_agent")
    provider.script(
        OPENAI.tool_call("c1", "refund", {"order_id": "o-1", "amount": 5}),
        OPENAI.text("Refunded."),
    )
    h.start([], message="refund o-1")
    assert h.run_next() is None  # waits for a person
    assert h.events("approval_requested") and not lines(effects)
    h.decide()
    ended = h.run_to_end()
    assert ended.status == "completed", ended
    assert lines(effects) == ["refund o-1 5"]
    starts = h.events("tool_start")
    assert [s.approval_id is not None for s in starts] == [True]  # type: ignore[attr-defined]
    # the model's second request carries the approved call's result
    assert any(m["role"] == "tool" for m in provider.received[-1].body["messages"])


def test_metadata_read_only_and_a_model_error_resumes_in_the_run(
    h: FrameworkHarness, provider: FakeProvider
) -> None:
    h.adapter = adapter_of("approval_agent")
    assert {t.name: t.read_only for t in h.adapter.tools()} == {"refund": False, "get_order": True}
    provider.script(OPENAI.error(502), OPENAI.text("Hello."))
    h.start([], message="hi")
    ended = h.run_to_end()
    assert ended.status == "completed", ended
    assert [e.cause for e in h.events("resumed")] == ["transport_error"]  # type: ignore[attr-defined]


def test_past_its_budget_a_framework_turn_stops_before_its_next_model_call(
    rdb: redis.Redis, tmp_path: Path, provider: FakeProvider, effects: Path
) -> None:
    from worker.base.settings import load_settings

    h = FrameworkHarness(rdb, tmp_path, settings=load_settings(turn_token_budget=10))
    h.adapter = adapter_of("agent")
    provider.script(
        OPENAI.tool_call("c1", "get_ticket", {"ticket_id": "T-1"}),  # spends 3 + 9
        OPENAI.text("never asked"),
    )
    h.start([], message="look")
    ended = h.run_to_end()
    assert (ended.status, ended.code) == ("stopped", "budget"), ended
    assert len(h.events("model_start")) == 1 and len(provider.received) == 1
    continued = h.lifecycle.continue_turn(h.turn_id, auto=False)
    assert continued.ok, continued.reason
    h.pending = continued.run_id
    assert h.run_to_end().status == "completed"
    assert len(provider.received) == 2


def test_a_framework_tools_wait_until_makes_the_turn_wait_held_by_no_run(
    h: FrameworkHarness, provider: FakeProvider, effects: Path
) -> None:
    """A pydantic-ai tool returns ``wait_until``: its call completes with the result it names,
    the run ends waiting on the timer before the framework's next model call, and the reaper's
    wake resumes the same turn, whose rebuilt history holds the result."""
    from ledger.events import ToolDone
    from worker.lifecycle.reaper import Reaper

    h.adapter = adapter_of("timer_agent")
    wake_at = h.clock.t + 600
    provider.script(
        OPENAI.tool_call("c1", "remind_at", {"at": wake_at, "note": "call ann"}),
        OPENAI.text("Reminded."),
    )
    h.start([], message="remind me")

    assert h.run_next() is None
    meta = h.lifecycle.store.meta(h.turn_id)
    assert (meta.waiting_for, meta.wake_at) == ("timer", wake_at)
    (done,) = [e for e in h.events("tool_done") if isinstance(e, ToolDone)]
    assert (done.result, done.wake_at) == ({"reminded": "call ann"}, wake_at)
    assert [e.type for e in h.events()].count("model_start") == 1

    h.clock.t = wake_at
    assert Reaper(h.lifecycle).check(h.turn_id, int(h.clock.t * 1000)) == "woken"
    h.pending = h.messages.sent[-1][1]
    assert h.run_to_end().status == "completed"
    assert lines(effects) == ["remind_at call ann"]
    assert "reminded" in json.dumps(provider.received[-1].body["messages"])
