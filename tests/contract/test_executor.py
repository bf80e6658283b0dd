"""The tool executor: recording, errors, and layer 2 on resumed attempts (docs/tools.md,
docs/semantics.md-7.6).

Each test runs a turn in-process on fakeredis and on a real redis-server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
from harness import Harness
from sample_tools import effects

from ledger.events import ToolBlocked, ToolDone, ToolStart
from worker.demo_tools import outbox, tickets

EMAIL = {"to": "ada@example.com", "subject": "Launch", "body": "Friday at 10."}


def call(name: str, data: dict[str, Any], text: str = "") -> dict[str, Any]:
    return {"text": text, "tool_calls": [{"name": name, "input": data}]}


def step(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": n, "input": d} for n, d in calls]}


#: a step whose delay the simulated soft limit cuts (it has a call, so it does not end the turn)
PAUSE = {"delay_s": 10, "tool_calls": [{"name": "async_lookup", "input": {"key": "pause"}}]}
DONE = {"text": "Done."}


@pytest.fixture
def h(client: redis.Redis, tmp_path: Path) -> Harness:
    return Harness(client, tmp_path)


def blocked(h: Harness) -> list[ToolBlocked]:
    return [e for e in h.events("tool_blocked") if isinstance(e, ToolBlocked)]


def test_a_call_is_recorded_as_tool_start_before_and_tool_done_after(h: Harness) -> None:
    h.start([call("send_email", EMAIL), DONE])
    assert h.run_to_end().status == "completed"
    start, done = h.events("tool_start", "tool_done")
    assert isinstance(start, ToolStart) and isinstance(done, ToolDone)
    assert (start.tool, start.input, start.read_only) == ("send_email", EMAIL, False)
    assert done.call_id == start.call_id and not done.is_error
    assert done.result["sent"] is True
    assert len(outbox(h.client)) == 1


def test_a_resumed_run_does_not_rerun_a_completed_write_and_returns_its_result(h: Harness) -> None:
    """restart mode: the model re-issues the completed send_email after the soft limit."""
    h.start([call("send_email", EMAIL), PAUSE, DONE], on_resume="restart")
    assert h.run_next(soft_limit_after=5) is None
    assert h.run_to_end().status == "completed"
    assert len(outbox(h.client)) == 1
    [block] = blocked(h)
    first_done = h.events("tool_done")[0]
    assert block.reason == "completed" and block.matched_call_id == first_done.call_id
    assert block.result["status"] == "already_completed"
    assert block.result["result"] == first_done.result  # type: ignore[attr-defined]
    assert "not run again" in block.result["note"]


def test_a_read_only_tool_is_never_blocked(h: Harness) -> None:
    h.start([call("list_outbox", {}), PAUSE, DONE], on_resume="restart")
    h.run_next(soft_limit_after=5)
    h.run_to_end()
    dones = [e.tool for e in h.events("tool_done")]  # type: ignore[attr-defined]
    assert dones.count("list_outbox") == 2
    assert blocked(h) == []


def test_a_write_with_different_input_after_resume_runs(h: Harness) -> None:
    other = {**EMAIL, "to": "bob@example.com"}
    h.start([call("send_email", EMAIL), PAUSE, call("send_email", other), DONE])
    h.run_next(soft_limit_after=5)
    h.run_to_end()
    assert [m["to"] for m in outbox(h.client)] == ["ada@example.com", "bob@example.com"]
    assert blocked(h) == []


def test_two_identical_fresh_writes_after_one_completed_call_short_circuit_exactly_one(
    h: Harness,
) -> None:
    """Consume-once: a completed entry answers one repeat; the second identical call runs."""
    h.start(
        [call("send_email", EMAIL), PAUSE, step(("send_email", EMAIL), ("send_email", EMAIL)), DONE]
    )
    h.run_next(soft_limit_after=5)
    h.run_to_end()
    assert len(blocked(h)) == 1
    assert len(outbox(h.client)) == 2


def test_matching_is_by_content_not_position(h: Harness) -> None:
    """A repeat blocks whatever step it comes in, and key order in the input does not matter."""
    reordered = {"body": EMAIL["body"], "subject": EMAIL["subject"], "to": EMAIL["to"]}
    h.start(
        [
            call("send_email", EMAIL),
            PAUSE,
            call("list_outbox", {}),
            call("send_email", reordered),
            DONE,
        ]
    )
    h.run_next(soft_limit_after=5)
    h.run_to_end()
    assert len(outbox(h.client)) == 1 and len(blocked(h)) == 1


def test_a_reworded_write_with_the_same_identity_is_refused(h: Harness) -> None:
    reworded = {**EMAIL, "body": "Friday at 10, bring snacks."}
    h.start([call("send_email", EMAIL), PAUSE, call("send_email", reworded), DONE])
    h.run_next(soft_limit_after=5)
    h.run_to_end()
    assert len(outbox(h.client)) == 1
    [block] = blocked(h)
    assert block.reason == "identity" and block.is_error
    assert block.result["completed_call"]["input"] == EMAIL
    assert "to and subject" in block.result["error"]


def test_a_first_run_blocks_nothing(h: Harness) -> None:
    h.start([step(("send_email", EMAIL), ("send_email", EMAIL)), DONE])
    h.run_to_end()
    assert len(outbox(h.client)) == 2 and blocked(h) == []


# -- interrupted writes (docs/semantics.md)
# -----------------------------------------------------------------


def test_an_identical_retry_of_an_interrupted_write_is_refused_with_a_verify_request(
    h: Harness,
) -> None:
    h.start([call("write_then_die", {"label": "x"}), DONE], on_resume="restart")
    assert h.run_next() is None  # cut off between the side effect and tool_done
    h.run_to_end()
    assert len(effects(h.client, "write_then_die")) == 1
    [block] = blocked(h)
    assert block.reason == "interrupted" and block.is_error
    assert "list_outbox" in block.result["error"] and "Verify" in block.result["error"]


def test_an_idempotent_interrupted_write_is_retried_with_the_same_key(h: Harness) -> None:
    h.start([call("charge", {"amount": 5}), DONE], on_resume="restart")
    first = _interrupt_during(h, "charge")
    h.run_to_end()
    keys = [e["key"] for e in effects(h.client, "charge")]
    assert len(keys) == 2 and keys[0] == keys[1] == first
    assert blocked(h) == []
    journal_dones = [e for e in h.events("tool_done") if e.tool == "charge"]  # type: ignore[attr-defined]
    assert [d.is_error for d in journal_dones] == [
        False,
        True,
    ]  # the retry, then the superseded start


def _interrupt_during(h: Harness, tool_name: str) -> str:
    """Run the first chunk with ``tool_name`` cut off after its side effect; return its key."""
    spec = h.registry.tools[tool_name]
    original = spec.fn

    def die_after(*args: Any, **kwargs: Any) -> Any:
        original(*args, **kwargs)
        from sample_tools import SimulatedSoftLimit

        raise SimulatedSoftLimit("cut off after the side effect")

    object.__setattr__(spec, "fn", die_after)
    try:
        assert h.run_next() is None
    finally:
        object.__setattr__(spec, "fn", original)
    return str(effects(h.client, tool_name)[-1]["key"])


def test_reconcile_landed_counts_the_interrupted_call_as_completed_and_runs_nothing(
    h: Harness,
) -> None:
    h.start([call("book", {"room": "A"}), DONE], on_resume="restart")
    _interrupt_during(h, "book")
    h.run_to_end()
    assert len(effects(h.client, "book")) == 1
    [block] = blocked(h)
    assert block.reason == "reconciled" and not block.is_error
    assert block.result == {"booked": "A", "reconciled": True}
    from ledger.journal import build_journal

    journal = build_journal(h.events())
    assert [e.tool for e in journal.completed] == ["book"] and journal.interrupted == []


def test_reconcile_not_landed_runs_the_call(h: Harness) -> None:
    h.start([call("book", {"room": "B"}), DONE], on_resume="restart")
    _interrupt_during(h, "book")
    h.client.delete("test:effects")  # the outside world shows the booking never happened
    h.run_to_end()
    assert len(effects(h.client, "book")) == 1 and blocked(h) == []


def test_reconcile_unknown_refuses_the_retry(h: Harness) -> None:
    h.start([call("book", {"room": "unknowable"}), DONE], on_resume="restart")
    _interrupt_during(h, "book")
    h.run_to_end()
    assert len(effects(h.client, "book")) == 1
    assert [b.reason for b in blocked(h)] == ["interrupted"]


def test_the_idempotency_key_is_stable_across_resumes_and_differs_per_occurrence(
    h: Harness,
) -> None:
    h.start(
        [call("create_ticket", {"title": "A"}), PAUSE, call("create_ticket", {"title": "A"}), DONE]
    )
    h.run_next(soft_limit_after=5)
    h.run_to_end()
    # continue mode: the second identical call is blocked (consume-once), so one ticket exists.
    assert len(tickets(h.client)) == 1 and len(blocked(h)) == 1


# -- errors ------------------------------------------------------------------------------------


def test_an_unknown_tool_gets_an_error_result_listing_the_known_tools(h: Harness) -> None:
    h.start([call("send_fax", {"to": "x"}), DONE])
    h.run_to_end()
    done = h.events("tool_done")[0]
    assert done.is_error and "unknown tool 'send_fax'" in done.result["error"]  # type: ignore[attr-defined]
    assert "send_email" in done.result["error"] and "list_outbox" in done.result["error"]  # type: ignore[attr-defined]


def test_invalid_input_gets_an_error_naming_the_field_and_runs_nothing(h: Harness) -> None:
    h.start([call("send_email", {"to": "ada@example.com", "subject": "Hi"}), DONE])
    h.run_to_end()
    done = h.events("tool_done")[0]
    assert done.is_error and "body" in done.result["error"]  # type: ignore[attr-defined]
    assert outbox(h.client) == []


def test_an_unexpected_input_field_is_named(h: Harness) -> None:
    h.start([call("list_outbox", {"limit": 3}), DONE])
    h.run_to_end()
    assert "limit" in h.events("tool_done")[0].result["error"]  # type: ignore[attr-defined]


def test_a_raised_exception_becomes_a_recorded_error_result_and_the_turn_goes_on(
    h: Harness,
) -> None:
    h.start([call("broken_write", {"value": 7}), DONE])
    assert h.run_to_end().status == "completed"
    done = h.events("tool_done")[0]
    assert done.is_error and done.result == {"error": "ValueError: provider rejected 7"}  # type: ignore[attr-defined]


def test_an_async_tool_runs(h: Harness) -> None:
    h.start([call("async_lookup", {"key": "k"}), DONE])
    h.run_to_end()
    assert h.events("tool_done")[0].result == {"key": "k", "found": False}  # type: ignore[attr-defined]
