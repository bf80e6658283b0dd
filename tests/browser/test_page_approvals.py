"""Approvals on the page (docs/semantics.md, docs/http-api.md; issue 24): a call that needs a
person's decision shows as an approval card with its input in full, the turn reads ``waiting``, and
a click on Approve or Deny decides it; the page never decides on its own.

The worker runs with ``DRES_APPROVAL=send_email`` and a scripted model that sends one email.
``PAGE_SCREENSHOTS=docs/screenshots`` makes the first test write docs/page.md's
``approval-1280.png`` there (by default it goes to the test's tmp_path).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from page_support import ONE_CHUNK, send_message, turn_id_of
from playwright.sync_api import expect

from ledger.events import ApprovalDecided, ApprovalRequested, ToolStart
from ledger.store import Ledger
from rigs import ApiProcess, Script, having, of, show, stop_all, subprocess_env, wait_for
from tests.support import DRES_ENV, TESTS
from tests.support.fixtures import StartWorker
from worker.demo_tools import outbox

pytestmark = pytest.mark.redis_server

#: an email whose input pretty-prints over several lines
EMAIL = {
    "to": "ada@example.com",
    "subject": "Launch notes",
    "body": "Hi Ada,\nthe launch is Friday at 10.",
}
ONE_EMAIL = [
    {
        "text": "I'll send Ada the launch notes.",
        "tool_calls": [{"name": "send_email", "input": EMAIL}],
    },
    {"text": " All done."},
]
#: the setting that makes send_email wait for a person
APPROVAL = {"DRES_APPROVAL": "send_email", **ONE_CHUNK}


def approval_worker(start_worker: StartWorker, model: str) -> None:
    start_worker(overrides={"DRES_MODEL": model, **APPROVAL})


def waiting_card(page: Any, ledger: Ledger) -> tuple[Any, ApprovalRequested]:
    """Send the message; the approval card once the turn waits, and its request."""
    status = send_message(page, "Email Ada the launch notes")
    expect(status).to_have_text("waiting")
    card = page.get_by_test_id("approval")
    expect(card).to_have_count(1)
    expect(card).to_have_attribute("data-state", "pending")
    events = wait_for(ledger, turn_id_of(page), having("approval_requested"))
    (request,) = [e for e in events if isinstance(e, ApprovalRequested)]
    return card, request


def the_tool_card(page: Any, call_id: str) -> Any:
    return page.locator(f'[data-testid="tool-call"][data-call-id="{call_id}"]')


def screenshot_dir(tmp_path: Path) -> Path:
    wanted = os.environ.get("PAGE_SCREENSHOTS")
    return Path(wanted) if wanted else tmp_path


def test_approve_on_the_page_runs_the_call_once_and_the_tool_card_completes(
    page: Any,
    start_worker: StartWorker,
    script: Script,
    ledger: Ledger,
    rdb: redis.Redis,
    tmp_path: Path,
) -> None:
    approval_worker(start_worker, script(ONE_EMAIL))
    card, request = waiting_card(page, ledger)
    turn_id = turn_id_of(page)

    # the input in full, pretty-printed; the call has no tool card yet (nothing runs)
    expect(card.get_by_test_id("approval-input")).to_have_text(
        json.dumps(EMAIL, indent=2, ensure_ascii=False)
    )
    expect(card).to_contain_text("send_email")
    expect(card).to_contain_text("Expires")
    expect(page.get_by_test_id("tool-call")).to_have_count(0)
    expect(page.locator(".status-label").last).to_have_text("Waiting for approval")
    expect(page.get_by_test_id("continue")).to_have_count(0)
    expect(page.get_by_test_id("stop")).to_have_count(1)  # Stop voids the request

    page.reload()  # mid-wait: the card comes back from the turn's events
    card = page.get_by_test_id("approval")
    expect(card).to_have_count(1)
    expect(card).to_have_attribute("data-state", "pending")
    expect(page.get_by_test_id("turn-status").last).to_have_text("waiting")
    assert outbox(rdb) == [], "nothing is sent before a person decides"
    card.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_dir(tmp_path) / "approval-1280.png"))

    card.get_by_test_id("approve").click()

    tool = the_tool_card(page, request.call_id)
    expect(tool).to_have_attribute("data-state", "completed")
    expect(page.get_by_test_id("turn-status").last).to_have_text("completed")
    expect(page.get_by_test_id("answer").last).to_have_text(
        "I'll send Ada the launch notes. All done."
    )
    expect(card).to_have_attribute("data-state", "approve")
    expect(card.get_by_test_id("approval-decision")).to_have_text("Approved by page")
    expect(card.get_by_test_id("approve")).to_have_count(0)
    expect(card.get_by_test_id("deny")).to_have_count(0)
    page.screenshot(path=str(tmp_path / "approved.png"), full_page=True)

    assert [m["to"] for m in outbox(rdb)] == [EMAIL["to"]]
    events = ledger.events(turn_id)
    (start,) = [e for e in events if isinstance(e, ToolStart) and e.tool == "send_email"]
    ran = (start.call_id, start.approval_id)
    assert ran == (request.call_id, request.approval_id), show(events)
    (decided,) = [e for e in events if isinstance(e, ApprovalDecided)]
    assert (decided.decision, decided.by) == ("approve", "page")
    assert [e.cause for e in of(events, "run_started")] == ["first", "approval"], show(events)
    assert ledger.meta(turn_id).auto_continues == 0


def test_deny_with_a_reason_refuses_the_call_sends_nothing_and_the_answer_arrives(
    page: Any,
    start_worker: StartWorker,
    script: Script,
    ledger: Ledger,
    rdb: redis.Redis,
    tmp_path: Path,
) -> None:
    approval_worker(start_worker, script(ONE_EMAIL))
    card, request = waiting_card(page, ledger)

    card.get_by_test_id("deny").click()
    reason = card.get_by_test_id("deny-reason")
    expect(reason).to_be_focused()  # an inline field, not a window.prompt
    reason.fill("wrong list")
    page.screenshot(path=str(tmp_path / "deny-form.png"), full_page=True)
    card.get_by_test_id("deny-confirm").click()

    tool = the_tool_card(page, request.call_id)
    expect(tool).to_have_attribute("data-state", "refused")
    expect(tool).to_contain_text("denied by a person: wrong list")
    expect(page.get_by_test_id("turn-status").last).to_have_text("completed")
    expect(page.get_by_test_id("answer").last).to_contain_text("All done.")
    expect(card).to_have_attribute("data-state", "deny")
    expect(card.get_by_test_id("approval-decision")).to_have_text("Denied by page: wrong list")
    page.screenshot(path=str(tmp_path / "denied.png"), full_page=True)

    assert outbox(rdb) == []
    events = ledger.events(turn_id_of(page))
    (decided,) = [e for e in events if isinstance(e, ApprovalDecided)]
    assert (decided.decision, decided.reason) == ("deny", "wrong list"), show(events)
    assert not [e for e in events if isinstance(e, ToolStart) and e.tool == "send_email"]


def test_a_stale_card_shows_the_409_when_someone_else_decided_first(
    page: Any,
    page_api: ApiProcess,
    start_worker: StartWorker,
    script: Script,
    ledger: Ledger,
    rdb: redis.Redis,
    tmp_path: Path,
) -> None:
    """The page's stream would show another decision at once and take the buttons away, so
    the other decision is taken between the click and the page's request reaching the API:
    the page's approve arrives at a request already decided."""
    approval_worker(start_worker, script(ONE_EMAIL))
    card, request = waiting_card(page, ledger)
    turn_id = turn_id_of(page)
    decide_url = f"{page_api.url}/v1/turns/{turn_id}/approvals/{request.approval_id}"

    def someone_else_first(route: Any) -> None:
        other = {"decision": "deny", "signature": request.signature, "by": "ops", "reason": "no"}
        assert httpx.post(decide_url, json=other, timeout=10).status_code == 202
        route.continue_()

    page.route(decide_url, someone_else_first)
    card.get_by_test_id("approve").click()

    expect(card.get_by_test_id("approval-error")).to_contain_text("already decided: deny")
    expect(card).to_have_attribute("data-state", "deny")
    expect(card.get_by_test_id("approval-decision")).to_have_text("Denied by ops: no")
    expect(the_tool_card(page, request.call_id)).to_have_attribute("data-state", "refused")
    expect(page.get_by_test_id("turn-status").last).to_have_text("completed")
    page.screenshot(path=str(tmp_path / "stale.png"), full_page=True)
    assert outbox(rdb) == []


