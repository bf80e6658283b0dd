"""One live turn per conversation (docs/semantics.md): a conversation's turns go through its line
one at a time, and a new message while one is live follows DRES_DOUBLE_TEXT.

Chunks run in-process through ``Lifecycle.run_chunk`` (``tests/harness.py``) on every ledger
backend; messages go through ``Lifecycle.enqueue`` as the API's do.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from harness import Harness
from sample_tools import effects

from ledger.events import ToolBlocked
from ledger.turn import TurnStatus
from worker.base.errors import Refused
from worker.base.settings import load_settings
from worker.demo_tools import outbox
from worker.engine.models.base import UserMessage
from worker.lifecycle.reaper import Reaper

EMAIL = {"to": "ada@example.com", "subject": "Launch", "body": "Friday at 10."}
SEND = {"text": "Sending.", "tool_calls": [{"name": "send_email", "input": EMAIL}]}
DONE = {"text": "Done."}


def write(name: str, label: str) -> dict[str, object]:
    return {"text": "", "tool_calls": [{"name": name, "input": {"label": label}}]}


@pytest.fixture
def h(client: redis.Redis, tmp_path: Path) -> Harness:
    return Harness(client, tmp_path)


def status(h: Harness, turn_id: str) -> TurnStatus:
    return h.lifecycle.store.meta(turn_id).status


def sent_for(h: Harness, turn_id: str) -> list[str]:
    """The run ids of the chunk messages sent for the turn."""
    return [run for turn, run, _ in h.messages.sent if turn == turn_id]


def test_a_message_while_a_turn_is_live_waits_held_and_starts_when_that_turn_ends(
    h: Harness,
) -> None:
    first = h.enqueue([SEND, DONE], "email Ada")
    second = h.enqueue([DONE], "and now?")

    assert first.run_id and sent_for(h, first.turn_id) == [first.run_id]
    held = h.lifecycle.store.meta(second.turn_id)
    assert (second.run_id, held.status, held.held, held.next_run) == ("", "queued", True, "")
    assert sent_for(h, second.turn_id) == []  # no message: no worker slot, nothing to redeliver

    h.follow(first.turn_id)
    assert h.run_to_end().status == "completed"

    (released,) = sent_for(h, second.turn_id)
    assert h.lifecycle.store.meta(second.turn_id).next_run == released
    h.follow(second.turn_id)
    assert h.run_to_end().status == "completed"
    opening = [m.text for m in h.requests[-1].messages if isinstance(m, UserMessage)]
    assert opening == ["email Ada", "and now?"]  # it saw the turn it waited for
    assert "Done." in h.requests[-1].messages[1].text  # type: ignore[union-attr]


def test_reject_refuses_a_message_while_a_turn_is_live_and_records_nothing(h: Harness) -> None:
    first = h.enqueue([DONE], "first")
    listed = h.lifecycle.store.lines.turn_ids("conv-1")

    with pytest.raises(Refused, match=first.turn_id):
        h.enqueue([DONE], "second", double_text="reject")

    assert h.lifecycle.store.lines.turn_ids("conv-1") == listed
    h.follow(first.turn_id)
    h.run_to_end()
    assert h.enqueue([DONE], "third", double_text="reject").run_id  # nothing live: it goes


def test_interrupt_stops_a_turn_not_yet_started_and_lets_the_new_one_through(h: Harness) -> None:
    first = h.enqueue([SEND, DONE], "email Ada")

    second = h.enqueue([DONE], "wait, don't", double_text="interrupt")

    stopped = h.lifecycle.store.meta(first.turn_id)
    assert (stopped.status, stopped.code) == ("stopped", "superseded")
    assert second.run_id  # let through at once
    h.follow(second.turn_id)
    h.run_to_end()
    assert effects(h.client) == []


def test_once_a_new_message_supersedes_the_turn_no_write_of_it_starts(h: Harness) -> None:
    """The Stop flag a new message sets is checked in the same atomic step as a write's
    tool_start: the write running when it came finishes and is recorded, the next does not
    start, and the turn stops superseded."""
    two = {
        "text": "",
        "tool_calls": [
            {"name": "write_superseded", "input": {"label": "a"}},
            {"name": "charge", "input": {"amount": 5}},
        ],
    }
    h.follow(h.enqueue([two, DONE], "two writes").turn_id)

    ended = h.run_to_end()

    assert (ended.status, ended.code, ended.can_continue) == ("stopped", "superseded", False)
    assert [e["tool"] for e in effects(h.client)] == ["write_superseded"]
    starts = [e.tool for e in h.events("tool_start")]  # type: ignore[union-attr]
    assert starts == ["write_superseded"]
    assert len(h.events("tool_done")) == 1


def test_turns_behind_a_stopped_held_turn_keep_their_order(h: Harness) -> None:
    first = h.enqueue([DONE], "one")
    second = h.enqueue([DONE], "two")
    third = h.enqueue([DONE], "three")

    assert h.lifecycle.stop(second.turn_id).ok
    assert status(h, second.turn_id) == "stopped" and sent_for(h, third.turn_id) == []

    h.follow(first.turn_id)
    h.run_to_end()
    assert sent_for(h, third.turn_id)


def test_a_turn_whose_release_was_lost_is_let_through_by_the_reaper(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = h.enqueue([DONE], "one")
    second = h.enqueue([DONE], "two")
    h.follow(first.turn_id)
    # the worker dies between the turn's end and its advance of the line
    monkeypatch.setattr(h.lifecycle, "advance_quietly", lambda *a, **k: None)
    h.run_to_end()
    assert h.lifecycle.store.meta(second.turn_id).held

    assert Reaper(h.lifecycle).check(second.turn_id, h.lifecycle.ms()) == "released"
    assert sent_for(h, second.turn_id)


def test_a_waiting_turn_is_superseded_and_the_new_message_goes(
    client: redis.Redis, tmp_path: Path
) -> None:
    h = Harness(
        client, tmp_path, settings=load_settings(journal_read_backoff_s=0, approval="send_email")
    )
    waiting = h.enqueue([SEND, DONE], "email Ada")
    h.follow(waiting.turn_id)
    assert h.run_next() is None and status(h, waiting.turn_id) == "waiting"

    new = h.enqueue([DONE], "no, tomorrow")

    meta = h.lifecycle.store.meta(waiting.turn_id)
    assert (meta.status, meta.code) == ("stopped", "superseded")
    assert new.run_id


def test_continue_of_the_newest_stop_goes_through_the_line(h: Harness) -> None:
    first = h.enqueue([SEND, DONE], "email Ada")
    assert h.lifecycle.stop(first.turn_id).ok  # before it ran

    outcome = h.lifecycle.continue_turn(first.turn_id, auto=False)

    assert outcome.ok and outcome.run_id
    assert h.lifecycle.store.lines.look("conv-1").holder == first.turn_id
    h.follow(first.turn_id)
    assert h.run_to_end().status == "completed"


def test_the_newest_message_sent_again_returns_its_turn_and_another_text_under_its_id_is_refused(
    h: Harness,
) -> None:
    first = h.enqueue([DONE], "hello", message_id="m-1")
    again = h.enqueue([DONE], "hello", message_id="m-1")
    assert again.turn_id == first.turn_id
    assert h.lifecycle.store.lines.turn_ids("conv-1") == [first.turn_id]
    with pytest.raises(Refused, match="fork"):
        h.enqueue([DONE], "hello there", message_id="m-1")


def test_no_two_turns_of_a_conversation_hold_runs_at_once(h: Harness) -> None:
    """Many messages, each run as soon as it is let through: at every point at most one turn of
    the conversation has a run pending or running."""
    turns = [h.enqueue([SEND, DONE], f"message {n}").turn_id for n in range(4)]
    done = 0
    while done < len(turns):
        live = [t for t in turns if status(h, t) in ("queued", "running", "resuming")]
        pending = [t for t in live if h.lifecycle.store.meta(t).next_run]
        assert len(pending) == 1, pending
        h.follow(pending[0])
        h.run_to_end()
        done += 1
    blocked = [e for e in h.ledger.events(turns[-1]) if isinstance(e, ToolBlocked)]
    assert blocked == []  # a new message is a new request: no layer blocks across turns
    assert len(outbox(h.client)) == len(turns)
