"""The page's connection to the API (docs/http-api.md, docs/semantics.md): the bearer token asked
once, a dropped connection resumed from the last event id, and Stop during the wait before an
automatic continuation.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from page_support import (
    LONG_SECOND_STEP,
    ONE_CHUNK,
    READ,
    kill_pool_child_mid_turn,
    model_worker,
)
from page_support import send_message as send
from page_support import turn_id_of as newest_turn
from playwright.sync_api import expect

from ledger.store import Ledger
from rigs import ApiProcess, Script, having, of, stop_all, wait_for
from rigs import subprocess_env as env_of
from tests.support import DRES_ENV, TESTS
from tests.support.fixtures import StartWorker
from worker.dev.redis_server import free_port

pytestmark = pytest.mark.redis_server

TOKEN = "page-token-0123456789-0123456789abcdef"


@pytest.fixture
def start_api(redis_url: str, tmp_path: Path) -> Iterator[Any]:
    """``start_api(port=0, token=None)``: a ``dres api`` of this test only, stopped at its end."""
    started: list[ApiProcess] = []

    def start(port: int = 0, token: str | None = None) -> ApiProcess:
        extra = {"DRES_API_TOKEN": token} if token else {}
        env = env_of({**DRES_ENV, "DRES_REDIS_URL": redis_url, **extra}, TESTS)
        log = tmp_path / f"api-{len(started) + 1}.log"
        api = ApiProcess.start(env, log, port=port, ready=False)
        started.append(api)
        api.wait_ready()
        return api

    yield start
    stop_all(started)


def test_with_a_token_the_page_asks_for_it_once_and_keeps_it_for_the_tab(
    page: Any, start_api: Any, start_worker: StartWorker, script: Script, tmp_path: Path
) -> None:
    guarded = start_api(token=TOKEN)
    model_worker(start_worker, script([{"text": "Hello there."}]))
    page.goto(guarded.url + "/")
    page.get_by_test_id("composer").fill("Hello")
    page.get_by_test_id("send").click()

    page.get_by_label("Bearer token").fill(TOKEN)
    page.get_by_label("Bearer token").press("Enter")
    status = page.get_by_test_id("turn-status").last
    expect(status).to_have_text("completed")
    expect(page.get_by_test_id("answer").last).to_have_text("Hello there.")
    page.screenshot(path=str(tmp_path / "token.png"))

    page.reload()  # the same tab: the token is still there, nothing is asked again
    expect(page.get_by_test_id("turn-status").last).to_have_text("completed")
    expect(page.get_by_label("Bearer token")).to_be_hidden()
    assert page.evaluate("sessionStorage.getItem('dres.token')") == TOKEN


def test_a_dropped_connection_resumes_after_the_last_event_with_no_line_lost_or_doubled(
    page: Any,
    start_api: Any,
    start_worker: StartWorker,
    script: Script,
    ledger: Ledger,
    tmp_path: Path,
) -> None:
    """The API goes away mid-turn and comes back on the same port: the page reconnects."""
    steps = [{"delay_s": 0.5, "text": f"Line {n}. ", "tool_calls": [READ]} for n in range(1, 11)]
    model_worker(start_worker, script([*steps, {"text": "The end."}]), **ONE_CHUNK)
    port = free_port()
    api = start_api(port=port)
    page.goto(api.url + "/")
    send(page, "Count to ten")
    expect(page.get_by_test_id("answer").last).to_contain_text("Line 2.")
    turn_id = newest_turn(page)

    stop_all([api])  # the event stream drops; the turn goes on in the worker
    wait_for(ledger, turn_id, having("text", 5), what="more lines while the API is away")
    start_api(port=port)

    expect(page.get_by_test_id("turn-status").last).to_have_text("completed")
    page.screenshot(path=str(tmp_path / "reconnected.png"))
    events = ledger.events(turn_id)
    text = "".join(e.text for e in of(events, "text"))
    assert page.get_by_test_id("answer").last.text_content() == text
    assert text.count("Line 5.") == 1


def test_stop_while_the_page_waits_to_continue_on_its_own_cancels_that_continuation(
    page: Any, start_worker: StartWorker, script: Script, ledger: Ledger, tmp_path: Path
) -> None:
    worker = model_worker(start_worker, script(LONG_SECOND_STEP), **ONE_CHUNK)
    status = send(page, "Do the long thing")
    turn_id = newest_turn(page)
    kill_pool_child_mid_turn(worker, ledger, turn_id)

    expect(status).to_have_text("stopped")
    page.get_by_test_id("stop").click()  # shown while the automatic continuation waits
    continue_button = page.get_by_test_id("continue")
    expect(continue_button).to_be_visible()
    page.screenshot(path=str(tmp_path / "auto-cancelled.png"))
    meta = ledger.meta(turn_id)
    assert (meta.status, meta.code, meta.auto_continues) == ("stopped", "crashed", 0)
    causes = [e.cause for e in of(ledger.events(turn_id), "run_started")]
    assert causes == ["first"]
