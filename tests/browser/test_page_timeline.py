"""The page's timeline and its conversations (issue 26, docs/http-api.md): conversations listed by
the server, the same in every browser; a turn's text segments, tool cards and "Resuming…" markers in
ledger order, also after a reload mid-turn and after a resume, no segment shown twice; and a status
word that never reads ``completed`` beside an answer that lacks its last text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from page_support import ONE_CHUNK, READ, model_worker, send_message, turn_id_of
from playwright.sync_api import expect

from ledger.store import Ledger
from rigs import ApiProcess, Script, of, show
from tests.support.fixtures import StartWorker
from worker.engine.history import final_text

pytestmark = pytest.mark.redis_server

#: text → tool → text → tool → text; the second model call thinks first (time for a reload, or
#: for the tests' 0.5 s soft limit to cut the run there)
THREE_PARTS = [
    {"text": "One.", "tool_calls": [READ]},
    {"delay_s": 1.5, "text": " Two.", "tool_calls": [READ]},
    {"text": " Three."},
]
SEGMENTS = ["One.", " Two.", " Three."]

#: every time a turn's status word reads "completed", what its answer held then (in the page)
WATCH_COMPLETED = """() => {
  window.completedWith = [];
  new MutationObserver(() => {
    for (const turn of document.querySelectorAll("article.turn")) {
      const word = turn.querySelector('[data-testid="turn-status"]').textContent;
      if (word === "completed" && !turn.dataset.seenCompleted) {
        turn.dataset.seenCompleted = "1";
        window.completedWith.push(turn.querySelector('[data-testid="answer"]').textContent);
      }
    }
  }).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


def kinds(page: Any) -> list[str]:
    items = page.get_by_test_id("timeline").last.locator("[data-kind]")
    return [items.nth(i).get_attribute("data-kind") for i in range(items.count())]


def segments(page: Any) -> list[str]:
    texts = page.get_by_test_id("timeline").last.locator('[data-kind="text"]')
    return [texts.nth(i).text_content() for i in range(texts.count())]


def test_the_page_is_served_as_es_modules_from_this_server_only(page_api: ApiProcess) -> None:
    document = httpx.get(page_api.url + "/")
    assert '<script type="module" src="/static/app.js"></script>' in document.text
    assert "script-src 'self'" in document.headers["content-security-policy"]
    for name in ("app.js", "turnstate.js", "stream.js", "api.js"):
        module = httpx.get(f"{page_api.url}/static/{name}")
        assert module.status_code == 200
        assert module.headers["content-type"].startswith("text/javascript")
    assert httpx.get(page_api.url + "/static/nothing.js").status_code == 404


def test_two_browsers_with_no_shared_storage_see_the_same_conversations(
    page: Any, browser: Any, page_api: ApiProcess, start_worker: StartWorker, script: Script
) -> None:
    model_worker(start_worker, script([{"text": "Hello there."}]))
    status = send_message(page, "Greet me")
    expect(status).to_have_text("completed")
    page.get_by_role("button", name="New conversation").click()
    send_message(page, "Again")
    expect(page.get_by_test_id("turn-status").last).to_have_text("completed")
    mine = page.get_by_test_id("conversation")
    expect(mine).to_have_count(2)

    other = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        theirs = other.new_page()
        theirs.goto(page_api.url + "/")
        listed = theirs.get_by_test_id("conversation")
        expect(listed).to_have_count(2)
        assert [listed.nth(i).text_content() for i in range(2)] == [
            mine.nth(i).text_content() for i in range(2)
        ]
        expect(listed.first).to_contain_text("Again")  # most recently updated first
        listed.last.click()  # the other browser opens the first conversation and sees its turn
        expect(theirs.get_by_test_id("answer")).to_have_text("Hello there.")
        expect(theirs.get_by_test_id("turn-status")).to_have_text("completed")
        assert theirs.evaluate("localStorage.length") == 0
    finally:
        other.close()


def test_text_tool_text_tool_text_shows_in_ledger_order_also_after_a_reload_mid_turn(
    page: Any, start_worker: StartWorker, script: Script, ledger: Ledger, tmp_path: Path
) -> None:
    model_worker(start_worker, script(THREE_PARTS), **ONE_CHUNK)
    page.evaluate(WATCH_COMPLETED)
    send_message(page, "Three parts")
    expect(page.get_by_test_id("timeline").last.locator('[data-kind="tool"]')).to_have_count(1)
    assert kinds(page) == ["text", "tool"]
    turn_id = turn_id_of(page)
    assert ledger.meta(turn_id).status == "running"

    page.reload()  # mid-turn: the timeline comes back from the events, then goes on live
    page.evaluate(WATCH_COMPLETED)
    expect(page.get_by_test_id("turn-status").last).to_have_text("completed")
    page.screenshot(path=str(tmp_path / "timeline.png"), full_page=True)
    assert kinds(page) == ["text", "tool", "text", "tool", "text"]
    assert segments(page) == SEGMENTS
    assert page.get_by_test_id("answer").last.text_content() == "".join(SEGMENTS)
    states = page.get_by_test_id("tool-call")
    assert [states.nth(i).get_attribute("data-state") for i in range(2)] == ["completed"] * 2
    completed_with = page.evaluate("window.completedWith")
    assert completed_with in ([], ["".join(SEGMENTS)]), completed_with
    assert final_text(ledger.events(turn_id)) == " Three."


def test_after_a_resume_the_timeline_keeps_ledger_order_and_shows_no_segment_twice(
    page: Any, start_worker: StartWorker, script: Script, ledger: Ledger, tmp_path: Path
) -> None:
    model_worker(start_worker, script(THREE_PARTS))  # the tests' 0.5 s soft limit cuts step 2
    page.evaluate(WATCH_COMPLETED)
    status = send_message(page, "Three parts, cut")
    expect(status).to_have_text("completed")
    page.screenshot(path=str(tmp_path / "resumed.png"), full_page=True)
    events = ledger.events(turn_id_of(page))
    assert len(of(events, "run_started")) >= 2, show(events)

    shown = kinds(page)
    assert "marker" in shown, shown
    assert [k for k in shown if k != "marker"] == ["text", "tool", "text", "tool", "text"], shown
    markers = page.get_by_test_id("timeline").last.locator('[data-kind="marker"]')
    expect(markers.first).to_contain_text("Resuming…")
    assert segments(page) == SEGMENTS
    assert page.evaluate("window.completedWith") == ["".join(SEGMENTS)]

    page.reload()  # after the resume: the same timeline from the events
    expect(page.get_by_test_id("turn-status").last).to_have_text("completed")
    assert kinds(page) == shown
    assert segments(page) == SEGMENTS
