"""Provider faults end to end (docs/models.md, docs/semantics.md, docs/faults.md): a prefork ``dres
worker`` runs a turn on ``DRES_MODEL=anthropic:…`` / ``openai:…`` whose official SDK talks HTTP to
the fake provider (``ANTHROPIC_BASE_URL`` / ``OPENAI_BASE_URL``, a dummy key), scripted per request.

- 429 stops a foreground turn (``rate_limit``, Continue available); a background turn first gets
  one resume after the cooldown;
- 401 stops the turn (``auth``, Continue available);
- 500/502/503/504 and a stream cut mid-way resume inside the same chunk with the journal note;
- a provider that never sends a byte: Stop ends the turn within 2 s of the request (ledger
  ``ts``); with no Stop the soft limit still self-chains the next chunk;
- the SDK's own retry sleep: it retries a 503 by itself, and Stop lands during its sleep;
- ``dres demo`` runs its turn on ``DRES_MODEL``.

The error replies carry ``x-should-retry: false`` unless the SDK's retry is the point, so dres
sees each fault at once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from rigs import (
    DIALECTS,
    Dialect,
    FakeProvider,
    WorkerProcess,
    ended,
    fake_provider,
    having,
    of,
    show,
    wait_for,
)
from rigs.processes import run_demo
from rigs.providers import Reply
from worker.demo_tools import outbox
from worker.dev.redis_server import RedisServer
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server

#: seconds: the contract's "within a second or two" (docs/semantics.md)
STOP_WITHIN_S = 2.0
#: soft and hard limits long enough that only the fault ends a run (the self-chain test keeps
#: the tests' 0.5 s); the visibility timeout must exceed the hard limit
LONG_LIMITS = {
    "DRES_SOFT_LIMIT_S": "20",
    "DRES_HARD_LIMIT_S": "30",
    "DRES_BG_SOFT_LIMIT_S": "20",
    "DRES_BG_HARD_LIMIT_S": "30",
    "DRES_VISIBILITY_TIMEOUT_S": "60",
}
EMAIL = {"to": "a@x.io", "subject": "Hi", "body": "Hello."}

StartWorker = Callable[..., WorkerProcess]


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with fake_provider() as server:
        yield server


def provider_worker(
    start_worker: StartWorker, dialect: Dialect, fake: FakeProvider, **settings: str
) -> WorkerProcess:
    """A worker whose default model is ``dialect``'s, its SDK pointed at the fake."""
    overrides = {
        **dialect.env(fake.url),
        "DRES_MODEL": f"{dialect.kind}:fake-model",
        "DRES_RATE_LIMIT_COOLDOWN_S": "0.2",
        **LONG_LIMITS,
        **settings,
    }
    return start_worker(overrides=overrides)


def stop_ending(runtime: Runtime, turn_id: str) -> tuple[float, float]:
    """Stop the turn; (when Stop was asked, when its ``turn_ended`` was recorded): ledger time."""
    requested = runtime.clock.now()
    outcome = runtime.lifecycle.stop(turn_id)
    assert outcome.ok, outcome
    events = wait_for(runtime.ledger, turn_id, ended(), timeout=10, what="the turn's end")
    [end] = of(events, "turn_ended")
    assert (end.status, end.code) == ("stopped", "cancelled"), show(events)
    return requested, end.ts


# -- stops with Continue available ---------------------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS, ids=repr)
def test_a_rate_limit_stops_a_foreground_turn_with_continue_available(
    runtime: Runtime, start_worker: StartWorker, fake: FakeProvider, dialect: Dialect
) -> None:
    fake.script(dialect.error(429))
    provider_worker(start_worker, dialect, fake)
    turn = runtime.lifecycle.enqueue("hello")

    events = wait_for(runtime.ledger, turn.turn_id, ended(), what="the turn's end")
    [end] = of(events, "turn_ended")
    assert (end.status, end.code, end.can_continue) == ("stopped", "rate_limit", True)
    assert not of(events, "resumed"), show(events)
    assert [r.path for r in fake.received] == [dialect.path]