#: DRES_APPROVER_TOKENS of the API the approver test opens the page on
APPROVER = {"ana": "ana-approver-token-0123456789abcdef"}


def test_with_approvers_the_card_takes_an_approvers_token_and_the_decision_is_by_its_name(
    page: Any,
    start_worker: StartWorker,
    script: Script,
    ledger: Ledger,
    rdb: redis.Redis,
    redis_url: str,
    tmp_path: Path,
) -> None:
    """DRES_APPROVER_TOKENS set: the page's decision needs the approver's own token, typed beside
    the buttons and kept for the tab; the ledger records the approver's name as ``by``."""
    dres = {**DRES_ENV, "DRES_REDIS_URL": redis_url, "DRES_APPROVER_TOKENS": json.dumps(APPROVER)}
    api = ApiProcess.start(subprocess_env(dres, TESTS), tmp_path / "api.log", ready=False)
    try:
        api.wait_ready()
        page.goto(api.url + "/")
        approval_worker(start_worker, script(ONE_EMAIL))
        card, _ = waiting_card(page, ledger)
        turn_id = turn_id_of(page)

        card.get_by_test_id("approve").click()  # no approver's token yet: nothing is sent
        expect(card.get_by_test_id("approval-error")).to_contain_text("approver token")
        expect(card).to_have_attribute("data-state", "pending")
        card.scroll_into_view_if_needed()
        page.screenshot(path=str(tmp_path / "approver-asked.png"))
        card.get_by_label("Approver token").fill("n" * 40)  # no approver's: the server says 401
        card.get_by_test_id("approve").click()
        expect(card.get_by_test_id("approval-error")).to_contain_text("bearer token")
        card.get_by_label("Approver token").fill(APPROVER["ana"])
        card.get_by_test_id("approve").click()

        expect(card).to_have_attribute("data-state", "approve")
        expect(card.get_by_test_id("approval-decision")).to_have_text("Approved by ana")
        expect(page.get_by_test_id("turn-status").last).to_have_text("completed")
        page.screenshot(path=str(tmp_path / "approver.png"), full_page=True)
        assert page.evaluate("sessionStorage.getItem('dres.approverToken')") == APPROVER["ana"]
    finally:
        stop_all([api])
    (decided,) = [e for e in ledger.events(turn_id) if isinstance(e, ApprovalDecided)]
    assert (decided.decision, decided.by) == ("approve", "ana")
    assert [m["to"] for m in outbox(rdb)] == [EMAIL["to"]]
