"""A conversation's turns on a real worker, the official SDKs talking to a fake provider
(docs/semantics.md): a turn's request carries the earlier turns' messages and final answers before
its own message, in roles that alternate, with no tool call of an earlier turn; over the history
budget the oldest turn is left out first."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import pytest

from ledger.events import TurnStarted
from ledger.store import Ledger
from rigs import close_runtime, context_of, crashed_stop, ended, wait_for
from rigs.providers import DIALECTS, Dialect, FakeProvider, fake_provider
from tests.support.fixtures import StartWorker
from worker.base.settings import load_settings
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server


#: the worker's chunk limits (seconds): long enough that no chunk ends inside an SDK's first
#: request (importing an SDK alone can take longer than the tests' usual 0.5 s soft limit)
LIMITS = {"DRES_SOFT_LIMIT_S": "30", "DRES_HARD_LIMIT_S": "40", "DRES_VISIBILITY_TIMEOUT_S": "90"}
#: seconds a turn may take to complete: the worker's first import of an SDK is part of it
TURN_S = 60.0


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with fake_provider() as provider:
        yield provider


def turns_of(request: dict[str, Any], dialect: Dialect) -> list[tuple[str, str]]:
    """A request's messages as (role, text) with the system prompt left out; a message that is
    not plain text (a tool call or result) shows as its kind."""
    out = []
    for message in request["messages"]:
        role, content = message["role"], message.get("content")
        if role == "system":
            continue
        if dialect.kind == "anthropic":
            kinds = {block["type"] for block in content}
            content = content[0]["text"] if kinds == {"text"} else "+".join(sorted(kinds))
        elif role == "tool" or message.get("tool_calls"):
            content = "tool"
        out.append((role, content))
    return out


def run_turn(
    rt: Runtime, ledger: Ledger, message: str, model: str, conversation_id: str = "conv-1"
) -> None:
    turn = rt.lifecycle.enqueue(message, conversation_id=conversation_id, model=model)
    wait_for(ledger, turn.turn_id, ended("completed"), TURN_S, f"{message!r} completed")


@pytest.mark.parametrize("dialect", DIALECTS, ids=repr)
def test_the_second_turn_sees_the_first_turns_message_and_answer_in_alternating_roles(
    dialect: Dialect,
    fake: FakeProvider,
    start_worker: StartWorker,
    runtime: Runtime,
    ledger: Ledger,
) -> None:
    fake.script(
        dialect.tool_call("call_1", "list_outbox", {}),
        dialect.text("The outbox ", "is empty."),
        dialect.text("Nothing was sent."),
    )
    start_worker(overrides={**LIMITS, **dialect.env(fake.url)})
    model = f"{dialect.kind}:test-model"

    run_turn(runtime, ledger, "What is in the outbox?", model)
    run_turn(runtime, ledger, "So was anything sent?", model)

    first, with_result, second = (r.body for r in fake.wait_requests(3))
    assert turns_of(first, dialect) == [("user", "What is in the outbox?")]
    assert len(turns_of(with_result, dialect)) == 3, "the tool call and its result, this turn"
    assert turns_of(second, dialect) == [
        ("user", "What is in the outbox?"),
        ("assistant", "The outbox is empty."),
        ("user", "So was anything sent?"),
    ]
    roles = [m["role"] for m in second["messages"] if m["role"] != "system"]
    assert all(a != b for a, b in pairwise(roles))


def test_over_the_history_budget_the_oldest_turn_is_left_out_first(
    fake: FakeProvider, start_worker: StartWorker, ledger: Ledger
) -> None:
    """The budget holds one earlier turn (message and answer, 40 characters), not two."""
    dialect = DIALECTS[-1]
    answers = ["A" * 15, "B" * 15, "C" * 15]
    fake.script(*(dialect.text(answer) for answer in answers))
    start_worker(overrides={**LIMITS, **dialect.env(fake.url)})
    rt = Runtime.from_settings(load_settings(history_chars=40))
    model = f"{dialect.kind}:test-model"
    try:
        for message in ("one" * 5, "two" * 5, "six" * 5):
            run_turn(rt, ledger, message, model)
    finally:
        close_runtime(rt)

    requests = [r.body for r in fake.wait_requests(3)]
    assert turns_of(requests[1], dialect) == [
        ("user", "one" * 5),
        ("assistant", "A" * 15),
        ("user", "two" * 5),
    ]
    assert turns_of(requests[2], dialect) == [
        ("user", "two" * 5),
        ("assistant", "B" * 15),
        ("user", "six" * 5),
    ]


def test_unfinished_earlier_turns_say_how_they_ended_and_the_newest_also_gets_the_note(
    runtime: Runtime, ledger: Ledger
) -> None:
    """No worker: a crashed turn, then a queued one, then the turn that looks back at both once
    it is let through (the queued one is stopped: one live turn per conversation)."""
    crashed = crashed_stop(runtime, conversation_id="conv-2", interrupted_write=True)
    queued = runtime.lifecycle.enqueue("Then this.", conversation_id="conv-2").turn_id

    third = runtime.lifecycle.enqueue("And now?", conversation_id="conv-2")
    assert third.run_id == "" and ledger.meta(third.turn_id).held  # behind the queued turn
    assert runtime.lifecycle.stop(queued).ok

    events = ledger.events(third.turn_id)
    assert isinstance(events[0], TurnStarted)
    earlier, note = context_of(events)
    assert [(t.turn_id, t.message) for t in earlier] == [
        (crashed, "do the task"),
        (queued, "Then this."),
    ]
    assert "did not finish: it ended as stopped (crashed)" in earlier[0].answer
    assert "did not finish: it ended as stopped (cancelled)" in earlier[1].answer
    assert note is not None
    assert "ended as stopped (cancelled)" in note
