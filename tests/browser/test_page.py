"""The page in a real browser (docs/semantics.md, docs/http-api.md): Debian's chromium on a real
``dres api``, a real prefork worker and redis-server, driven through the page's ``data-testid``
hooks.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import redis
from page_support import (
    LONG_SECOND_STEP,
    ONE_CHUNK,
    kill_pool_child_mid_turn,
    model_worker,
    send_message,
    turn_id_of,
)
from playwright.sync_api import expect

from ledger.events import Event
from ledger.store import Ledger
from rigs import EMAIL, Script, having, of, send, show, wait_for
from tests.support.fixtures import StartWorker
from worker.demo_tools import outbox

pytestmark = pytest.mark.redis_server

#: docs/semantics.md: Stop records the turn's end within a second or two
STOP_BOUND_S = 2.0


def ledger_text(events: list[Event]) -> str:
    return "".join(e.text for e in events if e.type == "text")  # type: ignore[union-attr]


def shot(page: Any, tmp_path: Path, name: str) -> None:
    page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)


def test_a_sent_message_streams_its_answer_and_its_tool_cards_show_completed(
    page: Any,
    start_worker: StartWorker,
    script: Script,
    ledger: Ledger,
    rdb: redis.Redis,
    tmp_path: Path,
) -> None:
    model = script(
        [
            {"text": "Let me look at the outbox first.", "tool_calls": [{"name": "list_outbox"}]},
            {
                "delay_s": 2.0,
                "text": " Sending it now.",
                "tool_calls": [{"name": "send_email", "input": EMAIL}],
            },
            {"text": " Done: the email is sent."},
        ]
    )
    model_worker(start_worker, model, **ONE_CHUNK)
    status = send_message(page, "Email a@x.io")
    answer = page.get_by_test_id("answer").last

    expect(answer).to_contain_text("Let me look at the outbox first.")
    expect(status).to_have_text("running")  # the first text is shown while the turn still runs
    expect(status).to_have_text("completed")
    shot(page, tmp_path, "completed")

    turn_id = turn_id_of(page)
    assert answer.text_content() == ledger_text(ledger.events(turn_id))
    cards = page.get_by_test_id("tool-call")
    expect(cards).to_have_count(2)
    assert [cards.nth(i).get_attribute("data-state") for i in range(2)] == ["completed"] * 2
    assert len(outbox(rdb)) == 1


#: what the scripted model reports for a step (the inspector shows the turn's sum)
SPENT = {"input_tokens": 321, "output_tokens": 54}


def test_a_turn_cut_by_its_soft_limit_shows_the_second_run_and_the_repeat_as_blocked(
    page: Any,
    start_worker: StartWorker,
    script: Script,
    ledger: Ledger,
    rdb: redis.Redis,
    tmp_path: Path,
) -> None:
    """The adversarial model re-sends the email after the soft limit; the executor blocks it."""
    model = script(
        [
            send("ada@x.io", "Launch"),
            # answered once, after the resume (the soft limit cuts its first attempt's delay)
            {"delay_s": 1.0, "text": "Thinking.", "usage": SPENT},
            {"text": "Done."},
        ],
        on_resume="restart",
    )
    model_worker(start_worker, model)  # the tests' 0.5 s soft limit
    status = send_message(page, "Email Ada the launch notes")
    expect(status).to_have_text("completed")

    blocked = page.locator('[data-testid="tool-call"][data-state="blocked"]')
    expect(blocked).to_have_count(1)
    expect(blocked).to_contain_text("send_email")
    page.get_by_role("button", name="Inspect").last.click()
    inspector = page.get_by_test_id("inspector")
    expect(inspector).to_be_visible()
    second = inspector.locator('[data-testid="inspector-run"][data-cause="next_chunk"]')
    expect(second.first).to_contain_text("cause next_chunk")
    expect(inspector).to_contain_text("Tool calls already recorded")  # the note it was given
    expect(inspector.get_by_test_id("inspector-usage")).to_have_text(
        "321 in · 54 out, over 1 model call(s)"
    )
    shot(page, tmp_path, "inspector")

    assert len(outbox(rdb)) == 1, "one email, however often the model asked"
    events = ledger.events(turn_id_of(page))
    assert [e.cause for e in of(events, "run_started")][:2] == ["first", "next_chunk"], show(events)


def test_a_crashed_foreground_turn_is_continued_by_the_page_on_its_own_and_completes(
    page: Any,
    start_worker: StartWorker,
    script: Script,
    ledger: Ledger,
    rdb: redis.Redis,
    tmp_path: Path,
) -> None:
    worker = model_worker(start_worker, script(LONG_SECOND_STEP), **ONE_CHUNK)
    status = send_message(page, "Do the long thing")
    expect(status).to_have_text("running")
    turn_id = turn_id_of(page)
    kill_pool_child_mid_turn(worker, ledger, turn_id)

    expect(status).to_have_text("completed")
    expect(page.get_by_test_id("auto-continues").last).to_have_text("auto-continued 1 of 3")
    shot(page, tmp_path, "auto-continued")
    events = ledger.events(turn_id)
    assert [(e.status, e.code) for e in of(events, "turn_ended")] == [
        ("stopped", "crashed"),
        ("completed", ""),
    ], show(events)
    assert [e.cause for e in of(events, "run_started")] == ["first", "auto_continue"]
    assert ledger.meta(turn_id).auto_continues == 1


def test_with_auto_continue_off_a_crashed_turn_offers_continue_and_a_click_completes_it(
    page: Any,
    start_worker: StartWorker,
    script: Script,
    ledger: Ledger,
    rdb: redis.Redis,
    tmp_path: Path,
) -> None:
    page.get_by_label("Continue time-limit stops on my own").uncheck()
    worker = model_worker(start_worker, script(LONG_SECOND_STEP), **ONE_CHUNK)
    status = send_message(page, "Do the long thing")
    expect(status).to_have_text("running")
    turn_id = turn_id_of(page)
    kill_pool_child_mid_turn(worker, ledger, turn_id)

    expect(status).to_have_text("stopped")
    continue_button = page.get_by_test_id("continue")
    expect(continue_button).to_be_visible()
    shot(page, tmp_path, "continue-offered")
    continue_button.click()
    expect(status).to_have_text("completed")
    expect(page.get_by_test_id("continue")).to_have_count(0)
    events = ledger.events(turn_id)
    assert [e.cause for e in of(events, "run_started")] == ["first", "continue"], show(events)
    assert ledger.meta(turn_id).auto_continues == 0


def test_stop_during_a_long_step_stops_within_2_s_and_a_newer_turn_takes_continue_away(
    page: Any,
    start_worker: StartWorker,
    script: Script,
    ledger: Ledger,
    rdb: redis.Redis,
    tmp_path: Path,
) -> None:
    model = script([{"delay_s": 15.0, "text": "A long thought."}, {"text": "Done."}])
    model_worker(start_worker, model, **ONE_CHUNK)
    status = send_message(page, "Think hard")
    turn_id = turn_id_of(page)
    wait_for(ledger, turn_id, having("model_start"), what="the long step")
    expect(status).to_have_text("running")

    clicked = time.time()
    page.get_by_test_id("stop").click()
    events = wait_for(ledger, turn_id, having("turn_ended"), what="the stop", timeout=10)
    [ended] = of(events, "turn_ended")
    assert (ended.status, ended.code) == ("stopped", "cancelled"), show(events)
    print(f"Stop recorded the turn's end {ended.ts - clicked:.3f} s after the click")
    assert ended.ts - clicked <= STOP_BOUND_S, f"stopped {ended.ts - clicked:.2f} s after Stop"
    expect(status).to_have_text("stopped")
    expect(page.get_by_test_id("continue")).to_have_count(1)
    shot(page, tmp_path, "stopped")

    send_message(page, "Something else")
    expect(page.get_by_test_id("continue")).to_have_count(0)  # the old stop is not the newest
    shot(page, tmp_path, "newer-turn")


def test_a_reload_mid_stream_shows_the_answer_text_of_the_ledger_once(
    page: Any,
    start_worker: StartWorker,
    script: Script,
    ledger: Ledger,
    rdb: redis.Redis,
    tmp_path: Path,
) -> None:
    steps: list[dict[str, Any]] = [
        {
            "delay_s": 0.4,
            "text": f"Part {n} of the answer. ",
            "tool_calls": [{"name": "list_outbox"}],
        }
        for n in range(1, 9)
    ]
    model_worker(start_worker, script([*steps, {"text": "The end."}]), **ONE_CHUNK)
    status = send_message(page, "Tell me a long story")
    expect(page.get_by_test_id("answer").last).to_contain_text("Part 2 of")
    turn_id = turn_id_of(page)
    assert ledger.meta(turn_id).status == "running"

    page.reload()
    status = page.get_by_test_id("turn-status").last
    expect(status).to_have_text("completed")
    shot(page, tmp_path, "reloaded")

    answer = page.get_by_test_id("answer")
    expect(answer).to_have_count(1)
    text = ledger_text(ledger.events(turn_id))
    assert text.count("Part 3 of") == 1 and text.endswith("The end.")
    assert answer.text_content() == text
