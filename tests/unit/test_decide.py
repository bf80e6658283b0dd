"""Layer 2's decision (docs/semantics.md) with plain values: journal entries built by hand.

``decide`` reads a prepared call and the attempt and returns what to do; it changes nothing. What
a decision claims is applied here by hand, as the executor's acting step does.
"""

from __future__ import annotations

from typing import Any

from ledger.journal import Journal, JournalEntry
from ledger.signature import input_signature
from worker.engine.models.base import ToolCall
from worker.engine.tools import Reconciliation, Registry, ToolContext, tool
from worker.engine.tools.calls import (
    ALREADY_COMPLETED,
    HERE,
    INHERITED,
    Attempt,
    Block,
    PreparedCall,
    Reconcile,
    Refuse,
    Run,
    decide,
    prepare,
)

EMAIL = {"to": "ada@example.com", "subject": "Launch", "body": "Friday at 10."}
SENT = {"sent": True, "id": "m1"}


@tool(identity=["to", "subject"])
def send_email(to: str, subject: str, body: str) -> dict[str, Any]:
    return {}


@tool
def post_note(text: str) -> dict[str, Any]:
    return {}


@tool(idempotent=True)
def charge(amount: int) -> dict[str, Any]:
    return {}


def _cannot_tell(data: dict[str, Any], ctx: ToolContext) -> Reconciliation:
    return Reconciliation.unknown()


@tool(reconcile=_cannot_tell)
def book(room: str) -> dict[str, Any]:
    return {}


@tool(read_only=True)
def list_outbox() -> list[dict[str, Any]]:
    return []


REGISTRY = Registry().add(send_email, post_note, charge, book, list_outbox)


def call(name: str, data: dict[str, Any]) -> PreparedCall:
    prepared = prepare(REGISTRY, ToolCall(name, data, provider_id="toolu_1"), "call_new")
    assert isinstance(prepared, PreparedCall), prepared
    return prepared


def entry(
    name: str, data: dict[str, Any], result: Any = None, call_id: str = "call_old"
) -> JournalEntry:
    return JournalEntry(name, call_id, data, input_signature(data), result=result)


def attempt(
    completed: list[JournalEntry] | None = None, interrupted: list[JournalEntry] | None = None
) -> Attempt:
    return Attempt.begin(Journal(completed or [], interrupted or []))


# -- completed writes ----------------------------------------------------------------------


def test_a_first_run_has_no_journal_and_runs_every_call() -> None:
    assert decide(call("send_email", EMAIL), Attempt.begin(None)) == Run()


def test_an_exact_repeat_of_a_completed_write_is_blocked_with_its_recorded_result() -> None:
    done = entry("send_email", EMAIL, SENT)

    decision = decide(call("send_email", EMAIL), attempt([done]))

    assert isinstance(decision, Block)
    assert decision.entry is done and decision.reason == "completed" and decision.consumes == 0
    assert decision.result == {
        "status": "already_completed",
        "note": ALREADY_COMPLETED.format(where=HERE),
        "result": SENT,
    }


def test_a_repeat_of_a_write_a_fork_inherited_is_said_to_come_from_the_replaced_answer() -> None:
    """The entry was recorded in the turn the fork replaces: the note says so, not "an earlier
    attempt of this turn"."""
    inherited = JournalEntry(
        "send_email", "call_old", EMAIL, input_signature(EMAIL), result=SENT, turn_id="t-old"
    )
    state = Attempt.begin(Journal([inherited], []), "t-fork")

    decision = decide(call("send_email", EMAIL), state)

    assert isinstance(decision, Block)
    assert decision.result["note"] == ALREADY_COMPLETED.format(where=INHERITED)
    assert "replaces" in decision.result["note"] and "this turn" not in decision.result["note"]
    own = Attempt.begin(Journal([inherited], []), "t-old")
    assert (
        decide(call("send_email", EMAIL), own)
        .result["note"]
        .endswith(  # type: ignore[union-attr]
            "Its recorded result is below."
        )
    )


def test_a_repeat_matches_by_content_whatever_the_order_of_its_input_keys() -> None:
    reordered = {"body": EMAIL["body"], "subject": EMAIL["subject"], "to": EMAIL["to"]}
    decision = decide(call("send_email", reordered), attempt([entry("send_email", EMAIL, SENT)]))
    assert isinstance(decision, Block)


def test_two_identical_calls_after_one_completed_give_one_block_and_one_run() -> None:
    """Each completed entry is claimed once: it answers one repeat, the next one runs."""
    state = attempt([entry("send_email", EMAIL, SENT)])

    first = decide(call("send_email", EMAIL), state)
    assert isinstance(first, Block) and first.consumes is not None
    state.consumed.add(first.consumes)  # what the acting step applies
    second = decide(call("send_email", EMAIL), state)

    assert second == Run()


def test_two_completed_entries_answer_two_repeats_in_journal_order() -> None:
    state = attempt(
        [entry("post_note", {"text": "x"}, 1, "a"), entry("post_note", {"text": "x"}, 2, "b")]
    )
    claimed = []
    for _ in range(3):
        decision = decide(call("post_note", {"text": "x"}), state)
        if isinstance(decision, Block) and decision.consumes is not None:
            state.consumed.add(decision.consumes)
        claimed.append(decision.entry.call_id if isinstance(decision, Block) else "run")
    assert claimed == ["a", "b", "run"]


