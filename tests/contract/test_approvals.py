"""Approval of writes (docs/semantics.md) through the real loop, ledger and lifecycle steps.

Chunks run in-process through ``Lifecycle.run_chunk`` (``tests/harness.py``) on fakeredis and on a
real redis-server; a person's decision is ``Lifecycle.decide``, as the API and the CLI call it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
from harness import Harness
from sample_tools import effects

from ledger.approvals import fold_approvals
from ledger.events import (
    ApprovalDecided,
    ApprovalRequested,
    RunStarted,
    ToolBlocked,
    ToolStart,
)
from ledger.turn import Step, StopCode, TurnStatus
from worker.base.errors import ConfigError
from worker.base.settings import load_settings
from worker.demo_tools import outbox
from worker.lifecycle.approvals import DecidedKind
from worker.lifecycle.reaper import Reaper

EMAIL = {"to": "ada@example.com", "subject": "Launch", "body": "Friday at 10."}
SEND = {"text": "Sending.", "tool_calls": [{"name": "send_email", "input": EMAIL}]}
DONE = {"text": "Done."}


@pytest.fixture
def h(client: redis.Redis, tmp_path: Path) -> Harness:
    return Harness(
        client, tmp_path, settings=load_settings(journal_read_backoff_s=0, approval="send_email")
    )


def status(h: Harness) -> TurnStatus:
    return h.lifecycle.store.meta(h.turn_id).status


def requests(h: Harness) -> list[ApprovalRequested]:
    return [e for e in h.events("approval_requested") if isinstance(e, ApprovalRequested)]


def test_a_write_that_needs_approval_waits_and_no_run_holds_the_turn(h: Harness) -> None:
    h.start([SEND, DONE])
    assert h.run_next() is None
    assert status(h) == TurnStatus.WAITING
    meta = h.lifecycle.store.meta(h.turn_id)
    (request,) = requests(h)
    assert (request.tool, request.input, request.call_id) == ("send_email", EMAIL, request.call_id)
    assert request.expires_at == pytest.approx(h.clock.now() + 86400)
    assert meta.next_run == "" and meta.approvals_pending == 1
    assert outbox(h.client) == []
    assert [e.type for e in h.events()][-2:] == ["approval_requested", "run_ended"]
    assert h.events("run_ended")[-1].reason == "waiting"  # type: ignore[union-attr]


def test_approve_runs_the_call_once_with_the_approved_input_before_the_next_model_call(
    h: Harness,
) -> None:
    h.start([SEND, DONE])
    h.run_next()
    decided = h.decide(by="ops@example.com", reason="fine")
    assert decided.ok and decided.run_id is not None
    assert status(h) == TurnStatus.RESUMING

    ended = h.run_to_end()

    assert ended.status == "completed"
    assert [m["to"] for m in outbox(h.client)] == [EMAIL["to"]]
    types = [e.type for e in h.events()]
    started = types.index("approval_decided")
    assert types[started:] == [
        "approval_decided",
        "run_started",
        "tool_start",
        "tool_done",
        "resumed",
        "model_start",
        "text",
        "model_done",
        "run_ended",
        "turn_ended",
    ]
    (run,) = [e for e in h.events("run_started") if isinstance(e, RunStarted)][1:]
    assert run.cause == "approval"
    (start,) = [e for e in h.events("tool_start") if isinstance(e, ToolStart)]
    (request,) = requests(h)
    assert (start.call_id, start.input, start.approval_id) == (
        request.call_id,
        EMAIL,
        request.approval_id,
    )
    (decision,) = [e for e in h.events("approval_decided") if isinstance(e, ApprovalDecided)]
    assert (decision.decision, decision.by, decision.reason) == (
        "approve",
        "ops@example.com",
        "fine",
    )
    # the model's next request carries the call where it made it, with its result
    last = h.requests[-1].messages
    results = [m for m in last if type(m).__name__ == "ToolResultMessage"]
    assert len(results) == 1 and '"sent": true' in results[0].content.lower().replace(" ", " ")


def test_deny_runs_nothing_and_the_model_gets_the_reason(h: Harness) -> None:
    h.start([SEND, DONE])
    h.run_next()
    assert h.decide(decision="deny", reason="wrong list").ok

    ended = h.run_to_end()

    assert ended.status == "completed" and outbox(h.client) == []
    (blocked,) = [e for e in h.events("tool_blocked") if isinstance(e, ToolBlocked)]
    assert blocked.reason == "denied" and blocked.is_error
    assert blocked.result == {"error": "denied by a person: wrong list"}
    assert not h.events("tool_start")
    texts = [m.content for m in h.requests[-1].messages if type(m).__name__ == "ToolResultMessage"]
    assert texts and "denied by a person: wrong list" in texts[0]


def test_a_model_that_repeats_the_approved_call_after_the_resume_is_blocked_not_asked(
    h: Harness,
) -> None:
    """``on_resume: restart``: the model issues the same call again at once."""
    h.start([SEND, DONE], on_resume="restart")
    h.run_next()
    h.decide()
    ended = h.run_to_end()
    assert ended.status == "completed"
    assert len(outbox(h.client)) == 1
    assert len(requests(h)) == 1
    (blocked,) = [e for e in h.events("tool_blocked") if isinstance(e, ToolBlocked)]
    assert blocked.reason == "completed"


def test_a_call_with_one_argument_changed_after_the_approval_asks_again(h: Harness) -> None:
    other = {**EMAIL, "to": "bob@example.com"}
    h.start([SEND, {"tool_calls": [{"name": "send_email", "input": other}]}, DONE])
    h.run_next()
    first = requests(h)[0]
    h.decide()
    assert h.run_next() is None  # the approved call ran; the changed one waits
    assert status(h) == TurnStatus.WAITING
    newest = requests(h)[-1]
    assert newest.approval_id != first.approval_id and newest.input == other
    assert [m["to"] for m in outbox(h.client)] == [EMAIL["to"]]
    entries = {e.request.approval_id: e for e in fold_approvals(h.events())}
    assert entries[first.approval_id].used and not entries[newest.approval_id].used


def test_a_decision_is_taken_once_and_only_for_the_requested_signature(h: Harness) -> None:
    h.start([SEND, DONE])
    h.run_next()
    (request,) = requests(h)
    stale = h.decide(signature="0" * 64)
    assert (stale.kind, stale.decision) == (DecidedKind.WRONG_SIGNATURE, None)
    assert "signature" in stale.detail and status(h) == TurnStatus.WAITING
    assert h.decide(decision="deny", reason="no").ok
    again = h.decide(decision="approve")
    assert (again.kind, again.decision) == (DecidedKind.ALREADY, "deny")
    assert "already decided: deny" in again.detail
    unknown = h.lifecycle.decide(h.turn_id, "apr_nope", "approve", request.signature)
    assert unknown.kind == DecidedKind.NOT_WAITING  # the turn no longer waits at all
    bad = h.lifecycle.decide(h.turn_id, request.approval_id, "maybe", request.signature)
    assert bad.kind == DecidedKind.INVALID and "approve or deny" in bad.detail


def test_an_unknown_approval_of_a_waiting_turn_is_not_found(h: Harness) -> None:
    h.start([SEND, DONE])
    h.run_next()
    unknown = h.lifecycle.decide(h.turn_id, "apr_nope", "approve", "0" * 64)
    assert unknown.kind == DecidedKind.UNKNOWN and "apr_nope" in unknown.detail


def test_a_decision_on_a_turn_that_does_not_wait_is_refused_and_changes_nothing(
    h: Harness,
) -> None:
    h.start([SEND, DONE])
    before = h.events()
    refusal = h.lifecycle.decide(h.turn_id, "apr_1", "approve", "0" * 64)
    assert refusal.kind == DecidedKind.NOT_WAITING and "not waiting" in refusal.detail
    assert status(h) == TurnStatus.QUEUED and h.events() == before


def test_two_requests_of_one_step_resume_the_turn_when_both_are_decided(h: Harness) -> None:
    second = {**EMAIL, "to": "bob@example.com"}
    both = {
        "tool_calls": [
            {"name": "send_email", "input": EMAIL},
            {"name": "get_ticket", "input": {"ticket_id": "T-1"}},
            {"name": "send_email", "input": second},
        ]
    }
    h.start([both, DONE])
    h.run_next()
    first, other = requests(h)
    assert h.lifecycle.store.meta(h.turn_id).approvals_pending == 2
    assert h.events("tool_start")[0].tool == "get_ticket"  # type: ignore[union-attr]  # ran
    one = h.decide(first.approval_id, "deny", reason="not Ada")
    assert one.ok and one.run_id is None and status(h) == TurnStatus.WAITING
    two = h.decide(other.approval_id)
    assert two.ok and two.run_id is not None
    assert h.run_to_end().status == "completed"
    assert [m["to"] for m in outbox(h.client)] == ["bob@example.com"]


def test_a_crash_right_after_the_approved_effect_resumes_with_one_effect(h: Harness) -> None:
    """The approved call's effect lands and its run is cut off before its ``tool_done``; the
    resumed run does not use the approval again, and a model that re-issues the call meets the
    interrupted-write guard."""
    settings = load_settings(journal_read_backoff_s=0, approval="write_then_die")
    h = Harness(h.client, h.tmp, settings=settings)
    call = {"tool_calls": [{"name": "write_then_die", "input": {"label": "x"}}]}
    h.start([call, DONE], on_resume="restart")
    h.run_next()
    h.decide()
    assert h.run_next() is None  # cut off after the effect: the next chunk is pending
    ended = h.run_to_end()
    assert ended.status == "completed"
    assert len(effects(h.client, "write_then_die")) == 1
    assert len(requests(h)) == 1
    reasons = [e.reason for e in h.events("tool_blocked") if isinstance(e, ToolBlocked)]
    assert reasons == ["interrupted"]


def test_expiry_stops_the_turn_and_continue_asks_again(h: Harness) -> None:
    h.start([SEND, DONE])
    h.run_next()
    (first,) = requests(h)
    reaper = Reaper(h.lifecycle)
    assert reaper.check(h.turn_id, h.lifecycle.ms()) == "awaiting_approval"
    h.clock.t = first.expires_at + 1
    assert reaper.check(h.turn_id, h.lifecycle.ms()) == "stopped: approval_expired"
    meta = h.lifecycle.store.meta(h.turn_id)
    assert (meta.status, meta.code) == (TurnStatus.STOPPED, StopCode.APPROVAL_EXPIRED)
    decided = [e for e in h.events("approval_decided") if isinstance(e, ApprovalDecided)]
    assert [(d.approval_id, d.decision) for d in decided] == [(first.approval_id, "expired")]
    assert h.lifecycle.continue_refusal(meta, auto=True) is not None  # never automatically

    outcome = h.lifecycle.continue_turn(h.turn_id, auto=False)
    assert outcome.ok
    h.pending = outcome.run_id
    assert h.run_next() is None
    assert status(h) == TurnStatus.WAITING
    again = requests(h)[-1]
    assert again.approval_id != first.approval_id and again.call_id == first.call_id
    assert len(h.requests) == 1  # asked again without a model call
    h.decide()
    assert h.run_to_end().status == "completed" and len(outbox(h.client)) == 1


def test_stop_on_a_waiting_turn_voids_its_requests(h: Harness) -> None:
    h.start([SEND, DONE])
    h.run_next()
    outcome = h.lifecycle.stop(h.turn_id)
    assert outcome.ok
    meta = h.lifecycle.store.meta(h.turn_id)
    assert (meta.status, meta.code) == (TurnStatus.STOPPED, StopCode.CANCELLED)
    (voided,) = [e for e in h.events("approval_decided") if isinstance(e, ApprovalDecided)]
    assert voided.decision == "voided" and voided.by == "dres"
    late = h.decide()
    assert late.kind == DecidedKind.ALREADY and late.decision == "voided"
    assert h.lifecycle.store.approvals.page(limit=10)[0] == []


def test_a_new_message_supersedes_a_waiting_turn(h: Harness) -> None:
    h.start([SEND, DONE])
    h.run_next()
    conversation = h.lifecycle.store.meta(h.turn_id).conversation_id
    assert h.lifecycle.supersede(conversation) == h.turn_id
    meta = h.lifecycle.store.meta(h.turn_id)
    assert (meta.status, meta.code) == (TurnStatus.STOPPED, StopCode.SUPERSEDED)
    assert h.events("turn_ended")[-1].can_continue is False  # type: ignore[union-attr]
    assert h.lifecycle.supersede(conversation) is None  # nothing waits any more


def test_the_open_requests_are_listed_newest_first_in_pages_until_decided(
    client: redis.Redis, tmp_path: Path
) -> None:
    turns = []
    for n in range(5):
        h = Harness(
            client,
            tmp_path,
            settings=load_settings(journal_read_backoff_s=0, approval="send_email"),
        )
        h.ids.namespace = f"n{n}_"
        h.clock.t += n
        h.start([SEND, DONE])
        h.run_next()
        turns.append(h)
    store = turns[0].lifecycle.store
    page, cursor = store.approvals.page(limit=2)
    assert [r.turn_id for r in page] == [turns[4].turn_id, turns[3].turn_id]
    page2, cursor2 = store.approvals.page(limit=2, cursor=cursor)
    assert [r.turn_id for r in page2] == [turns[2].turn_id, turns[1].turn_id]
    turns[0].decide()
    page3, cursor3 = store.approvals.page(limit=2, cursor=cursor2)
    assert page3 == [] and cursor3 is None
    everything, end = store.approvals.page(limit=10)
    assert [r.turn_id for r in everything] == [t.turn_id for t in turns[:0:-1]] and end is None


def test_a_per_call_rule_and_writes_mode_choose_which_calls_wait(
    client: redis.Redis, tmp_path: Path
) -> None:
    small = {"tool_calls": [{"name": "transfer", "input": {"amount": 50, "to": "bob"}}]}
    big = {"tool_calls": [{"name": "transfer", "input": {"amount": 500, "to": "bob"}}]}
    h = Harness(client, tmp_path)
    h.start([small, big, DONE])
    assert h.run_next() is None and status(h) == TurnStatus.WAITING
    assert [e["amount"] for e in effects(client, "transfer")] == [50]
    assert requests(h)[0].input == {"amount": 500, "to": "bob"}

    writes = Harness(client, tmp_path, settings=load_settings(approval="writes"))
    writes.ids.namespace = "w_"
    read = {"tool_calls": [{"name": "get_ticket", "input": {"ticket_id": "T-1"}}]}
    writes.start([read, small, DONE])
    assert writes.run_next() is None
    assert [r.tool for r in requests(writes)] == ["transfer"]


def test_approval_settings_name_registered_write_tools_only(
    client: redis.Redis, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="unknown tools"):
        Harness(client, tmp_path, settings=load_settings(approval="send_emial")).loop()
    with pytest.raises(ConfigError, match="read-only"):
        Harness(client, tmp_path, settings=load_settings(approval="get_ticket")).loop()


def test_a_soft_limit_before_the_run_ends_waiting_leaves_the_request_to_the_next_chunk(
    h: Harness,
) -> None:
    """The request is recorded, then a later call of the same step is cut off by the soft
    limit: the next chunk waits for the request at once, with no model call, and the
    decision then runs it once."""
    step = {
        "tool_calls": [
            {"name": "send_email", "input": EMAIL},
            {"name": "write_then_die", "input": {"label": "x"}},
        ]
    }
    h.start([step, DONE])
    assert h.run_next() is None and status(h) == TurnStatus.RESUMING  # handed over, not waiting
    (request,) = requests(h)
    asked = len(h.requests)
    assert h.run_next() is None and status(h) == TurnStatus.WAITING
    assert len(h.requests) == asked and requests(h) == [request]  # the same request, no model
    h.decide()
    assert h.run_to_end().status == "completed"
    assert len(outbox(h.client)) == 1 and len(effects(h.client, "write_then_die")) == 1


def test_a_stop_requested_while_the_run_ends_waiting_stops_the_turn(h: Harness) -> None:
    """Stop reached the running turn (its flag set) after the last safe point of the run, which
    then ends waiting: the turn does not wait, it stops, its request voided."""
    h.start([SEND, DONE])
    original = h.lifecycle.wait

    def stop_then_wait(run: Any, result: Any) -> str:
        h.lifecycle.store.request_stop(h.turn_id)  # as Control.stop does first
        return original(run, result)

    h.lifecycle.wait = stop_then_wait  # type: ignore[method-assign]
    ended = h.run_next()
    assert ended is not None and (ended.status, ended.code) == ("stopped", "cancelled")
    (voided,) = [e for e in h.events("approval_decided") if isinstance(e, ApprovalDecided)]
    assert voided.decision == "voided"
    assert outbox(h.client) == [] and h.lifecycle.store.approvals.page(limit=5)[0] == []


def test_a_decision_whose_resume_message_never_left_is_sent_again_after_the_handoff_grace(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decider (an API process) dies right after the last decision's step, before its
    message is sent and the turn watched: the reaper still looks at the turn within the hand-off
    grace (not at the request's expiry, a day away) and sends the message again. ``make chaos
    KINDS=approval`` met it as a redis-server restart right after a decision, which lost the
    writes that followed the step."""
    h.start([SEND, DONE])
    h.run_next()

    def died(*_: object) -> None:
        raise RuntimeError("the deciding process died")

    monkeypatch.setattr(h.lifecycle, "launch", died)
    with pytest.raises(RuntimeError, match="died"):
        h.decide()
    monkeypatch.undo()
    meta = h.lifecycle.store.meta(h.turn_id)
    assert meta.status == TurnStatus.RESUMING
    assert meta.next_run not in {run_id for _, run_id, _ in h.messages.sent}

    h.clock.t += h.settings.handoff_grace_s + 1
    assert Reaper(h.lifecycle).sweep() == {h.turn_id: "redispatched"}
    assert h.messages.sent[-1] == (h.turn_id, meta.next_run, "foreground")
    h.pending = meta.next_run
    assert h.run_to_end().status == "completed" and len(outbox(h.client)) == 1


