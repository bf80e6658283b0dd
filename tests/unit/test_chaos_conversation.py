"""The conversation trials' invariants are pure checks over hand-built turns of one conversation
(chaos.conversation_checks); what the trials draw, and how their tables read."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from chaos import conversation_checks as checks
from chaos import invariants
from chaos.cluster import GEVENT
from chaos.conversations import CONVERSATION_FAULTS, action_table, counts
from chaos.report import Outcome, TurnResult
from chaos.runner import drawn
from chaos.trial import APPROVAL, CONVERSATION, NOT_UNDER_GEVENT, SECONDS, VIAS, Trial
from ledger.codec import Envelope
from ledger.events import (
    RunEnded,
    RunStarted,
    ToolBlocked,
    ToolDone,
    ToolStart,
    TurnContext,
    TurnEnded,
    TurnStarted,
)
from ledger.signature import input_signature

SEND = {"to": "ada@example.com", "subject": "Launch", "body": "Friday at 10."}
SEND_SIG = input_signature(SEND)
SEND_ROW = {"tool": "chaos_send", "to": "ada@example.com", "subject": "Launch"}
SEEN_A = {"turn_id": "A", "message": "hi", "answer": "All done."}


class Turn:
    """A hand-built turn: events appended with the ts given, stream ids in order."""

    def __init__(self, turn_id: str, ts: float = 0.0, **started: Any) -> None:
        self.turn_id = turn_id
        self.envelopes: list[Envelope] = []
        self.effects: list[dict[str, Any]] = []
        self.add(TurnStarted, "control", ts, conversation_id="c1", message="hi", **started)

    def add(self, cls: type[Any], run_id: str, ts: float, **fields: Any) -> Turn:
        n = len(self.envelopes)
        base = {"event_id": f"{self.turn_id}-{n}", "turn_id": self.turn_id, "run_id": run_id}
        self.envelopes.append(Envelope(f"0-{n + 1}", cls(**base, chunk=0, ts=ts, **fields)))
        return self

    def run(self, run_id: str, start: float, end: float | None) -> Turn:
        self.add(RunStarted, run_id, start)
        if end is not None:
            self.add(RunEnded, run_id, end, reason="completed")
        return self

    def start(self, run_id: str, ts: float, tool: str = "chaos_send", sig: str = SEND_SIG) -> Turn:
        return self.add(
            ToolStart, run_id, ts, call_id=f"{self.turn_id}-c", tool=tool, signature=sig
        )

    def effect(self, **row: Any) -> Turn:
        self.effects.append({"call_id": f"{self.turn_id}-c", "key": "", **row})
        return self

    def view(self, status: str = "completed", code: str = "", replaced_by: str = "") -> Any:
        return checks.TurnView(
            self.turn_id, self.envelopes, self.effects, status, code, replaced_by
        )


# -- never two runs of one conversation at once ---------------------------------------------------


def test_turns_whose_runs_follow_one_another_do_not_overlap() -> None:
    a = Turn("A").run("r1", 1.0, 2.0).run("r2", 2.5, 3.0)
    b = Turn("B", 1.5).run("r3", 3.1, 4.0)
    assert checks.runs_never_overlap([a.view(), b.view()]) == []


def test_a_run_started_before_another_turns_run_ended_is_a_violation() -> None:
    a = Turn("A").run("r1", 1.0, 3.0)
    b = Turn("B", 1.5).run("r2", 2.0, 4.0)
    assert checks.runs_never_overlap([a.view(), b.view()]) == [
        "run r1 of A (1.000 to 3.000) overlaps run r2 of B (2.000 to 4.000)"
    ]


def test_a_run_never_closed_spans_on_past_any_later_run() -> None:
    a = Turn("A").run("r1", 1.0, None)
    b = Turn("B").run("r2", 9.0, 10.0)
    assert checks.runs_never_overlap([a.view(), b.view()]) == [
        "run r1 of A (1.000 to never ended) overlaps run r2 of B (9.000 to 10.000)"
    ]


def test_a_dead_run_ends_where_its_takeover_ended_it() -> None:
    """A zombie fenced out appends nothing after its takeover: its span is the ledger's."""
    a = Turn("A").run("r1", 1.0, None).add(RunEnded, "r1", 2.0, reason="crashed")
    a.run("r2", 2.1, 3.0)
    b = Turn("B").run("r3", 3.2, 4.0)
    assert checks.runs_never_overlap([a.view(), b.view()]) == []


