"""The chaos runner's invariants are pure checks over hand-built streams (chaos.invariants)."""

from __future__ import annotations

from typing import Any

from chaos import invariants
from chaos.report import Outcome, TurnResult, naive_table
from ledger.codec import Envelope
from ledger.events import (
    ApprovalDecided,
    ApprovalRequested,
    RunEnded,
    RunStarted,
    Text,
    ToolDone,
    ToolStart,
    TurnEnded,
    TurnStarted,
)
from ledger.signature import input_signature

SEND = {"to": "ada@example.com", "subject": "Launch", "body": "Friday at 10."}


def base(run_id: str, n: int) -> dict[str, Any]:
    return {"event_id": f"ev{n}", "turn_id": "t1", "run_id": run_id, "chunk": 0, "ts": 1.0}


def stream(*items: tuple[str, str, str, dict[str, Any]]) -> list[Envelope]:
    """Envelopes from ``(stream_id, type, run_id, fields)``, in the order given."""
    types = {
        "turn_started": TurnStarted,
        "approval_requested": ApprovalRequested,
        "approval_decided": ApprovalDecided,
        "run_started": RunStarted,
        "text": Text,
        "tool_start": ToolStart,
        "tool_done": ToolDone,
        "run_ended": RunEnded,
        "turn_ended": TurnEnded,
    }
    return [
        Envelope(sid, types[kind](**base(run_id, n), **fields))
        for n, (sid, kind, run_id, fields) in enumerate(items)
    ]


def started(run_id: str, sid: str) -> tuple[str, str, str, dict[str, Any]]:
    return (sid, "run_started", run_id, {})


def ended(run_id: str, sid: str, reason: str = "completed") -> tuple[str, str, str, dict[str, Any]]:
    return (sid, "run_ended", run_id, {"reason": reason})


def turn_ended(
    run_id: str, sid: str, status: str = "completed", code: str = "", can_continue: bool = False
) -> tuple[str, str, str, dict[str, Any]]:
    fields = {"status": status, "code": code, "can_continue": can_continue}
    return (sid, "turn_ended", run_id, fields)


def opening() -> tuple[str, str, str, dict[str, Any]]:
    return ("0-1", "turn_started", "r1", {"conversation_id": "c1", "message": "hi"})


def continued_turn() -> list[Envelope]:
    """Stopped as crashed, continued, then completed: two turn_ended, the last one final."""
    return stream(
        opening(),
        started("r1", "1-0"),
        ended("r1", "1-1", "crashed"),
        turn_ended("r1", "1-2", "stopped", "crashed", can_continue=True),
        started("r2", "2-0"),
        ended("r2", "2-1"),
        turn_ended("r2", "2-2"),
    )


def events(envelopes: list[Envelope]) -> list[Any]:
    return [env.event for env in envelopes]


# -- nothing follows the last turn_ended --------------------------------------------------------


def test_a_continued_turn_may_have_an_earlier_turn_ended_before_more_runs() -> None:
    assert invariants.nothing_after_turn_ended(continued_turn()) == []


def test_an_event_after_the_last_turn_ended_is_a_violation_naming_it() -> None:
    envelopes = [*continued_turn(), *stream(("2-3", "text", "r2", {"text": "late"}))]
    assert invariants.nothing_after_turn_ended(envelopes) == [
        "2-3 text follows the last turn_ended (2-2)"
    ]


def test_a_stream_without_turn_ended_has_nothing_following_an_end() -> None:
    assert invariants.nothing_after_turn_ended(stream(opening(), started("r1", "1-0"))) == []


# -- every run_started is closed ----------------------------------------------------------------


def test_runs_closed_by_their_own_run_ended_are_closed() -> None:
    assert invariants.runs_closed(continued_turn()) == []


def test_a_dead_run_is_closed_by_the_crashed_run_ended_a_takeover_writes_for_it() -> None:
    envelopes = stream(
        opening(),
        started("r1", "1-0"),
        ended("r1", "2-0", "crashed"),  # written by the takeover, at the next epoch
        started("r2", "3-0"),
        ended("r2", "3-1"),
        turn_ended("r2", "3-2"),
    )
    assert invariants.runs_closed(envelopes) == []


def test_a_run_never_ended_in_an_ended_turn_is_a_violation() -> None:
    envelopes = stream(
        opening(), started("r1", "1-0"), started("r2", "2-0"), ended("r2", "2-1"),
        turn_ended("r2", "2-2"),
    )  # fmt: skip
    assert invariants.runs_closed(envelopes) == [
        "run r1 (started at 1-0) has no run_ended after it"
    ]


def test_a_run_ended_before_its_run_started_does_not_close_it() -> None:
    envelopes = stream(opening(), ended("r1", "1-0"), started("r1", "1-1"), turn_ended("r1", "1-2"))
    assert invariants.runs_closed(envelopes) == [
        "run r1 (started at 1-1) has no run_ended after it"
    ]


