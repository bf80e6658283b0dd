"""The page for people (issue 14): usable from the keyboard alone, and at 390 px wide without a
sideways scroll, in light and in dark.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from page_support import model_worker
from playwright.sync_api import expect

from rigs import EMAIL, Script
from tests.support.fixtures import StartWorker

pytestmark = pytest.mark.redis_server

#: a short turn with one write
ONE_WRITE = [
    {"text": "Sending it.", "tool_calls": [{"name": "send_email", "input": EMAIL}]},
    {"text": "Sent."},
]


def test_the_page_works_from_the_keyboard_alone(
    page: Any, start_worker: StartWorker, script: Script, tmp_path: Path
) -> None:
    model_worker(start_worker, script(ONE_WRITE))
    page.keyboard.press("Tab")  # the skip link comes first
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("composer")).to_be_focused()
    page.keyboard.type("Email a@x.io")
    page.keyboard.press("Enter")  # Enter sends
    expect(page.get_by_test_id("turn-status")).to_have_text("completed")

    inspect = page.get_by_role("button", name="Inspect")
    inspect.focus()
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("inspector")).to_be_visible()
    expect(page.get_by_role("button", name="Close")).to_be_focused()
    page.keyboard.press("Escape")
    expect(page.get_by_test_id("inspector")).to_be_hidden()
    expect(inspect).to_be_focused()  # focus goes back where it came from
    page.screenshot(path=str(tmp_path / "keyboard.png"))


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_at_390_px_the_chat_and_the_inspector_fit_the_width(
    page: Any, start_worker: StartWorker, script: Script, tmp_path: Path, scheme: str
) -> None:
    model_worker(start_worker, script(ONE_WRITE))
    page.emulate_media(color_scheme=scheme)
    page.set_viewport_size({"width": 390, "height": 844})
    page.get_by_test_id("composer").fill("Email a@x.io")
    page.get_by_test_id("send").click()
    expect(page.get_by_test_id("turn-status")).to_have_text("completed")
    expect(page.get_by_test_id("tool-call")).to_have_attribute("data-state", "completed")
    wide = "document.documentElement.scrollWidth"
    assert page.evaluate(wide) <= 390
    page.screenshot(path=str(tmp_path / f"chat-{scheme}.png"))

    page.get_by_role("button", name="Inspect").click()
    expect(page.get_by_test_id("inspector")).to_be_visible()
    assert page.evaluate(wide) <= 390
    box = page.get_by_test_id("inspector").bounding_box()
    assert box["x"] == 0 and box["width"] == 390  # it covers the chat on a phone
    page.screenshot(path=str(tmp_path / f"inspector-{scheme}.png"))
