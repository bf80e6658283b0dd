"""The page through a Redis outage (docs/faults.md, docs/http-api.md): while the API answers 503 the
page says it is reconnecting and keeps trying, and once Redis is back it shows the turn to its end
with no line lost or doubled.

The outage is real: a private redis-server of this test, killed with SIGKILL and started again
on the same port and data directory, behind a ``dres api`` of this test. The turn's run is played
by the test at the ledger level (no worker), so only the page and the API live through it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from page_support import send_message, turn_id_of
from playwright.sync_api import expect

from rigs import ApiProcess, close_runtime, say, stop_all
from rigs import subprocess_env as env_of
from tests.support import DRES_ENV, TESTS
from worker.base.settings import Settings
from worker.dev.redis_server import RedisServer
from worker.edges.runtime import Runtime
from worker.engine.outcome import RunResult

pytestmark = pytest.mark.redis_server


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(data_dir=tmp_path / "redis").start()
    yield server
    server.stop()


@pytest.fixture
def api(store: RedisServer, tmp_path: Path) -> Iterator[ApiProcess]:
    env = env_of({**DRES_ENV, "DRES_REDIS_URL": store.url}, TESTS)
    api = ApiProcess.start(env, tmp_path / "api.log", ready=False)
    try:
        api.wait_ready()
        yield api
    finally:
        stop_all([api])


@pytest.fixture
def rt(store: RedisServer) -> Iterator[Runtime]:
    runtime = Runtime.from_settings(Settings(redis_url=store.url))
    yield runtime
    close_runtime(runtime)


def test_the_page_reconnects_after_a_redis_restart_and_shows_the_turn_once_to_its_end(
    browser: Any, api: ApiProcess, store: RedisServer, rt: Runtime, tmp_path: Path
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    try:
        page.goto(api.url + "/")
        status = send_message(page, "Count to four")
        turn_id = turn_id_of(page)
        run = rt.lifecycle.claim(turn_id, rt.ledger.meta(turn_id).next_run)
        assert run is not None
        say(rt, run, "one ", "two ")
        answer = page.get_by_test_id("answer").last
        expect(answer).to_have_text("one two")

        store.kill()
        expect(page.locator("#error")).to_contain_text("reconnecting")
        page.screenshot(path=str(tmp_path / "reconnecting.png"))

        store.start()
        say(rt, run, "three ", "four")
        rt.lifecycle.finish(run, RunResult("completed"))
        expect(status).to_have_text("completed")
        expect(answer).to_have_text("one two three four")
        expect(page.locator("#error")).to_be_hidden()
        page.screenshot(path=str(tmp_path / "reconnected.png"))
    finally:
        context.close()
    assert not problems, f"the page raised: {problems}"