def test_only_the_newest_run_of_a_turn_not_ended_yet_may_be_open() -> None:
    envelopes = stream(opening(), started("r1", "1-0"), started("r2", "2-0"))
    assert invariants.runs_closed(envelopes, ended=False) == [
        "run r1 (started at 1-0) has no run_ended after it"
    ]
    assert invariants.runs_closed(envelopes, ended=True) == [
        "run r1 (started at 1-0) has no run_ended after it",
        "run r2 (started at 2-0) has no run_ended after it",
    ]


# -- each run starts once ----------------------------------------------------------------------


def test_a_run_id_started_twice_is_a_violation() -> None:
    envelopes = stream(opening(), started("r1", "1-0"), started("r1", "2-0"))
    assert invariants.each_run_started_once(events(envelopes)) == ["run r1 started 2 times"]
    assert invariants.each_run_started_once(events(continued_turn())) == []


# -- the metadata agrees with the last turn_ended ----------------------------------------------


def test_metadata_matching_the_last_turn_ended_is_consistent() -> None:
    assert invariants.meta_matches_stream(events(continued_turn()), "completed", "") == []


def test_metadata_agreeing_only_with_an_earlier_turn_ended_is_a_violation() -> None:
    assert invariants.meta_matches_stream(events(continued_turn()), "stopped", "crashed") == [
        "the metadata says 'stopped', the last turn_ended 'completed'"
    ]


def test_a_stop_whose_code_differs_from_the_metadata_is_a_violation() -> None:
    envelopes = stream(
        opening(), started("r1", "1-0"), ended("r1", "1-1", "crashed"),
        turn_ended("r1", "1-2", "stopped", "handoff_lost", can_continue=True),
    )  # fmt: skip
    assert invariants.meta_matches_stream(events(envelopes), "stopped", "handoff_lost") == []
    assert invariants.meta_matches_stream(events(envelopes), "stopped", "crashed") == [
        "the metadata's stop code is 'crashed', the last turn_ended's 'handoff_lost'"
    ]


def test_ended_metadata_without_a_turn_ended_is_a_violation() -> None:
    envelopes = stream(opening(), started("r1", "1-0"), ended("r1", "1-1"))
    assert invariants.meta_matches_stream(events(envelopes), "completed", "") == [
        "the metadata says 'completed' but the stream has no turn_ended"
    ]
    assert invariants.meta_matches_stream(events(envelopes), "running", "") == []


def test_a_continue_in_flight_after_a_stop_is_consistent_but_not_after_completion() -> None:
    stopped = continued_turn()[:4]
    assert invariants.meta_matches_stream(events(stopped), "queued", "") == []
    assert invariants.meta_matches_stream(events(continued_turn()), "running", "") == [
        "the metadata says 'running' after the turn completed"
    ]


# -- the turn ended within the bound -----------------------------------------------------------


def test_a_completed_turn_or_a_continuable_stop_is_terminal() -> None:
    assert invariants.terminal("completed", False) == []
    assert invariants.terminal("stopped", True, "crashed") == []


def test_a_stop_without_can_continue_or_a_turn_still_running_is_a_violation() -> None:
    assert invariants.terminal("stopped", False, "no_progress") == [
        "the turn stopped (no_progress) without can_continue"
    ]
    assert invariants.terminal("running", False) == ["the turn was still 'running' at the bound"]


# -- a backlog delays, never stops or duplicates ------------------------------------------------


def test_a_backlog_that_stopped_a_turn_is_a_violation_naming_the_code() -> None:
    assert invariants.completed_despite_backlog("completed", "") == []
    assert invariants.completed_despite_backlog("stopped", "handoff_lost") == [
        "a backlog left the turn 'stopped' (handoff_lost)"
    ]


def test_a_worker_that_exited_during_a_store_fault_is_a_violation() -> None:
    assert invariants.worker_stayed(0) == []
    assert invariants.worker_stayed(1) == ["the worker exited 1 time(s) during a store fault"]


def test_two_broker_messages_for_one_run_are_a_violation() -> None:
    assert invariants.one_message_per_run({"t1:r1": 1, "t1:r2": 1}) == []
    assert invariants.one_message_per_run({"t1:r1": 1, "t1:r2": 2}) == [
        "the broker held 2 messages for t1:r2"
    ]


# -- duplicate effects --------------------------------------------------------------------------


def send_row(call_id: str) -> dict[str, Any]:
    return {"tool": "chaos_send", "call_id": call_id, "to": SEND["to"], "subject": SEND["subject"]}


def charge_row(call_id: str, applied: bool) -> dict[str, Any]:
    return {"tool": "chaos_charge", "call_id": call_id, "amount": 5, "applied": applied}