def test_deciding_changes_nothing_in_the_attempt() -> None:
    state = attempt([entry("send_email", EMAIL, SENT)], [entry("charge", {"amount": 5})])

    first = decide(call("send_email", EMAIL), state)
    again = decide(call("send_email", EMAIL), state)
    decide(call("charge", {"amount": 5}), state)

    assert first == again
    assert state.consumed == set() and state.settled == set()


def test_a_read_only_tool_is_never_blocked() -> None:
    listed = entry("list_outbox", {}, [])
    assert decide(call("list_outbox", {}), attempt([listed], [listed])) == Run()


def test_a_write_with_different_input_runs() -> None:
    other = {**EMAIL, "to": "bob@example.com"}
    assert decide(call("send_email", other), attempt([entry("send_email", EMAIL, SENT)])) == Run()


def test_a_reworded_retry_of_a_tool_without_identity_runs() -> None:
    state = attempt([entry("post_note", {"text": "hello"}, {"ok": True})])
    assert decide(call("post_note", {"text": "hello!"}), state) == Run()


# -- identity ------------------------------------------------------------------------------


def test_a_reworded_retry_of_an_identity_tool_is_refused_with_the_completed_call() -> None:
    done = entry("send_email", EMAIL, SENT)
    reworded = {**EMAIL, "body": "Friday at 10, bring snacks."}

    decision = decide(call("send_email", reworded), attempt([done]))

    assert isinstance(decision, Refuse)
    assert decision.entry is done and decision.reason == "identity"
    assert decision.result["completed_call"] == {"input": EMAIL, "result": SENT}
    assert "to and subject" in decision.result["error"]


def test_a_reworded_retry_is_refused_even_once_its_entry_answered_an_exact_repeat() -> None:
    state = attempt([entry("send_email", EMAIL, SENT)])
    state.consumed.add(0)
    reworded = {**EMAIL, "body": "Friday at 10, bring snacks."}
    decision = decide(call("send_email", reworded), state)
    assert isinstance(decision, Refuse) and decision.reason == "identity"


def test_a_reworded_retry_of_an_interrupted_identity_write_is_refused_as_interrupted() -> None:
    cut = entry("send_email", EMAIL)
    reworded = {**EMAIL, "body": "Friday at 10, bring snacks."}
    decision = decide(call("send_email", reworded), attempt(interrupted=[cut]))
    assert isinstance(decision, Refuse) and decision.reason == "interrupted"
    assert decision.entry is cut


# -- interrupted writes (docs/semantics.md)
# -------------------------------------------------------------


def test_an_identical_retry_of_an_interrupted_plain_write_is_refused_with_a_verify_request() -> (
    None
):
    cut = entry("post_note", {"text": "x"})

    decision = decide(call("post_note", {"text": "x"}), attempt(interrupted=[cut]))

    assert isinstance(decision, Refuse)
    assert decision.entry is cut and decision.reason == "interrupted"
    assert decision.result["interrupted_call"] == {"input": {"text": "x"}}
    assert "Verify" in decision.result["error"] and "list_outbox" in decision.result["error"]


def test_an_identical_retry_of_an_interrupted_idempotent_write_runs_and_supersedes_it() -> None:
    cut = entry("charge", {"amount": 5})
    decision = decide(call("charge", {"amount": 5}), attempt(interrupted=[cut]))
    assert decision == Run(supersedes=(cut,), settles=(0,))


def test_an_idempotent_retry_supersedes_every_identical_interrupted_entry_at_once() -> None:
    """Each earlier retry that was cut in turn ran under the same key: one effect, one close."""
    first, other, second = (
        entry("charge", {"amount": 5}),
        entry("charge", {"amount": 7}),
        entry("charge", {"amount": 5}),
    )
    state = attempt(interrupted=[first, other, second])

    decision = decide(call("charge", {"amount": 5}), state)

    assert decision == Run(supersedes=(first, second), settles=(0, 2))


def test_an_identical_retry_of_an_interrupted_write_with_a_hook_is_reconciled() -> None:
    cut = entry("book", {"room": "A"})

    decision = decide(call("book", {"room": "A"}), attempt(interrupted=[cut]))

    assert isinstance(decision, Reconcile)
    assert decision.entry is cut and decision.settles == 0
    assert decision.otherwise.reason == "interrupted" and decision.otherwise.entry is cut


def test_a_settled_interrupted_write_no_longer_stops_an_identical_call() -> None:
    state = attempt(interrupted=[entry("post_note", {"text": "x"})])
    state.settled.add(0)
    assert decide(call("post_note", {"text": "x"}), state) == Run()


def test_an_exact_repeat_matches_a_completed_entry_before_an_interrupted_one() -> None:
    done, cut = entry("post_note", {"text": "x"}, 1, "a"), entry("post_note", {"text": "x"})
    decision = decide(call("post_note", {"text": "x"}), attempt([done], [cut]))
    assert isinstance(decision, Block) and decision.entry is done


def test_a_prepared_call_keeps_the_provider_id_apart_from_the_ledger_call_id() -> None:
    prepared = call("post_note", {"text": "x"})
    assert (prepared.provider_id, prepared.call_id) == ("toolu_1", "call_new")
