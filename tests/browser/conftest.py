"""Browser fixtures: Debian's chromium driven by Playwright, the page of a real ``dres api``.

Everything runs as ``dres up`` runs it: the session's private redis-server, a ``dres api``
subprocess serving the page, and a prefork ``dres worker`` per test (``start_worker``, with the
test's own limits and model). Playwright cannot download a browser here, so it launches
``/usr/bin/chromium`` (``scripts/ensure-chromium`` installs it): a missing one skips these tests
locally and fails them under ``CI=true``. Each test gets a fresh browser context (its own
localStorage) at 1280 x 900 and leaves a screenshot in its tmp_path.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rigs import ApiProcess, stop_all, subprocess_env
from tests.support import DRES_ENV, IN_CI, TESTS
from worker.dev.redis_server import RedisServer

CHROMIUM = Path("/usr/bin/chromium")
#: the machine's network is closed: chromium must not try to reach anything on its own
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: ms a browser-side wait may take (a turn with a crash and a pickup takes a few seconds)
WAIT_MS = 30_000


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI=true requires the browser tests to run: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium for one module's tests. Playwright's sync API runs an event loop in this thread
    while it is open, so it is closed after each module: the rest of the suite (an async tool
    runs its coroutine with ``asyncio.run``) sees no loop running."""
    if not CHROMIUM.exists():
        _unavailable(f"no {CHROMIUM} (run scripts/ensure-chromium)")
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed (the dev extra has it)")
    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        yield launched
        launched.close()


@pytest.fixture(scope="session")
def page_api(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiProcess]:
    """A ``dres api`` serving the page, for the session (it keeps no state outside Redis)."""
    env = subprocess_env({**DRES_ENV, "DRES_REDIS_URL": redis_server.url}, TESTS)
    api = ApiProcess.start(env, tmp_path_factory.mktemp("page-api") / "api.log", ready=False)
    try:
        api.wait_ready()
        yield api
    finally:
        stop_all([api])


@pytest.fixture
def page(browser: Any, page_api: ApiProcess, redis_url: str, tmp_path: Path) -> Iterator[Any]:
    """The page in a fresh context, on this test's empty Redis; a screenshot when the test ends."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    opened = context.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(str(error)))
    opened.goto(page_api.url + "/")
    yield opened
    opened.screenshot(path=str(tmp_path / "page.png"), full_page=True)
    context.close()
    assert not problems, f"the page raised: {problems}"