def test_duplicate_effects_count_extra_plain_runs_and_extra_charges_applied() -> None:
    once = [send_row("c1"), charge_row("c2", True), charge_row("c3", False)]
    assert invariants.duplicate_effects(once) == 0
    twice = [send_row("c1"), send_row("c4"), send_row("c5"), charge_row("c2", True)]
    assert invariants.duplicate_effects([*twice, charge_row("c6", True)]) == 3


def completed_send_turn() -> list[Envelope]:
    signature = input_signature(SEND)
    return stream(
        opening(),
        started("r1", "1-0"),
        ("1-1", "tool_start", "r1", {"call_id": "c1", "tool": "chaos_send", "input": SEND,
                                     "signature": signature}),
        ("1-2", "tool_done", "r1", {"call_id": "c1", "tool": "chaos_send", "result": {}}),
        ended("r1", "1-3", "soft_limit"),
        started("r2", "2-0"),
        ended("r2", "2-1"),
        turn_ended("r2", "2-2"),
    )  # fmt: skip


def test_check_passes_a_well_formed_completed_turn() -> None:
    kwargs = {"status": "completed", "code": "", "soft_limit_in_tool": True}
    assert invariants.check(completed_send_turn(), [send_row("c1")], **kwargs) == []


def test_check_reports_the_new_stream_invariants() -> None:
    late = stream(("2-3", "run_started", "r3", {}))
    found = invariants.check(
        [*completed_send_turn(), *late], [send_row("c1")], status="stopped", code="crashed",
        soft_limit_in_tool=False,
    )  # fmt: skip
    assert "2-3 run_started follows the last turn_ended (2-2)" in found
    assert "run r3 (started at 2-3) has no run_ended after it" in found
    assert "the metadata says 'stopped', the last turn_ended 'completed'" in found
    assert "the turn stopped (crashed) without can_continue" in found


def test_a_repeated_write_is_a_duplicate_check_not_another_violation() -> None:
    """A naive run reports it as a duplicate, and the rest of the turn still passes."""
    effects = [send_row("c1"), send_row("c1")]
    kwargs = {"status": "completed", "code": "", "soft_limit_in_tool": False}
    duplicates = invariants.duplicate_checks(completed_send_turn(), effects)
    assert duplicates == ["chaos_send ran 2 times: ('ada@example.com', 'Launch', None)"]
    assert invariants.other_checks(completed_send_turn(), effects, **kwargs) == []
    assert invariants.check(completed_send_turn(), effects, **kwargs) == duplicates


def test_the_naive_table_counts_duplicate_effects_and_the_trials_with_one() -> None:
    def trial(fault: str, duplicates: int) -> Outcome:
        turn = TurnResult("completed", "", False, 0, False, duplicates)
        return Outcome(fault, [turn], 1.0, True)

    outcomes = [trial("drop (background)", 2), trial("drop (background)", 0), trial("a (x)", 1)]
    rows = [line.split() for line in naive_table(outcomes).splitlines()[2:]]
    assert rows == [["a", "(x)", "1", "1", "1"], ["drop", "(background)", "2", "2", "1"],
                    ["all", "3", "3", "2"]]  # fmt: skip


# -- approvals: no write without an approve for its signature, none twice on one -------------


def asked(approval_id: str, call_id: str, sid: str) -> tuple[str, str, str, dict[str, Any]]:
    fields = {"approval_id": approval_id, "call_id": call_id, "tool": "chaos_send",
              "input": SEND, "signature": input_signature(SEND), "expires_at": 9.0}  # fmt: skip
    return (sid, "approval_requested", "r1", fields)


def decision(approval_id: str, sid: str, what: str = "approve") -> tuple[str, str, str, Any]:
    return (sid, "approval_decided", "dres", {"approval_id": approval_id, "decision": what})


def approved_start(
    call_id: str, sid: str, approval_id: str | None = "a1", data: dict[str, Any] = SEND
) -> tuple[str, str, str, dict[str, Any]]:
    fields = {"call_id": call_id, "tool": "chaos_send", "input": data,
              "signature": input_signature(data), "approval_id": approval_id}  # fmt: skip
    return (sid, "tool_start", "r2", fields)


def approval_events(*items: tuple[str, str, str, dict[str, Any]]) -> list[Any]:
    return events(stream(opening(), *items))


def test_a_write_run_once_on_its_approve_passes() -> None:
    found = approval_events(asked("a1", "c1", "1-1"), decision("a1", "1-2"),
                            approved_start("c1", "2-1"))  # fmt: skip
    assert invariants.approval_checks(found, [send_row("c1")]) == []


def test_a_denied_call_that_ran_nothing_passes_and_one_with_an_effect_does_not() -> None:
    found = approval_events(asked("a1", "c1", "1-1"), decision("a1", "1-2", "deny"))
    assert invariants.approval_checks(found, []) == []
    assert invariants.approval_checks(found, [send_row("c1")]) == [
        "chaos_send call c1 ran though its approval was denied"
    ]


