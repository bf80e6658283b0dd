"""Each provider's reported usage on ``model_done`` (docs/models.md, docs/events.md): a prefork
``dres worker`` runs a turn on ``anthropic:…`` / ``openai:…`` whose official SDK talks HTTP to the
fake provider, which reports 3 input and 9 output tokens on every complete reply."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ledger.usage import UsageFold
from rigs import DIALECTS, Dialect, FakeProvider, ended, fake_provider, of, show, wait_for
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
