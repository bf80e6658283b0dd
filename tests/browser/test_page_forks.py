"""Regenerate and Edit on the page (docs/page.md, docs/semantics.md "Forks"): each is a fork
through ``POST /v1/turns/{id}/fork`` on a real ``dres api``, worker and redis-server; the page
follows the fork's turn live, shows the turns it replaced collapsed (never as the answer), and a
write a replaced turn completed is answered from its record, not sent again.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import redis
from page_support import ONE_CHUNK, model_worker, send_message, turn_id_of
from playwright.sync_api import expect

from ledger.store import Ledger
from rigs import EMAIL, Script, ended, of, show, wait_for
from tests.support.fixtures import StartWorker
from worker.demo_tools import outbox

pytestmark = pytest.mark.redis_server

#: every turn of this script — the first and each fork of it — sends the same email, then ends
SEND_THEN_DONE = [
    {"text": "Emailing a@x.io.", "tool_calls": [{"name": "send_email", "input": EMAIL}]},
    {"text": " Sent."},
]
#: seconds a fork may take to end, on a machine shared with other test runs
FORK_S = 30.0
ANY_ID = re.compile(r"\S+")


def article(page: Any, turn_id: str) -> Any:
    return page.locator(f'article.turn[data-turn-id="{turn_id}"]')


def replaced_by(page: Any, turn_id: str) -> str:
    """The fork the page marks ``turn_id`` replaced by, once it does."""
    expect(article(page, turn_id)).to_have_attribute("data-replaced-by", ANY_ID)
    fork_id: str = article(page, turn_id).get_attribute("data-replaced-by")
    return fork_id


def current_turns(page: Any) -> list[str]:
    """The turns the page shows as the conversation's (none a fork replaced), in order."""
    shown = page.locator("article.turn:not([data-replaced-by])")
    return [shown.nth(i).get_attribute("data-turn-id") for i in range(shown.count())]


def expect_answered_from_the_record(page: Any, fork_id: str, replaced: str) -> None:
    """The fork's one tool card: the email, blocked, matched to the replaced turn's call."""
    card = article(page, fork_id).get_by_test_id("tool-call")
    expect(card).to_have_count(1)
    expect(card).to_have_attribute("data-state", "blocked")
    expect(card).to_contain_text("send_email")
    expect(card).to_contain_text(f"the same call, completed by the replaced turn {replaced}")


def test_regenerate_answers_the_sent_email_from_the_record_and_edit_forks_with_the_new_text(
    page: Any,
    start_worker: StartWorker,
    script: Script,
    ledger: Ledger,
    rdb: redis.Redis,
    tmp_path: Path,
) -> None:
    model_worker(start_worker, script(SEND_THEN_DONE), **ONE_CHUNK)
    status = send_message(page, "Email a@x.io")
    expect(status).to_have_text("completed")
    first = turn_id_of(page)
    assert len(outbox(rdb)) == 1
    expect(page.get_by_test_id("regenerate")).to_have_count(1)

    # Regenerate: a fork at the newest turn with its own message, followed live
    article(page, first).get_by_test_id("regenerate").click()
    regenerated = replaced_by(page, first)
    events = wait_for(ledger, regenerated, ended(), timeout=FORK_S, what="the regenerate's end")
    [started] = of(events, "turn_started")
    assert (started.fork_of, started.message) == (first, "Email a@x.io"), show(events)
    [blocked] = of(events, "tool_blocked")
    assert (blocked.tool, blocked.reason, blocked.inherited_from) == (
        "send_email",
        "completed",
        first,
    ), show(events)
    assert len(outbox(rdb)) == 1, "the fork's repeat of the email was not sent again"
    assert ledger.meta(first).replaced_by == regenerated

    fork = article(page, regenerated)
    expect(fork.get_by_test_id("turn-status")).to_have_text("completed")
    expect_answered_from_the_record(page, regenerated, first)
    expect(fork.get_by_test_id("answer")).to_have_text("Emailing a@x.io. Sent.")
    # the replaced answer stays, collapsed and marked, never as the current one
    expect(article(page, first)).to_be_hidden()
    expect(page.get_by_test_id("replaced")).to_contain_text("Replaced: 1 earlier answer")
    assert current_turns(page) == [regenerated]
    expect(page.get_by_test_id("regenerate")).to_have_count(1)
    expect(fork.get_by_test_id("regenerate")).to_be_visible()
    page.screenshot(path=str(tmp_path / "regenerated.png"), full_page=True)

    # a reload draws the same from GET /v1/conversations/{id} (its turns' replaced_by)
    page.reload()
    expect(article(page, regenerated).get_by_test_id("turn-status")).to_have_text("completed")
    expect(article(page, first)).to_have_attribute("data-replaced-by", regenerated)
    expect(article(page, first)).to_be_hidden()
    assert current_turns(page) == [regenerated]
    page.get_by_test_id("replaced").locator("summary").click()  # opened, it reads as replaced
    expect(article(page, first)).to_contain_text("Replaced by a later answer")
    expect(article(page, first).get_by_test_id("regenerate")).to_have_count(0)
    expect(article(page, first).get_by_test_id("edit")).to_have_count(0)

    # Edit: the inline editor sends a fork at that turn with the new text
    article(page, regenerated).get_by_test_id("edit").click()
    editor = article(page, regenerated).get_by_test_id("edit-message")
    expect(editor).to_be_focused()
    expect(editor).to_have_value("Email a@x.io")
    editor.fill("Email a@x.io again, please")
    article(page, regenerated).get_by_test_id("edit-confirm").click()
    edited = replaced_by(page, regenerated)
    events = wait_for(ledger, edited, ended(), timeout=FORK_S, what="the edit's end")
    [started] = of(events, "turn_started")
    assert (started.fork_of, started.message) == (regenerated, "Email a@x.io again, please")
    assert of(events, "model_start"), show(events)  # its model ran on the new text
    assert [b.inherited_from for b in of(events, "tool_blocked")] == [first], show(events)
    assert len(outbox(rdb)) == 1

    edit = article(page, edited)
    expect(edit.get_by_test_id("turn-status")).to_have_text("completed")
    expect(edit.locator(".user-message")).to_have_text("Email a@x.io again, please")
    expect_answered_from_the_record(page, edited, first)
    assert current_turns(page) == [edited]
    expect(page.get_by_test_id("replaced")).to_contain_text(
        "Replaced: 2 earlier answers (an edit took their place)"
    )
    page.screenshot(path=str(tmp_path / "edited.png"), full_page=True)


def test_an_edit_cancelled_with_escape_forks_nothing_and_gives_the_focus_back(
    page: Any, start_worker: StartWorker, script: Script, ledger: Ledger
) -> None:
    model_worker(start_worker, script([{"text": "Hello."}]), **ONE_CHUNK)
    status = send_message(page, "Greet me")
    expect(status).to_have_text("completed")
    turn_id = turn_id_of(page)

    edit = page.get_by_test_id("edit")
    edit.click()
    editor = page.get_by_test_id("edit-message")
    editor.fill("Greet me twice")
    editor.press("Escape")
    expect(editor).to_have_count(0)
    expect(page.get_by_test_id("edit")).to_be_focused()
    expect(article(page, turn_id).locator(".user-message")).to_have_text("Greet me")
    assert current_turns(page) == [turn_id]
    assert ledger.meta(turn_id).replaced_by == ""