def test_an_event_written_for_a_run_after_its_run_ended_stretches_its_span() -> None:
    a = Turn("A").run("r1", 1.0, 2.0).add(TurnEnded, "r1", 3.5, status="completed")
    b = Turn("B").run("r2", 3.0, 4.0)
    assert len(checks.runs_never_overlap([a.view(), b.view()])) == 1


def test_runs_of_one_turn_are_not_compared_with_each_other() -> None:
    a = Turn("A").run("r1", 1.0, 3.0).run("r2", 2.0, 4.0)  # the per-turn checks' concern
    assert checks.runs_never_overlap([a.view()]) == []


# -- no write twice across a fork -----------------------------------------------------------------


def fork_of(a: str, turn_id: str = "F") -> Turn:
    return Turn(turn_id, fork_of=a, inherits=(a,), replaces=(a,))


def test_a_new_message_may_repeat_a_write_a_fork_may_not() -> None:
    a = Turn("A").start("r1", 1.0).effect(**SEND_ROW)
    b = Turn("B").start("r2", 2.0).effect(**SEND_ROW)
    assert checks.no_write_twice_across_forks([a.view(), b.view()]) == []
    f = fork_of("A").start("r3", 2.0).effect(**SEND_ROW)
    assert checks.no_write_twice_across_forks([a.view(), f.view()]) == [
        "chaos_send ran again in fork F, inheriting A: ['ada@example.com', 'Launch', None]",
        f"chaos_send started again in fork F, inheriting A (signature {SEND_SIG})",
    ]


def test_a_fork_answered_from_the_record_is_no_repeat() -> None:
    a = Turn("A").start("r1", 1.0).effect(**SEND_ROW)
    f = fork_of("A").add(
        ToolBlocked, "r3", 2.0, tool="chaos_send", signature=SEND_SIG, reason="completed",
        inherited_from="A",
    )  # fmt: skip
    assert checks.no_write_twice_across_forks([a.view(), f.view()]) == []


def test_an_interrupted_write_started_again_in_a_fork_is_a_violation() -> None:
    a = Turn("A").start("r1", 1.0)  # no effect logged: its outcome is unknown
    f = fork_of("A").start("r3", 2.0)
    assert checks.no_write_twice_across_forks([a.view(), f.view()]) == [
        f"chaos_send started again in fork F, inheriting A (signature {SEND_SIG})"
    ]


def test_a_fork_of_a_fork_inherits_both() -> None:
    a = Turn("A").start("r1", 1.0).effect(**SEND_ROW)
    f = fork_of("A")
    g = Turn("G", fork_of="F", inherits=("A", "F"), replaces=("F",))
    g.start("r4", 3.0).effect(**SEND_ROW)
    assert len(checks.no_write_twice_across_forks([a.view(), f.view(), g.view()])) == 2


def test_an_idempotent_write_may_run_again_in_a_fork_with_its_key_and_no_second_charge() -> None:
    charge = {"tool": "chaos_charge", "amount": 5}
    a = Turn("A").effect(**charge, key="k-A", applied=True)
    same = fork_of("A").effect(**charge, key="k-A", applied=False)
    assert checks.no_write_twice_across_forks([a.view(), same.view()]) == []
    other = fork_of("A").effect(**charge, key="k-F", applied=True)
    assert checks.no_write_twice_across_forks([a.view(), other.view()]) == [
        "chaos_charge of 5 ran with a new key in fork F, inheriting A",
        "chaos_charge of 5 applied again in fork F, inheriting A",
    ]


