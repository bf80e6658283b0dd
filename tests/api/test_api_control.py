"""Continue and Stop through HTTP (docs/semantics.md, docs/http-api.md), turn status and the
journal.

The stops that Continue acts on are crafted at the ledger level (``crashed_stop``: the turn's
first run is claimed, then taken over as dead by ``TurnControl.take_over``, which for a foreground
turn is ``stop_loudly`` with code crashed and Continue available) so that no worker runs them;
Stop of a running turn and the status across a chunk boundary use a real prefork worker.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest
import redis
from api_support import STATUSES, expected_journal, post_turn, status_of, turn_with_calls

from ledger.journal import build_journal
from ledger.store import Ledger
from rigs import MULTI_CHUNK, Script, WorkerProcess, busy, context_of, crashed_stop, wait_until
from worker.base.settings import Settings
from worker.demo_tools import outbox
from worker.edges.runtime import Runtime


def continue_(http: httpx.Client, turn_id: str, *, auto: bool) -> httpx.Response:
    return http.post(f"/v1/turns/{turn_id}/continue", json={"auto": auto})


def crash_pending_run(rt: Runtime, turn_id: str) -> None:
    """The turn's pending run (queued by a Continue) starts and dies; the reaper's take-over."""
    meta = rt.ledger.meta(turn_id)
    run = rt.lifecycle.claim(turn_id, meta.next_run)
    assert run is not None
    outcome = rt.lifecycle.take_over(rt.ledger.meta(turn_id), "lease expired (test)")
    assert outcome.reason == "stopped: crashed", outcome


# -- Continue -----------------------------------------------------------------------------------


def test_twenty_concurrent_auto_continues_of_a_crashed_stop_get_exactly_one_202(
    http: httpx.Client, runtime: Runtime, rdb: redis.Redis, settings: Settings
) -> None:
    turn_id = crashed_stop(runtime)
    before = status_of(http, turn_id)
    assert (before["status"], before["code"], before["can_continue"]) == (
        "stopped",
        "crashed",
        True,
    )

    barrier = threading.Barrier(20)
    replies: list[httpx.Response | BaseException | None] = [None] * 20

    def ask(i: int) -> None:
        barrier.wait()
        try:
            replies[i] = continue_(http, turn_id, auto=True)
        except BaseException as e:  # reported by the assertions below
            replies[i] = e

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)

    codes = [getattr(reply, "status_code", reply) for reply in replies]
    assert codes.count(202) == 1 and codes.count(409) == 19, codes
    won = next(r for r in replies if isinstance(r, httpx.Response) and r.status_code == 202)
    assert won.json()["run_id"] == runtime.ledger.meta(turn_id).next_run
    for reply in replies:
        if isinstance(reply, httpx.Response) and reply.status_code == 409:
            assert reply.json()["detail"], reply.text
    after = status_of(http, turn_id)
    assert (after["status"], after["auto_continues"], after["can_continue"]) == ("queued", 1, False)
    assert rdb.llen(settings.foreground_queue) == 1  # one run dispatched


def test_continue_of_an_older_stop_in_the_conversation_is_refused_with_409(
    http: httpx.Client, runtime: Runtime
) -> None:
    older = crashed_stop(runtime, conversation_id="conv-two-stops")
    newer = crashed_stop(runtime, conversation_id="conv-two-stops")
    assert status_of(http, older)["can_continue"] is False
    assert status_of(http, newer)["can_continue"] is True

    for auto in (False, True):
        refused = continue_(http, older, auto=auto)
        assert refused.status_code == 409, refused.text
        assert "newest" in refused.json()["detail"]
    assert status_of(http, older)["status"] == "stopped"

    assert continue_(http, newer, auto=False).status_code == 202


def test_automatic_continuation_stops_at_its_limit_but_a_manual_continue_still_works(
    http: httpx.Client, runtime: Runtime, settings: Settings
) -> None:
    turn_id = crashed_stop(runtime)
    for n in range(1, settings.max_auto_continue + 1):
        accepted = continue_(http, turn_id, auto=True)
        assert accepted.status_code == 202, accepted.text
        assert status_of(http, turn_id)["auto_continues"] == n
        crash_pending_run(runtime, turn_id)

    refused = continue_(http, turn_id, auto=True)
    assert refused.status_code == 409
    assert "limit" in refused.json()["detail"]
    assert continue_(http, turn_id, auto=False).status_code == 202


def test_continue_of_a_turn_that_is_not_stopped_is_refused_with_409(http: httpx.Client) -> None:
    turn_id = post_turn(http)["turn_id"]  # no worker: it stays queued
    refused = continue_(http, turn_id, auto=False)
    assert refused.status_code == 409
    assert "not stopped" in refused.json()["detail"]


# -- Stop ---------------------------------------------------------------------------------------


def test_stop_of_a_running_turn_is_accepted_and_the_turn_ends_cancelled_within_two_seconds(
    worker: WorkerProcess, http: httpx.Client, script: Script, ledger: Ledger
) -> None:
    turn_id = post_turn(http, model=script(busy(40)))["turn_id"]
    wait_until(lambda: status_of(http, turn_id)["status"] == "running", what="the turn running")

    stopped_at = time.monotonic()
    reply = http.post(f"/v1/turns/{turn_id}/stop")
    assert reply.status_code == 202, reply.text
    wait_until(
        lambda: status_of(http, turn_id)["code"] == "cancelled",
        timeout=2.0,
        what="the turn cancelled",
    )
    assert time.monotonic() - stopped_at < 2.0
    last = ledger.events(turn_id)[-1]
    assert last.type == "turn_ended"
    assert (last.status, last.code) == ("stopped", "cancelled")  # type: ignore[union-attr]


def test_stop_of_a_turn_that_already_ended_is_refused_with_409(http: httpx.Client) -> None:
    turn_id = post_turn(http)["turn_id"]
    assert http.post(f"/v1/turns/{turn_id}/stop").status_code == 202  # cancelled while queued
    assert (status_of(http, turn_id)["status"], status_of(http, turn_id)["code"]) == (
        "stopped",
        "cancelled",
    )
    refused = http.post(f"/v1/turns/{turn_id}/stop")
    assert refused.status_code == 409
    assert "stopped" in refused.json()["detail"]


# -- status and journal -------------------------------------------------------------------------


def test_a_turn_shows_resuming_between_its_chunks_and_ends_completed_after_two_runs(
    worker: WorkerProcess, http: httpx.Client, script: Script
) -> None:
    """Two turns on one pool process: A's next chunk waits behind B's first, so A is resuming."""
    a = post_turn(http, model=script(MULTI_CHUNK))["turn_id"]
    post_turn(http, model=script([{**MULTI_CHUNK[1], "delay_s": 1.0}, MULTI_CHUNK[2]]))

    seen: list[str] = []

    def finished() -> bool:
        status = status_of(http, a)["status"]
        if not seen or seen[-1] != status:
            seen.append(status)
        return status in {"completed", "stopped"}

    wait_until(finished, timeout=20, what="turn A ended")
    final = status_of(http, a)
    assert seen[-1] == "completed", seen
    assert "resuming" in seen, seen
    assert set(seen) <= STATUSES - {"stopped"}, seen
    assert seen.index("completed") == len(seen) - 1
    assert final["runs"] >= 2 and final["chunk"] >= 1, final
    assert (final["can_continue"], final["code"]) == (False, "")


def test_the_journal_lists_completed_and_interrupted_calls(
    http: httpx.Client, runtime: Runtime
) -> None:
    turn_id = turn_with_calls(runtime)

    reply = http.get(f"/v1/turns/{turn_id}/journal")

    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["turn_id"] == turn_id
    assert {k: body[k] for k in ("completed", "interrupted")} == expected_journal()
    journal = build_journal(runtime.ledger.events(turn_id))
    assert [e.call_id for e in journal.completed] == ["call-1"]
    assert [e.call_id for e in journal.interrupted] == ["call-2"]


# -- a new message after an unfinished turn -----------------------------------------------------


@pytest.mark.parametrize("how", ["cancelled", "stopped"])
def test_a_new_message_after_an_unfinished_turn_carries_a_note_of_its_status(
    http: httpx.Client, runtime: Runtime, ledger: Ledger, how: str
) -> None:
    conversation = f"conv-after-{how}"
    if how == "cancelled":
        first = post_turn(http, "first request", conversation_id=conversation)["turn_id"]
        assert http.post(f"/v1/turns/{first}/stop").status_code == 202
    else:
        first = crashed_stop(runtime, conversation_id=conversation, interrupted_write=True)
    status = status_of(http, first)
    code = "cancelled" if how == "cancelled" else "crashed"
    assert (status["status"], status["code"]) == ("stopped", code)

    second = post_turn(http, "second request", conversation_id=conversation)
    assert second["conversation_id"] == conversation

    events = ledger.events(second["turn_id"])
    started = events[0]
    assert started.type == "turn_started" and started.message == "second request"  # type: ignore[union-attr]
    _, note = context_of(events)
    assert note is not None and f"ended as stopped ({code})" in note, note
    if how == "stopped":
        assert "send_email" in note and "verify" in note, note


SEND = {
    "text": "Emailing Ada.",
    "tool_calls": [
        {"name": "send_email", "input": {"to": "ada@x.io", "subject": "Hi", "body": "hello"}}
    ],
}


@pytest.mark.parametrize("fail", ["rate_limit", "auth"])
def test_continue_after_a_provider_stop_is_202_and_the_resumed_run_uses_both_layers(
    worker: WorkerProcess,
    http: httpx.Client,
    script: Script,
    ledger: Ledger,
    rdb: redis.Redis,
    fail: str,
) -> None:
    """A rate limit (foreground) or a credential error stops the turn with Continue available;
    Continue resumes it, and the model that re-sends the completed email is given the note and
    is blocked: one email."""
    model = script([SEND, {"fail": fail, "text": "…"}, {"text": "Done."}], on_resume="restart")
    turn_id = post_turn(http, model=model)["turn_id"]
    wait_until(lambda: status_of(http, turn_id)["status"] == "stopped", what="the stop")
    stopped = status_of(http, turn_id)
    assert (stopped["code"], stopped["can_continue"]) == (fail, True)
    assert continue_(http, turn_id, auto=True).status_code == 409, "no auto-continue after errors"

    reply = continue_(http, turn_id, auto=False)

    assert reply.status_code == 202, reply.text
    wait_until(lambda: status_of(http, turn_id)["status"] == "completed", what="completion")
    events = ledger.events(turn_id)
    [resumed] = [e for e in events if e.type == "resumed"]
    assert resumed.cause == "continue" and "send_email" in (resumed.note or "")  # type: ignore[union-attr]
    blocked = [e for e in events if e.type == "tool_blocked"]
    assert [(b.tool, b.reason) for b in blocked] == [("send_email", "completed")]  # type: ignore[union-attr]
    assert len(outbox(rdb)) == 1


def test_continue_after_stop_is_202_and_the_turn_completes(
    worker: WorkerProcess, http: httpx.Client, script: Script
) -> None:
    turn_id = post_turn(http, model=script(busy(12)))["turn_id"]
    wait_until(lambda: status_of(http, turn_id)["status"] == "running", what="the turn running")
    assert http.post(f"/v1/turns/{turn_id}/stop").status_code == 202
    wait_until(lambda: status_of(http, turn_id)["code"] == "cancelled", what="the stop")
    assert status_of(http, turn_id)["can_continue"] is True
    assert continue_(http, turn_id, auto=True).status_code == 409, "no auto-continue after Stop"

    reply = continue_(http, turn_id, auto=False)

    assert reply.status_code == 202, reply.text
    wait_until(
        lambda: status_of(http, turn_id)["status"] == "completed", timeout=30, what="completion"
    )