@pytest.mark.parametrize("dialect", DIALECTS, ids=repr)
def test_a_rate_limited_background_turn_resumes_once_after_the_cooldown_then_stops(
    runtime: Runtime, start_worker: StartWorker, fake: FakeProvider, dialect: Dialect
) -> None:
    fake.script(dialect.error(429), dialect.error(429))
    provider_worker(start_worker, dialect, fake)
    turn = runtime.lifecycle.enqueue("hello", mode="background")

    events = wait_for(runtime.ledger, turn.turn_id, ended(), what="the turn's end")
    [end] = of(events, "turn_ended")
    assert (end.status, end.code, end.can_continue) == ("stopped", "rate_limit", True)
    assert [e.cause for e in of(events, "resumed")] == ["rate_limit"], show(events)
    assert len(of(events, "run_started")) == 1, "resumed inside the same run"
    first, second = fake.wait_requests(2)[:2]
    assert second.at - first.at >= 0.2, "the cooldown came first"


@pytest.mark.parametrize("dialect", DIALECTS, ids=repr)
def test_a_credential_error_stops_the_turn_with_continue_available(
    runtime: Runtime, start_worker: StartWorker, fake: FakeProvider, dialect: Dialect
) -> None:
    fake.script(dialect.error(401))
    provider_worker(start_worker, dialect, fake)
    turn = runtime.lifecycle.enqueue("hello", mode="background")

    events = wait_for(runtime.ledger, turn.turn_id, ended(), what="the turn's end")
    [end] = of(events, "turn_ended")
    assert (end.status, end.code, end.can_continue) == ("stopped", "auth", True)
    assert not of(events, "resumed"), show(events)
    assert len(fake.received) == 1


# -- transport errors resume the same chunk ------------------------------------------------------


FAULTS: dict[str, Callable[[Dialect], Reply]] = {
    "500": lambda d: d.error(500),
    "502": lambda d: d.error(502),
    "503": lambda d: d.error(503),
    "504": lambda d: d.error(504),
    "cut_mid_stream": lambda d: d.cut("Sending it"),
}


@pytest.mark.parametrize("dialect", DIALECTS, ids=repr)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_server_error_or_a_cut_stream_resumes_in_the_same_chunk_with_the_note(
    runtime: Runtime,
    start_worker: StartWorker,
    fake: FakeProvider,
    dialect: Dialect,
    fault: str,
) -> None:
    fake.script(
        dialect.tool_call("call_1", "send_email", EMAIL),
        FAULTS[fault](dialect),
        dialect.text("Sent", " once."),
    )
    provider_worker(start_worker, dialect, fake)
    turn = runtime.lifecycle.enqueue("email a@x.io")

    events = wait_for(runtime.ledger, turn.turn_id, ended(), what="the turn's end")
    [end] = of(events, "turn_ended")
    assert end.status == "completed", show(events)
    [resumed] = of(events, "resumed")
    assert resumed.cause == "transport_error"
    assert resumed.note and "send_email" in resumed.note, resumed.note
    assert len(of(events, "run_started")) == 1, "resumed inside the same run"
    assert {e.chunk for e in events} == {0}
    assert len(outbox(runtime.redis)) == 1
    # The resumed request carries the note the run recorded.
    *_, last = fake.wait_requests(3)
    assert resumed.note.split("\n")[0] in str(last.body["messages"])


# -- a provider that sends nothing ---------------------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS, ids=repr)
def test_stop_while_the_provider_sends_nothing_ends_the_turn_within_two_seconds(
    runtime: Runtime, start_worker: StartWorker, fake: FakeProvider, dialect: Dialect
) -> None:
    fake.script(Reply(hang=True))
    provider_worker(start_worker, dialect, fake)
    turn = runtime.lifecycle.enqueue("hello")
    fake.wait_requests(1)  # the SDK now waits for a first byte that never comes

    requested, ended_at = stop_ending(runtime, turn.turn_id)

    print(f"Stop -> turn_ended: {(ended_at - requested) * 1000:.0f} ms (ledger ts)")
    assert ended_at - requested < STOP_WITHIN_S
    events = runtime.ledger.events(turn.turn_id)
    assert [e.reason for e in of(events, "run_ended")] == ["stopped"], show(events)
    assert len(fake.received) == 1, "the SDK did not retry"