def test_a_write_without_an_approval_id_is_a_violation_but_a_read_needs_none() -> None:
    found = approval_events(approved_start("c1", "1-1", approval_id=None))
    assert invariants.approval_checks(found, [send_row("c1")]) == [
        "chaos_send call c1 ran without an approval"
    ]
    read = {"tool": "chaos_read", "call_id": "c9"}
    assert invariants.approval_checks(approval_events(), [read]) == []


def test_a_write_started_before_its_approve_or_on_an_expired_request_is_a_violation() -> None:
    early = approval_events(asked("a1", "c1", "1-1"), approved_start("c1", "1-2"),
                            decision("a1", "1-3"))  # fmt: skip
    assert invariants.approval_checks(early, [send_row("c1")]) == [
        "chaos_send call c1 ran on approval a1, decided not yet"
    ]
    expired = approval_events(asked("a1", "c1", "1-1"), decision("a1", "1-2", "expired"),
                              approved_start("c1", "2-1"))  # fmt: skip
    assert invariants.approval_checks(expired, [send_row("c1")]) == [
        "chaos_send call c1 ran on approval a1, decided expired"
    ]


def test_a_write_run_with_other_input_than_the_approved_is_a_violation() -> None:
    other = {**SEND, "to": "bob@example.com"}
    found = approval_events(asked("a1", "c1", "1-1"), decision("a1", "1-2"),
                            approved_start("c1", "2-1", data=other))  # fmt: skip
    assert invariants.approval_checks(found, [send_row("c1")]) == [
        "chaos_send call c1 ran on approval a1, requested for another call"
    ]
    unasked = approval_events(approved_start("c1", "2-1", approval_id="a7"))
    assert invariants.approval_checks(unasked, [send_row("c1")]) == [
        "chaos_send call c1 ran on approval a7, which was never requested"
    ]


def test_one_approval_used_by_two_executions_is_a_violation() -> None:
    """Two effect rows of one call_id: the approved call ran twice (``chaos.tools`` logs one
    row per execution, so a second execution under the request's call_id shows)."""
    once = approval_events(asked("a1", "c1", "1-1"), decision("a1", "1-2"),
                           approved_start("c1", "2-1"))  # fmt: skip
    assert invariants.approval_checks(once, [send_row("c1"), send_row("c1")]) == [
        "approval a1 took effect 2 times"
    ]
    twice = [*once, *events(stream(approved_start("c2", "3-1")))]
    assert invariants.approval_checks(twice, [send_row("c1")]) == [
        "approval a1 named by 2 tool_starts"
    ]


CHARGE = {"amount": 5}


def charge_start(call_id: str, sid: str, approval_id: str | None) -> tuple[str, str, str, Any]:
    fields = {"call_id": call_id, "tool": "chaos_charge", "input": CHARGE,
              "signature": input_signature(CHARGE), "approval_id": approval_id}  # fmt: skip
    return (sid, "tool_start", "r2", fields)


def charge_asked() -> tuple[str, str, str, dict[str, Any]]:
    fields = {"approval_id": "a1", "call_id": "c1", "tool": "chaos_charge", "input": CHARGE,
              "signature": input_signature(CHARGE), "expires_at": 9.0}  # fmt: skip
    return ("1-1", "approval_requested", "r1", fields)


def test_an_idempotent_retry_of_an_interrupted_approved_call_runs_on_its_approval() -> None:
    """The approved charge is cut off after its effect; the resumed run retries it (a new
    call_id, no new request, the same key): two attempts, one application, one approval."""
    found = approval_events(charge_asked(), decision("a1", "1-2"), charge_start("c1", "2-1", "a1"),
                            charge_start("c2", "3-1", None))  # fmt: skip
    effects = [charge_row("c1", True), charge_row("c2", False)]
    assert invariants.approval_checks(found, effects) == []
    applied_twice = [charge_row("c1", True), charge_row("c2", True)]
    assert invariants.approval_checks(found, applied_twice) == ["approval a1 took effect 2 times"]


def test_a_retry_with_no_approved_start_before_it_or_of_a_plain_write_is_a_violation() -> None:
    unasked = approval_events(charge_start("c2", "3-1", None))
    assert invariants.approval_checks(unasked, [charge_row("c2", True)]) == [
        "chaos_charge call c2 ran without an approval"
    ]
    plain = approval_events(asked("a1", "c1", "1-1"), decision("a1", "1-2"),
                            approved_start("c1", "2-1"),
                            approved_start("c2", "3-1", approval_id=None))  # fmt: skip
    assert invariants.approval_checks(plain, [send_row("c2")]) == [
        "chaos_send call c2 ran without an approval"
    ]
