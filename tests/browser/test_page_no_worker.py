"""The page's ``no-worker`` notice (docs/page.md): shown while ``GET /healthz`` reports no
worker, saying how to start one, and gone once a real ``dres worker`` says it is alive; a
message sent meanwhile waits, queued, and is answered once the worker is there."""

from __future__ import annotations

from typing import Any

import pytest
from page_support import send_message
from playwright.sync_api import expect

from tests.support.fixtures import StartWorker

pytestmark = pytest.mark.redis_server


def test_the_no_worker_notice_says_how_to_start_one_and_goes_once_a_worker_runs(
    page: Any, start_worker: StartWorker
) -> None:
    notice = page.get_by_test_id("no-worker")
    expect(notice).to_be_visible()
    expect(notice).to_contain_text("No worker is running")
    expect(notice.locator("code")).to_have_text("dres worker")

    status = send_message(page, "Summarize the outbox.")
    expect(status).to_have_text("queued")

    start_worker()
    expect(notice).to_be_hidden()
    expect(status).to_have_text("completed")
