"""Each provider's reported usage on ``model_done`` (docs/models.md, docs/events.md): a prefork
``dres worker`` runs a turn on ``anthropic:…`` / ``openai:…`` whose official SDK talks HTTP to the
fake provider, which reports 3 input and 9 output tokens on every complete reply."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger.usage import UsageFold
from rigs import (
    DIALECTS,
    DONE,
    Dialect,
    FakeProvider,
    ended,
    fake_provider,
    of,
    show,
    wait_for,
    write_script,
)
from tests.support.fixtures import StartWorker
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with fake_provider() as server:
        yield server


@pytest.mark.parametrize("dialect", DIALECTS, ids=repr)
def test_the_providers_reported_usage_lands_on_each_model_done_and_in_the_turns_sum(
    runtime: Runtime, start_worker: StartWorker, fake: FakeProvider, dialect: Dialect
) -> None:
    lookup = dialect.tool_call("call_1", "get_ticket", {"ticket_id": "T-1"})
    fake.script(lookup, dialect.text("Ok."))
    start_worker(overrides={**dialect.env(fake.url), "DRES_MODEL": f"{dialect.kind}:fake-model"})
    turn = runtime.lifecycle.enqueue("look it up")

    events = wait_for(runtime.ledger, turn.turn_id, ended("completed"), what="the turn's end")
    usages = [(e.usage.input_tokens, e.usage.output_tokens) for e in of(events, "model_done")]
    assert usages == [dialect.USAGE, dialect.USAGE], show(events)
    assert UsageFold().feed(events).spent().total == 2 * sum(dialect.USAGE)


def spending(step: dict[str, Any], input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {**step, "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}}


def test_a_1000_token_budget_stops_a_turn_after_two_600_token_calls_and_continue_completes_it(
    runtime: Runtime, start_worker: StartWorker, tmp_path: Path
) -> None:
    """docs/semantics.md: past DRES_TURN_TOKEN_BUDGET a turn stops with ``budget`` before its
    next model call, is never continued on its own, and a Continue grants the allowance again."""
    lookup = {"tool_calls": [{"name": "get_ticket", "input": {"ticket_id": "T-1"}}]}
    steps = [spending(lookup, 400, 200), spending(lookup, 400, 200), spending(DONE, 400, 200)]
    model = write_script(tmp_path / "budget.json", steps)
    start_worker(overrides={"DRES_TURN_TOKEN_BUDGET": "1000"})
    turn = runtime.lifecycle.enqueue("look it up twice", model=model)

    events = wait_for(runtime.ledger, turn.turn_id, ended("stopped"), what="the budget stop")
    [stop] = of(events, "turn_ended")
    assert (stop.code, stop.can_continue) == ("budget", True), show(events)
    assert len(of(events, "model_start")) == 2, show(events)  # the third call was never made
    assert not runtime.lifecycle.continue_turn(turn.turn_id, auto=True).ok

    assert runtime.lifecycle.continue_turn(turn.turn_id, auto=False).ok
    events = wait_for(runtime.ledger, turn.turn_id, ended("completed"), what="the turn's end")
    assert UsageFold().feed(events).spent().total == 1800, show(events)
