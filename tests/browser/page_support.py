"""What the browser tests share: workers with a model of the test, sending a message through the
page's hooks, the page's newest turn, and killing a pool process mid-turn."""

from __future__ import annotations

import os
import signal
from typing import Any

from playwright.sync_api import expect

from ledger.store import Ledger
from rigs import WorkerProcess, having, wait_for
from tests.support.fixtures import StartWorker

#: limits (seconds) of a worker whose turn must stay in one chunk however slow the machine is
ONE_CHUNK = {
    "DRES_SOFT_LIMIT_S": "20",
    "DRES_HARD_LIMIT_S": "30",
    "DRES_VISIBILITY_TIMEOUT_S": "60",
}
#: a read-only call that lets a scripted step go on to the next model call
READ = {"name": "list_outbox"}


def model_worker(start_worker: StartWorker, model: str, **limits: str) -> WorkerProcess:
    """A worker whose default model (the one the page's turns get) is ``model``."""
    return start_worker(overrides={"DRES_MODEL": model, **limits})


def send_message(page: Any, message: str) -> Any:
    """Type and send a message; the new turn's status hook, once the page shows the turn."""
    statuses = page.get_by_test_id("turn-status")
    before = statuses.count()
    page.get_by_test_id("composer").fill(message)
    page.get_by_test_id("send").click()
    expect(statuses).to_have_count(before + 1)
    return statuses.last


def turn_id_of(page: Any) -> str:
    """The newest turn the page shows (its conversation's last)."""
    turn_id: str = page.locator("article.turn").last.get_attribute("data-turn-id")
    return turn_id


def kill_pool_child_mid_turn(worker: WorkerProcess, ledger: Ledger, turn_id: str) -> None:
    """SIGKILL the pool process while the turn's run waits in its long model step."""
    wait_for(ledger, turn_id, having("model_start", step=1), what="the long step")
    os.kill(worker.pool_child(), signal.SIGKILL)


#: a turn whose second model call thinks for 5 s the first time (time to kill its process)
LONG_SECOND_STEP = [
    {"text": "Starting.", "tool_calls": [{"name": "list_outbox"}]},
    {"delay_s": 5.0, "text": " Still going.", "tool_calls": [{"name": "list_outbox"}]},
    {"text": " Finished."},
]
