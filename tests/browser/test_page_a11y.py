"""The page checked by axe-core (issue 26): no serious or critical violation on the chat, the
inspector, a stopped turn that offers Continue (no approval on it), and a regenerated answer with
its replaced one opened and the message's editor open."""

from __future__ import annotations

from typing import Any

import pytest
from page_support import ONE_CHUNK, READ, model_worker, send_message
from playwright.sync_api import expect

from rigs import Script
from tests.support import IN_CI
from tests.support.fixtures import StartWorker

pytestmark = pytest.mark.redis_server

#: impacts that fail the check
GRAVE = {"serious", "critical"}


def grave_violations(page: Any) -> list[str]:
    try:
        from axe_playwright_python.sync_playwright import Axe
    except ImportError:
        if IN_CI:
            pytest.fail("CI=true requires axe-playwright-python (the dev extra)", pytrace=False)
        pytest.skip("axe-playwright-python is not installed (the dev extra has it)")
    results = Axe().run(page)
    return [
        f"{v['id']} ({v['impact']}): {v['help']} — {[n['target'] for n in v['nodes']]}"
        for v in results.response["violations"]
        if v["impact"] in GRAVE
    ]


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_chat_and_the_inspector_have_no_serious_violation(
    page: Any, start_worker: StartWorker, script: Script, scheme: str
) -> None:
    model = script([{"text": "Looking.", "tool_calls": [READ]}, {"text": " Nothing there."}])
    model_worker(start_worker, model, **ONE_CHUNK)
    page.emulate_media(color_scheme=scheme)
    status = send_message(page, "Check the outbox")
    expect(status).to_have_text("completed")
    expect(page.get_by_test_id("conversation")).to_have_count(1)
    assert grave_violations(page) == []

    page.get_by_role("button", name="Inspect").click()
    expect(page.get_by_test_id("inspector")).to_contain_text("list_outbox")
    assert grave_violations(page) == []


def test_a_stopped_turn_offering_continue_has_no_serious_violation(
    page: Any, start_worker: StartWorker, script: Script
) -> None:
    model = script(
        [{"text": "Starting.", "tool_calls": [READ]}, {"delay_s": 15.0, "text": "Late."}]
    )
    model_worker(start_worker, model, **ONE_CHUNK)
    status = send_message(page, "Think hard")
    expect(page.get_by_test_id("tool-call")).to_have_attribute("data-state", "completed")
    page.get_by_test_id("stop").click()
    expect(status).to_have_text("stopped")
    expect(page.get_by_test_id("continue")).to_be_visible()
    assert grave_violations(page) == []


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_replaced_answer_opened_and_the_message_editor_have_no_serious_violation(
    page: Any, start_worker: StartWorker, script: Script, scheme: str
) -> None:
    model_worker(start_worker, script([{"text": "Hello."}]), **ONE_CHUNK)
    page.emulate_media(color_scheme=scheme)
    status = send_message(page, "Greet me")
    expect(status).to_have_text("completed")
    page.get_by_test_id("regenerate").click()
    replaced = page.get_by_test_id("replaced")
    expect(replaced).to_have_count(1)
    expect(page.get_by_test_id("turn-status").last).to_have_text("completed")
    replaced.locator("summary").click()
    page.get_by_test_id("edit").click()
    expect(page.get_by_test_id("edit-message")).to_be_focused()
    assert grave_violations(page) == []
