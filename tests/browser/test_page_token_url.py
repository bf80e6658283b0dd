"""The page through the URL ``dres up`` prints (docs/commands.md, docs/page.md; issue 38): without
DRES_API_TOKEN ``dres up`` gives its API a random token and prints the page's URL carrying it
(``/#token=…``); the page takes it into the tab, out of the address bar, and reads and sends with
it, never asking for a token. A real ``dres up`` subprocess (its own redis-server, worker, API).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from rigs import ROOT, wait_until
from worker.dev.redis_server import free_port

pytestmark = pytest.mark.redis_server

URL = re.compile(r"open (http://127\.0\.0\.1:\d+)/#token=(\S+)")


def test_the_page_opened_at_the_url_dres_up_prints_reads_the_turns_with_its_token(
    browser: Any, dres_env: dict[str, str], tmp_path: Path
) -> None:
    env = {k: v for k, v in dres_env.items() if k != "DRES_REDIS_URL"}  # it starts its own
    log = tmp_path / "up.log"
    with log.open("wb") as out:
        up = subprocess.Popen(
            [sys.executable, "-m", "worker.edges.cli", "up", "--port", str(free_port())],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        found = wait_until(lambda: URL.search(log.read_text()), timeout=40, what="the URL")
        url, token = found.group(1), found.group(2)
        auth = {"Authorization": f"Bearer {token}"}
        created = httpx.post(f"{url}/v1/turns", json={"message": "Hello"}, headers=auth)
        assert created.status_code == 202, created.text

        page = context.new_page()
        page.goto(found.group(0).removeprefix("open "))

        conversation = page.get_by_test_id("conversation")
        expect(conversation).to_have_count(1)
        assert "token" not in page.url
        assert page.evaluate("sessionStorage.getItem('dres.token')") == token
        conversation.click()
        expect(page.get_by_test_id("turn-status")).to_have_count(1)
        expect(page.get_by_test_id("turn-status")).not_to_have_text("")
        expect(page.get_by_label("Bearer token")).to_be_hidden()
        page.screenshot(path=str(tmp_path / "page.png"))
    finally:
        context.close()
        up.send_signal(signal.SIGINT)
        try:
            up.wait(timeout=30)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()