@pytest.mark.parametrize("dialect", DIALECTS, ids=repr)
def test_the_soft_limit_self_chains_while_the_provider_sends_nothing(
    runtime: Runtime, start_worker: StartWorker, fake: FakeProvider, dialect: Dialect
) -> None:
    """The soft limit lands in the SDK's wait and is not swallowed: the next chunk starts."""
    fake.script(*[Reply(hang=True)] * 3)
    provider_worker(start_worker, dialect, fake, DRES_SOFT_LIMIT_S="1", DRES_HARD_LIMIT_S="5")
    turn = runtime.lifecycle.enqueue("hello")
    [first] = fake.wait_requests(1)[:1]

    events = wait_for(
        runtime.ledger,
        turn.turn_id,
        having("run_started", count=2),
        timeout=15,
        what="the next chunk",
    )
    chained = of(events, "run_ended", reason="soft_limit")
    assert chained and chained[0].ts > first.at, show(events)
    assert of(events, "run_started")[1].chunk == 1
    assert not of(events, "resumed", cause="transport_error"), show(events)
    stop_ending(runtime, turn.turn_id)


# -- the SDK's own retries -----------------------------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS, ids=repr)
def test_the_sdk_retries_a_503_on_its_own_and_the_turn_completes_without_a_resume(
    runtime: Runtime, start_worker: StartWorker, fake: FakeProvider, dialect: Dialect
) -> None:
    fake.script(dialect.error(503, (("retry-after-ms", "50"),)), dialect.text("Fine."))
    provider_worker(start_worker, dialect, fake)
    turn = runtime.lifecycle.enqueue("hello")

    events = wait_for(runtime.ledger, turn.turn_id, ended(), what="the turn's end")
    assert of(events, "turn_ended")[0].status == "completed", show(events)
    assert not of(events, "resumed"), show(events)
    assert len(fake.received) == 2


@pytest.mark.parametrize("dialect", DIALECTS, ids=repr)
def test_stop_during_the_sdks_retry_sleep_ends_the_turn_within_two_seconds(
    runtime: Runtime, start_worker: StartWorker, fake: FakeProvider, dialect: Dialect
) -> None:
    fake.script(dialect.error(503, (("retry-after", "30"),)), dialect.text("never reached"))
    provider_worker(start_worker, dialect, fake)
    turn = runtime.lifecycle.enqueue("hello")
    fake.wait_requests(1)  # answered 503: the SDK sleeps 30 s before its retry

    requested, ended_at = stop_ending(runtime, turn.turn_id)

    print(f"Stop -> turn_ended: {(ended_at - requested) * 1000:.0f} ms (ledger ts)")
    assert ended_at - requested < STOP_WITHIN_S
    assert len(fake.received) == 1, "the SDK retried after the Stop"


# -- the demo on a provider ----------------------------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS, ids=repr)
def test_the_demo_runs_its_turn_on_the_model_dres_model_names(
    redis_server: RedisServer, fake: FakeProvider, dialect: Dialect
) -> None:
    fake.script(dialect.tool_call("call_1", "send_email", EMAIL), dialect.text("Sent."))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRES_")}
    env.update(dialect.env(fake.url), DRES_MODEL=f"{dialect.kind}:fake-model")

    done = run_demo(env)

    assert done.returncode == 0, done.stdout + done.stderr
    assert f"model:  {dialect.kind}:fake-model" in done.stdout
    assert "Outbox: 1 email(s) sent by this turn" in done.stdout
    assert "Turn status: completed" in done.stdout
    assert [r.path for r in fake.received] == [dialect.path] * 2