def test_a_fork_names_what_it_replaces_and_each_is_marked_replaced_by_it() -> None:
    a, f = Turn("A"), fork_of("A")
    assert checks.forks_recorded([a.view(replaced_by="F"), f.view()]) == []
    assert checks.forks_recorded([a.view(), f.view()]) == ["A is not marked replaced by fork F"]
    bare = Turn("F", fork_of="A", replaces=("A",))
    assert checks.forks_recorded([a.view(replaced_by="F"), bare.view()]) == [
        "fork F does not inherit A"
    ]


def with_context(turn: Turn, *earlier: str) -> Turn:
    seen = [{"turn_id": t, "message": "hi", "answer": "done"} for t in earlier]
    return turn.add(TurnContext, "control", 1.0, earlier_turns=seen).run("r", 1.1, 1.2)


def test_a_turn_sees_the_earlier_turns_no_fork_replaced() -> None:
    a = Turn("A").run("r1", 0.1, 0.2)  # started its conversation: no context event
    queued = with_context(Turn("B"), "A")
    assert checks.context_leaves_out_replaced([a.view(), queued.view()]) == []
    blind = with_context(Turn("B"))
    assert checks.context_leaves_out_replaced([a.view(), blind.view()]) == [
        "B saw [] as its earlier turns, not ['A']"
    ]
    fork = with_context(fork_of("A"))
    assert checks.context_leaves_out_replaced([a.view(replaced_by="F"), fork.view()]) == []
    sees_replaced = with_context(fork_of("A"), "A")
    assert checks.context_leaves_out_replaced([a.view(replaced_by="F"), sees_replaced.view()]) == [
        "F saw ['A'] as its earlier turns, not []"
    ]
    held = Turn("B")  # never let through: nothing seen to judge
    assert checks.context_leaves_out_replaced([a.view(), held.view()]) == []


# -- superseded, and no write after ---------------------------------------------------------------


def test_a_turn_superseded_with_no_fork_or_interrupting_message_is_a_violation() -> None:
    views = [Turn("A").view("stopped", "superseded"), Turn("B").view()]
    assert checks.superseded_only_by_a_later_message(views, {"A": "B"}) == []
    assert checks.superseded_only_by_a_later_message(views, {}) == [
        "A stopped superseded, but no fork replaced it and no message interrupted it"
    ]
    replaced = [Turn("A").view("stopped", "superseded", replaced_by="F"), fork_of("A").view()]
    assert checks.check(replaced) == []


def test_a_write_started_after_the_interrupting_message_was_recorded_is_a_violation() -> None:
    a = (
        Turn("A")
        .start("r1", 1.0)
        .start("r1", 2.5, "chaos_note", "n")
        .start("r1", 3.0, "chaos_read")
    )
    b = Turn("B", 2.0)
    assert checks.no_write_after_superseded([a.view(), b.view()], {"A": "B"}) == [
        "chaos_note of A started at 2.500, after B was recorded at 2.000"
    ]  # the read may start: only a write's tool_start waits for the Stop flag
    assert checks.no_write_after_superseded([a.view(), b.view()], {}) == []


# -- the list -------------------------------------------------------------------------------------


def test_the_list_holds_the_turns_sent_and_a_retry_records_nothing() -> None:
    assert checks.listed_as_sent(["A", "B"], ["A", "B"]) == []
    assert checks.listed_as_sent(["A", "B", "C"], ["A", "B"]) == [
        "the conversation lists ['A', 'B', 'C'], the trial sent ['A', 'B']"
    ]
    assert checks.retry_started_nothing("A", "A", ["A"]) == []
    assert checks.retry_started_nothing("B", "A", ["A", "B"]) == [
        "the same message again returned B, not its turn A",
        "the same message again recorded B",
    ]


def test_a_turn_no_longer_the_newest_may_end_stopped_without_continue() -> None:
    assert invariants.terminal("stopped", False, "superseded", newest=False) == []
    assert invariants.terminal("stopped", False, "superseded") != []
    assert invariants.terminal("running", False, newest=False) != []


