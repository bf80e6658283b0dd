"""Client tools (docs/semantics.md, waits): a call of a tool the client runs is recorded, the turn
waits for the client's answer held by no run, and the answer — recorded once as the call's
``tool_done`` — resumes the same turn; an exact repeat after a resume is answered from the record.

In-process chunks (``tests/harness.py``) on every ledger backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
from harness import Harness

from ledger.events import ClientTool, RunStarted, ToolBlocked, ToolDone, ToolStart
from ledger.turn import TurnStatus
from worker.base.settings import load_settings
from worker.demo_tools import outbox
from worker.engine.models.base import ToolResultMessage
from worker.lifecycle.outputs import AnsweredKind
from worker.lifecycle.reaper import Reaper

ASK = {"text": "Let me ask.", "tool_calls": [{"name": "ask_user", "input": {"question": "Red?"}}]}
DONE = {"text": "Done."}
EMAIL = {"to": "ada@example.com", "subject": "Launch", "body": "Friday at 10."}
SEND = {"text": "", "tool_calls": [{"name": "send_email", "input": EMAIL}]}


@pytest.fixture
def h(client: redis.Redis, tmp_path: Path) -> Harness:
    return Harness(client, tmp_path)


def asked(h: Harness) -> ToolStart:
    (start,) = [e for e in h.events("tool_start") if isinstance(e, ToolStart)]
    return start


def test_a_client_tools_call_is_recorded_and_the_turn_waits_for_the_answer_held_by_no_run(
    h: Harness,
) -> None:
    h.start([ASK, DONE])

    assert h.run_next() is None
    meta = h.lifecycle.store.meta(h.turn_id)
    start = asked(h)
    assert (meta.status, meta.waiting_for, meta.next_run) == ("waiting", "client_tool", "")
    assert meta.pending_calls == [(start.call_id, "ask_user")]
    assert (start.tool, start.input, start.read_only) == ("ask_user", {"question": "Red?"}, False)
    assert not h.events("tool_done")
    assert h.events("run_ended")[-1].reason == "waiting"  # type: ignore[union-attr]


def test_the_answer_is_recorded_once_and_resumes_the_same_turn_whose_model_reads_it(
    h: Harness,
) -> None:
    h.start([ASK, DONE])
    h.run_next()
    call_id = asked(h).call_id

    answered = h.lifecycle.answer(h.turn_id, call_id, {"answer": "yes"})
    again = h.lifecycle.answer(h.turn_id, call_id, {"answer": "no"})

    assert answered.ok and answered.run_id and again.kind == AnsweredKind.ALREADY
    (done,) = [e for e in h.events("tool_done") if isinstance(e, ToolDone)]
    assert (done.call_id, done.result, done.is_error) == (call_id, {"answer": "yes"}, False)
    h.pending = answered.run_id
    assert h.run_to_end().status == "completed"
    started = [e for e in h.events("run_started") if isinstance(e, RunStarted)]
    assert started[-1].cause == "tool_output"
    results = [m for m in h.requests[-1].messages if isinstance(m, ToolResultMessage)]
    assert [(r.call_id, r.content) for r in results] == [(call_id, '{"answer": "yes"}')]


def test_an_exact_repeat_after_a_resume_gets_the_recorded_output_and_asks_nothing(
    h: Harness,
) -> None:
    h.start([ASK, DONE], on_resume="restart")
    h.run_next()
    answered = h.lifecycle.answer(h.turn_id, asked(h).call_id, "yes")
    h.pending = answered.run_id

    assert h.run_to_end().status == "completed"  # the model asked again: answered from the record

    (block,) = [e for e in h.events("tool_blocked") if isinstance(e, ToolBlocked)]
    assert (block.tool, block.reason, block.result["result"]) == ("ask_user", "completed", "yes")


def test_an_answer_for_a_call_the_turn_does_not_wait_on_is_refused_naming_what_it_waits_on(
    h: Harness,
) -> None:
    h.start([ASK, DONE])
    h.run_next()

    refused = h.lifecycle.answer(h.turn_id, "call-nobody", "x")

    assert refused.kind == AnsweredKind.NOT_WAITING
    assert asked(h).call_id in refused.detail and "ask_user" in refused.detail
    assert h.lifecycle.store.meta(h.turn_id).status == TurnStatus.WAITING


def test_a_turn_that_waits_on_a_client_and_a_person_resumes_once_both_answered(
    client: redis.Redis, tmp_path: Path
) -> None:
    h = Harness(
        client, tmp_path, settings=load_settings(journal_read_backoff_s=0, approval="send_email")
    )
    both = {"text": "", "tool_calls": [*ASK["tool_calls"], *SEND["tool_calls"]]}
    h.start([both, DONE])
    h.run_next()

    answered = h.lifecycle.answer(h.turn_id, asked(h).call_id, "yes")
    assert answered.ok and answered.run_id is None  # the approval is still open
    decided = h.decide()
    assert decided.ok and decided.run_id is not None

    h.pending = decided.run_id
    assert h.run_to_end().status == "completed"
    assert len(outbox(h.client)) == 1


def test_a_stop_while_waiting_closes_the_call_unanswered_and_continue_asks_again(
    h: Harness,
) -> None:
    h.start([ASK, DONE], on_resume="restart")
    h.run_next()
    first = asked(h).call_id

    assert h.lifecycle.stop(h.turn_id).ok
    (closed,) = [e for e in h.events("tool_done") if isinstance(e, ToolDone)]
    assert (closed.call_id, closed.is_error) == (first, True)
    assert h.lifecycle.answer(h.turn_id, first, "late").kind == AnsweredKind.ALREADY

    outcome = h.lifecycle.continue_turn(h.turn_id, auto=False)
    h.pending = outcome.run_id
    assert h.run_next() is None  # asked again: a new call, waiting
    starts = [e.call_id for e in h.events("tool_start") if isinstance(e, ToolStart)]
    assert len(starts) == 2 and h.lifecycle.store.meta(h.turn_id).pending_calls[0][0] == starts[1]


def test_a_waiting_client_call_is_not_looked_at_by_the_reaper_every_sweep(h: Harness) -> None:
    h.start([ASK, DONE])
    h.run_next()
    assert h.lifecycle.store.due(h.lifecycle.ms(3600), 10) in ([], [h.turn_id])
    outcome = Reaper(h.lifecycle).check(h.turn_id, h.lifecycle.ms())
    assert outcome == "awaiting_client"
    assert h.turn_id not in h.lifecycle.store.due(h.lifecycle.ms(3600), 10)


def test_a_requests_client_tools_are_the_turns_tools_and_wait_like_declared_ones(
    h: Harness,
) -> None:
    """An AG-UI request's ``tools``: declared for its turn, checked against their schema."""
    color = ClientTool(
        name="pick_color",
        description="the page asks the person for a color",
        parameters={
            "type": "object",
            "properties": {"hint": {"type": "string"}},
            "required": ["hint"],
        },
    )
    bad = {"text": "", "tool_calls": [{"name": "pick_color", "input": {"hint": 3}}]}
    good: dict[str, Any] = {
        "text": "",
        "tool_calls": [{"name": "pick_color", "input": {"hint": "x"}}],
    }
    h.start([bad, good, DONE], client_tools=[color])

    assert h.run_next() is None
    names = [t.name for t in h.requests[0].tools]
    assert "pick_color" in names and "ask_user" in names
    (rejected,) = [e for e in h.events("tool_done") if isinstance(e, ToolDone)]
    assert rejected.is_error and "hint" in str(rejected.result)
    assert h.lifecycle.store.meta(h.turn_id).pending_calls[0][1] == "pick_color"
