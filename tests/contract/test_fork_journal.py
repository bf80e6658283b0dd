"""Forks (docs/semantics.md): regenerate, edit and retry never repeat a write. A fork replaces the
turn it starts at and every later one, and inherits their journal, so its very first run meets
layer 2 and the interrupted-write guard as a resumed run does.

In-process chunks (``tests/harness.py``) on every ledger backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
from harness import Harness
from sample_tools import effects

from ledger.events import Inherited, ToolBlocked, ToolStart, TurnStarted
from ledger.signature import input_signature
from worker.base.errors import Refused
from worker.demo_tools import outbox
from worker.engine.history import FORK_LEAD
from worker.engine.models.base import AssistantMessage, UserMessage
from worker.engine.tools.context import idempotency_key

EMAIL = {"to": "ada@example.com", "subject": "Launch", "body": "Friday at 10."}
SEND = {"text": "Sending.", "tool_calls": [{"name": "send_email", "input": EMAIL}]}
DONE = {"text": "Done."}


def call(name: str, **data: Any) -> dict[str, Any]:
    return {"text": "", "tool_calls": [{"name": name, "input": data}]}


@pytest.fixture
def h(client: redis.Redis, tmp_path: Path) -> Harness:
    return Harness(client, tmp_path)


def completed(h: Harness, steps: list[dict[str, Any]], message: str = "email Ada") -> str:
    turn = h.enqueue(steps, message)
    h.follow(turn.turn_id)
    assert h.run_to_end().status == "completed"
    return turn.turn_id


def run_fork(h: Harness, turn_id: str, steps: list[dict[str, Any]], **kw: Any) -> str:
    forked = h.lifecycle.fork(turn_id, model=h.script(steps), **kw)
    h.follow(forked.turn_id)
    h.run_to_end()
    return forked.turn_id


def blocked(h: Harness, turn_id: str) -> list[ToolBlocked]:
    return [e for e in h.ledger.events(turn_id) if isinstance(e, ToolBlocked)]


def test_a_regenerate_answers_a_write_the_replaced_turn_completed_from_the_record(
    h: Harness,
) -> None:
    first = completed(h, [SEND, DONE])

    fork = run_fork(h, first, [SEND, DONE])

    assert len(outbox(h.client)) == 1
    (block,) = blocked(h, fork)
    assert (block.reason, block.inherited_from, block.tool) == ("completed", first, "send_email")
    assert block.result["status"] == "already_completed"
    assert (
        "an earlier answer in this conversation that this request replaces"
        in (block.result["note"])
    )
    started = h.ledger.events(fork)[0]
    assert isinstance(started, TurnStarted)
    assert (started.message, started.fork_of, started.inherits) == ("email Ada", first, (first,))
    meta = h.lifecycle.store.meta(first)
    assert meta.replaced_by == fork and meta.status == "completed"


def test_the_forks_first_request_tells_the_model_what_the_replaced_turn_did(h: Harness) -> None:
    first = completed(h, [SEND, DONE])

    fork = run_fork(h, first, [DONE])

    (inherited,) = [e for e in h.ledger.events(fork) if isinstance(e, Inherited)]
    assert inherited.turns == (first,) and inherited.note and "send_email" in inherited.note
    (opening,) = h.requests[-1].messages  # no earlier turn: the replaced one is not history
    assert isinstance(opening, UserMessage)
    assert opening.text.startswith(FORK_LEAD) and opening.text.endswith("email Ada")
    assert EMAIL["to"] in opening.text


def test_an_edit_with_another_input_runs_and_later_turns_see_the_fork_not_the_replaced_turn(
    h: Harness,
) -> None:
    first = completed(h, [SEND, DONE])
    bob = {**EMAIL, "to": "bob@example.com"}

    fork = run_fork(h, first, [call("send_email", **bob), DONE], message="email Bob instead")
    after = completed(h, [DONE], "thanks")

    assert [m["to"] for m in outbox(h.client)] == [EMAIL["to"], bob["to"]]
    assert blocked(h, fork) == []
    texts = [m.text for m in h.requests[-1].messages if isinstance(m, UserMessage)]
    assert texts[0].endswith("email Bob instead") and texts[-1] == "thanks"
    assert not any(t == "email Ada" for t in texts)
    detail = h.lifecycle.store.conversations.get("conv-1")
    assert detail is not None
    assert [(m.turn_id, m.replaced_by) for m, _ in detail.turns] == [
        (first, fork),
        (fork, ""),
        (after, ""),
    ]


def test_a_write_the_replaced_turn_left_interrupted_is_refused_until_checked(h: Harness) -> None:
    """The replaced turn's write landed and its run was cut off before the record: the fork's
    identical retry is refused, naming the turn it was inherited from."""
    cut = h.enqueue([call("write_then_die", label="x"), DONE], "do x")
    h.follow(cut.turn_id)
    assert h.run_next() is None  # cut after the effect: the next chunk is pending

    fork = run_fork(h, cut.turn_id, [call("write_then_die", label="x"), DONE])

    stopped = h.lifecycle.store.meta(cut.turn_id)
    assert (stopped.status, stopped.code) == ("stopped", "superseded")
    assert len(effects(h.client, "write_then_die")) == 1
    (refused,) = blocked(h, fork)
    assert (refused.reason, refused.inherited_from) == ("interrupted", cut.turn_id)


def test_an_idempotent_retry_of_an_inherited_interrupted_write_keeps_its_key(h: Harness) -> None:
    first = h.enqueue([DONE], "charge 5")
    h.follow(first.turn_id)
    run = h.lifecycle.claim(first.turn_id, h.pending or "")
    assert run is not None
    data = {"amount": 5}
    start = h.lifecycle.of_run(
        run, ToolStart, call_id="c-1", tool="charge", input=data, signature=input_signature(data)
    )
    h.ledger.append(start, lease=run.lease)  # its run dies before the tool_done

    forked = h.lifecycle.fork(first.turn_id, model=h.script([call("charge", amount=5), DONE]))
    assert forked.run_id == ""  # it waits until the replaced turn's run has ended
    dead = h.lifecycle.store.meta(first.turn_id)
    assert h.lifecycle.take_over(dead, "its worker died").reason == "stopped: superseded"
    h.follow(forked.turn_id)
    h.run_to_end()

    (effect,) = effects(h.client, "charge")
    assert effect["key"] == idempotency_key(first.turn_id, "charge", input_signature(data), 0)
    assert h.lifecycle.store.meta(forked.turn_id).status == "completed"


def test_a_fork_of_a_fork_inherits_both_and_a_write_is_done_once_in_all(h: Harness) -> None:
    first = completed(h, [SEND, DONE])
    second = run_fork(h, first, [DONE])

    third = run_fork(h, second, [SEND, DONE])

    started = h.ledger.events(third)[0]
    assert isinstance(started, TurnStarted) and started.inherits == (first, second)
    assert len(outbox(h.client)) == 1
    (block,) = blocked(h, third)
    assert block.inherited_from == first


def test_a_fork_at_an_earlier_turn_replaces_every_later_one(h: Harness) -> None:
    one = completed(h, [DONE], "one")
    two = completed(h, [SEND, DONE], "two")
    three = completed(h, [DONE], "three")

    forked = h.lifecycle.fork(one, model=h.script([SEND, DONE]))

    assert forked.replaces == (one, two, three)
    h.follow(forked.turn_id)
    h.run_to_end()
    assert len(outbox(h.client)) == 1  # two's email, inherited
    metas = h.lifecycle.store.lines.metas([one, two, three])
    assert [m.replaced_by for m in metas if m] == [forked.turn_id] * 3


def test_a_fork_of_a_live_turn_stops_it_first_and_waits_for_it(h: Harness) -> None:
    live = h.enqueue([SEND, DONE], "email Ada")

    forked = h.lifecycle.fork(live.turn_id, model=h.script([DONE]))

    meta = h.lifecycle.store.meta(live.turn_id)
    assert (meta.status, meta.code) == ("stopped", "superseded")
    assert forked.run_id  # the replaced turn had not started: the fork goes at once


def test_a_fork_into_a_new_conversation_sees_the_turns_before_and_leaves_the_source(
    h: Harness,
) -> None:
    one = completed(h, [DONE], "one")
    two = completed(h, [SEND, DONE], "two")

    forked = h.lifecycle.fork(two, model=h.script([SEND, DONE]), conversation="new")

    assert forked.conversation_id != "conv-1" and forked.replaces == (two,)
    h.follow(forked.turn_id)
    h.run_to_end()
    assert len(outbox(h.client)) == 1
    assert h.lifecycle.store.meta(two).replaced_by == ""
    history = h.requests[-1].messages
    assert isinstance(history[0], UserMessage) and history[0].text == "one"
    assert isinstance(history[1], AssistantMessage)
    assert h.lifecycle.store.lines.turn_ids("conv-1") == [one, two]


def test_a_fork_into_a_new_conversation_of_a_live_turn_is_refused(h: Harness) -> None:
    live = h.enqueue([DONE], "one")
    with pytest.raises(Refused, match="stop it first"):
        h.lifecycle.fork(live.turn_id, conversation="new")


def test_a_chat_message_is_a_repeat_an_edit_or_a_regenerate_by_its_id(h: Harness) -> None:
    model = h.script([SEND, DONE])
    sent = h.lifecycle.send("conv-1", "email Ada", message_id="m-1", model=model)
    assert sent.kind == "new"
    h.follow(sent.turn_id)
    h.run_to_end()

    again = h.lifecycle.send("conv-1", "email Ada", message_id="m-1", model=model)
    assert (again.kind, again.turn_id) == ("repeat", sent.turn_id)

    regenerated = h.lifecycle.send(
        "conv-1", "email Ada", message_id="m-1", regenerate=sent.turn_id, model=model
    )
    assert regenerated.kind == "fork" and regenerated.replaces == (sent.turn_id,)
    assert h.lifecycle.store.meta(regenerated.turn_id).message_id == "m-1"
    retried = h.lifecycle.send(
        "conv-1", "email Ada", message_id="m-1", regenerate=sent.turn_id, model=model
    )
    assert (retried.kind, retried.turn_id) == ("repeat", regenerated.turn_id)

    edited = h.lifecycle.send("conv-1", "email Ada now", message_id="m-1", model=model)
    assert edited.kind == "fork" and edited.replaces == (regenerated.turn_id,)
    h.follow(edited.turn_id)
    h.run_to_end()
    assert len(outbox(h.client)) == 1


def test_a_fork_whose_creator_died_before_marking_is_released_without_the_replaced_turns(
    h: Harness,
) -> None:
    """The API process recorded the fork and died before it marked the turns it replaces: the
    reaper's release marks them first, so the fork's model does not see them as history."""
    first = completed(h, [DONE], "one")
    second = completed(h, [DONE], "two")
    source = h.lifecycle.fork_source(second)
    plan = h.lifecycle.plan_fork(source, "same")
    fork = h.lifecycle.create(
        "two, again", held=True, fork=plan, conversation_id="conv-1", model=h.script([DONE])
    )

    released = h.lifecycle.advance("conv-1")  # the reaper's look at the held fork

    assert released is not None and released.turn_id == fork.turn_id
    assert h.lifecycle.store.meta(second).replaced_by == fork.turn_id
    h.follow(fork.turn_id)
    h.run_to_end()
    history = [m.text for m in h.requests[-1].messages if isinstance(m, UserMessage)]
    assert len(history) == 2 and history[0] == "one" and history[1].endswith("two, again")
    assert first in h.lifecycle.store.lines.turn_ids("conv-1")