def test_a_whole_conversation_of_a_queue_is_clean() -> None:
    a = Turn("A").run("r1", 1.0, None).start("r1", 1.1).effect(**SEND_ROW)
    a.add(ToolDone, "r1", 1.2, call_id="A-c", tool="chaos_send").add(
        RunEnded, "r1", 1.3, reason="completed"
    )
    b = Turn("B", 1.15).add(TurnContext, "control", 1.35, earlier_turns=[SEEN_A])
    b.run("r2", 1.4, 2.0).start("r2", 1.5).effect(**SEND_ROW)
    assert checks.check([a.view(), b.view()]) == []


# -- draws and tables -----------------------------------------------------------------------------


def test_conversation_trials_are_asked_for_alone_and_draw_every_second_message() -> None:
    assert drawn([CONVERSATION]) == CONVERSATION_FAULTS
    with pytest.raises(ValueError, match="alone"):
        drawn([CONVERSATION, "kill_child"])
    with pytest.raises(ValueError, match="alone"):
        drawn([CONVERSATION, APPROVAL])
    rng = random.Random(4)
    trials = [
        Trial.draw(rng, naive=False, faults=CONVERSATION_FAULTS, conversation=True)
        for _ in range(120)
    ]
    assert {t.second.action for t in trials} == set(SECONDS)
    assert {t.second.via for t in trials} == set(VIAS)
    assert {t.second.line for t in trials} == {True, False}
    assert {t.second.slow_s > 0 for t in trials} == {True, False}
    assert {t.second.at_fault for t in trials} == {True, False}
    plain = [t for t in trials if t.point.startswith("tool.") and not t.second.hits_later]
    assert plain and all(t.skip < 3 for t in plain)  # the fault aims at the first turn
    assert {t.second.action for t in trials if t.second.hits_later} <= {"queue", "interrupt"}
    assert all(t.fault.startswith(f"{t.second.action}/") for t in trials)
    assert not any(Trial.draw(random.Random(1), naive=False).second.action for _ in range(20))


def test_a_gevent_conversation_run_draws_no_pool_child_kill_nor_sigusr1_soft_limit() -> None:
    faults = drawn([CONVERSATION], GEVENT)
    assert faults and all(action not in NOT_UNDER_GEVENT for action, _ in faults)
    assert set(faults) == {f for f in CONVERSATION_FAULTS if f[0] not in NOT_UNDER_GEVENT}


def result(status: str, code: str = "", can_continue: bool = False) -> TurnResult:
    return TurnResult(status, code, can_continue, 0, False, 0)


def test_a_conversation_trial_ends_as_its_newest_turn_and_tables_by_second_message() -> None:
    line = Counter({"while live": 1, "superseded": 1})
    interrupted = Outcome(
        "interrupt/none (background)",
        [result("stopped", "superseded"), result("completed")],
        1.0,
        False,
        line=line,
    )
    assert interrupted.status == "completed" and interrupted.can_continue
    plain = Outcome("kill_child", [result("stopped", "superseded"), result("completed")], 1.0, True)
    assert plain.status == "stopped"  # another kind's trial ends as its first unfinished turn
    table = action_table([interrupted, interrupted]).splitlines()
    assert table[0].split()[:4] == ["second", "message", "trials", "while"]
    assert table[2].split()[:4] == ["interrupt", "2", "2", "0"]


def test_a_trials_counts_say_what_a_fork_met_of_the_journal_it_inherits() -> None:
    charge = {"tool": "chaos_charge", "amount": 5, "key": "k-A"}
    a = Turn("A").effect(**charge, applied=True)
    f = fork_of("A").effect(**charge, applied=False)
    for reason in ("completed", "interrupted"):
        f.add(
            ToolBlocked, "r3", 2.0, tool="chaos_send", signature=SEND_SIG, reason=reason,
            inherited_from="A",
        )  # fmt: skip
    found = counts([a.view("stopped", "superseded", "F"), f.view()], live=True, via="chat")
    assert found == Counter(
        {
            "while live": 1,
            "via chat": 1,
            "slow writes": 0,
            "superseded": 1,
            "inherited blocks": 2,
            "of them interrupted": 1,
            "same-key retries": 1,
            "newest completed": 1,
        }
    )