def test_a_continue_whose_message_never_left_is_sent_again_after_the_handoff_grace(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for a Continue (here after a Stop voided the request): a stopped turn is in no
    index, so the Continue watches it before its step, and the reaper sends the lost message."""
    h.start([SEND, DONE])
    h.run_next()
    assert h.lifecycle.stop(h.turn_id).ok

    def died(*_: object) -> None:
        raise RuntimeError("the continuing process died")

    monkeypatch.setattr(h.lifecycle, "launch", died)
    with pytest.raises(RuntimeError, match="died"):
        h.lifecycle.continue_turn(h.turn_id, auto=False)
    monkeypatch.undo()
    meta = h.lifecycle.store.meta(h.turn_id)
    assert meta.status == TurnStatus.QUEUED

    h.clock.t += h.settings.handoff_grace_s + 1
    assert Reaper(h.lifecycle).sweep() == {h.turn_id: "redispatched"}
    h.pending = meta.next_run
    assert h.run_next() is None and status(h) == TurnStatus.WAITING  # asked again


def test_a_listing_between_a_requests_listing_and_its_wait_keeps_it_listed(h: Harness) -> None:
    """A person's listing runs after the run listed its request and before its wait: the
    request is not open yet, and must not be dropped as stale (it is open a moment later)."""
    h.start([SEND, DONE])
    store = h.lifecycle.store
    step = store.transition
    seen: list[list[str]] = []

    def list_then_step(turn_id: str, what: Any, **kw: Any) -> int:
        if what == Step.WAIT:
            seen.append([r.approval_id for r in store.approvals.page(limit=5)[0]])
        return step(turn_id, what, **kw)

    store.transition = list_then_step  # type: ignore[method-assign]
    h.run_next()
    (request,) = requests(h)
    assert seen == [[]]  # not open while the run was ending
    assert [r.approval_id for r in store.approvals.page(limit=5)[0]] == [request.approval_id]
