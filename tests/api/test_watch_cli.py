"""``dres watch`` as a person reads it, and ``worker.client.watch_turn`` (docs/commands.md,
docs/semantics.md, docs/architecture.md): the answer's text joined, a line per tool call,
"Resuming…" where a run picks the turn up, a status line; a time-limit stop continued on its own
unless told not to.
"""

from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path

import pytest
from api_support import Cli

from ledger.codec import Envelope
from ledger.events import ToolDone, ToolStart
from ledger.store import Ledger
from rigs import DONE, MULTI_CHUNK, ROOT, Script, WorkerProcess, crashed_stop, send, wait_until
from tests.support.fixtures import StartWorker
from worker.base.settings import get_settings
from worker.client import watch_turn
from worker.edges.cli.watch import PersonView
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server


def test_dres_watch_shows_the_answer_joined_a_line_per_tool_call_and_resuming(
    worker: WorkerProcess, cli: Cli, script: Script
) -> None:
    turn_id = cli("enqueue", "send it", "--model", script(MULTI_CHUNK)).stdout.strip()
    done = cli("watch", turn_id)

    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    calls = [line.split()[:2] for line in lines if line.startswith("  [")]
    assert calls == [["[completed]", "list_outbox"], ["[completed]", "send_email"]], lines
    assert "Resuming… (next chunk)" in lines
    text = "".join(line for line in lines if not line.startswith(("  [", "Resuming", "Compl")))
    assert "Let me look at the outbox before sending anything." in text
    assert text.endswith("Done: the email is sent.")
    assert lines[-1] == "Completed"


def test_dres_watch_shows_a_blocked_repeat_with_the_call_it_matched(
    worker: WorkerProcess, cli: Cli, script: Script
) -> None:
    model = script(
        [send("a@x.io", "Hi"), {"delay_s": 1.0, "text": "Thinking."}, DONE], on_resume="restart"
    )
    turn_id = cli("enqueue", "send it", "--model", model).stdout.strip()
    done = cli("watch", turn_id)

    assert done.returncode == 0, done.stdout + done.stderr
    calls = [line for line in done.stdout.splitlines() if line.startswith("  [")]
    assert calls[0].startswith("  [completed] send_email"), calls
    blocked = [line for line in calls if line.startswith("  [blocked] send_email")]
    assert len(blocked) == 1, calls
    assert "matched send_email" in blocked[0] and "not run" in blocked[0]


def watching(turn_id: str, env: dict[str, str], err: Path) -> subprocess.Popen[str]:
    """``dres watch TURN`` running, its stderr written to ``err`` as it comes."""
    with err.open("w") as err_file:
        return subprocess.Popen(
            [sys.executable, "-m", "worker.edges.cli", "watch", turn_id],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err_file,
            text=True,
        )


def test_dres_watch_says_once_when_no_worker_has_taken_the_turn_and_how_to_start_one(
    cli: Cli, start_worker: StartWorker, dres_env: dict[str, str], tmp_path: Path
) -> None:
    turn_id = cli("enqueue", "hello").stdout.strip()
    err = tmp_path / "watch.err"
    watch = watching(turn_id, dres_env, err)
    try:
        said = "No worker has taken the turn after 5 s: no worker is running"
        wait_until(lambda: said in err.read_text(), timeout=30, what="the no-worker line")
        start_worker()  # the watch goes on, and ends with the turn
        out, _ = watch.communicate(timeout=60)
    finally:
        watch.kill()
    lines = err.read_text().splitlines()
    assert lines == [f"{said} — start one with `dres worker`; still watching"], lines
    assert watch.returncode == 0, out
    assert out.splitlines()[-1] == "Completed", out


def test_dres_watch_with_a_worker_alive_elsewhere_says_it_is_not_taken_without_the_command(
    cli: Cli, start_worker: StartWorker, dres_env: dict[str, str], tmp_path: Path
) -> None:
    start_worker(extra=("-Q", "elsewhere"))  # alive, but not consuming the turn's queue
    turn_id = cli("enqueue", "hello").stdout.strip()
    err = tmp_path / "watch.err"
    watch = watching(turn_id, dres_env, err)
    try:
        wait_until(lambda: "still watching" in err.read_text(), timeout=30, what="the line")
    finally:
        watch.kill()
        watch.communicate(timeout=10)
    assert err.read_text().splitlines() == [
        "No worker has taken the turn after 5 s (1 worker is running: busy, or not consuming "
        "its queue); still watching"
    ]


def test_dres_watch_continues_a_crashed_stop_on_its_own_and_shows_resuming(
    worker: WorkerProcess, cli: Cli, script: Script, runtime: Runtime, ledger: Ledger
) -> None:
    turn_id = crashed_stop(runtime, script([DONE]))
    done = cli("watch", turn_id)

    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "Resuming… (continued automatically)" in lines
    assert lines[-1] == "Completed, continued automatically 1x"
    meta = ledger.meta(turn_id)
    assert (meta.status, meta.auto_continues) == ("completed", 1)


def test_dres_watch_with_no_auto_continue_leaves_a_crashed_stop_stopped(
    worker: WorkerProcess, cli: Cli, script: Script, runtime: Runtime, ledger: Ledger
) -> None:
    turn_id = crashed_stop(runtime, script([DONE]))
    done = cli("watch", turn_id, "--no-auto-continue")

    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "Stopped (crashed)"
    meta = ledger.meta(turn_id)
    assert (meta.status, meta.code, meta.auto_continues) == ("stopped", "crashed", 0)


def test_watch_turn_yields_the_events_until_the_end_continuing_a_crashed_stop_once(
    worker: WorkerProcess, script: Script, runtime: Runtime, ledger: Ledger
) -> None:
    get_settings.cache_clear()  # this test's environment (dres_env), not an earlier one's
    turn_id = crashed_stop(runtime, script([DONE]))

    events = list(watch_turn(turn_id))

    assert [e.type for e in events] == [e.type for e in ledger.events(turn_id)]
    causes = [e.cause for e in events if e.type == "run_started"]  # type: ignore[union-attr]
    assert causes == ["first", "auto_continue"]
    assert [e.status for e in events if e.type == "turn_ended"] == ["stopped", "completed"]  # type: ignore[union-attr]
    assert ledger.meta(turn_id).auto_continues == 1


def test_watch_turn_without_auto_continue_ends_at_the_stop(
    script: Script, runtime: Runtime, ledger: Ledger
) -> None:
    get_settings.cache_clear()
    turn_id = crashed_stop(runtime, script([DONE]))

    events = list(watch_turn(turn_id, auto_continue=False))

    assert events[-1].type == "turn_ended" and events[-1].code == "crashed"  # type: ignore[union-attr]
    assert ledger.meta(turn_id).auto_continues == 0


def test_a_call_agent_result_shows_the_child_turns_id_whole_however_long_the_answer() -> None:
    """The person's view names the child turn so it can be watched too (docs/semantics.md)."""
    child = "turn_" + "c" * 32
    header = {"turn_id": "turn_p", "run_id": "run_1", "chunk": 0, "ts": 1.0}
    start = ToolStart(
        event_id="ev_1",
        **header,
        call_id="call_1",
        tool="call_agent",
        input={"agent": "research", "message": "find it"},
        signature="s",
        read_only=False,
    )
    result = {"turn_id": child, "status": "completed", "text": "an answer " * 30}
    done = ToolDone(event_id="ev_2", **header, call_id="call_1", tool="call_agent", result=result)
    out = io.StringIO()
    view = PersonView(out)
    for n, event in enumerate((start, done)):
        view.show(Envelope(f"1-{n}", event))
    assert "[completed] call_agent" in out.getvalue()
    assert f"-> turn {child} " in out.getvalue()


def test_dres_watch_says_a_turn_waits_for_its_tenant_not_for_a_worker(
    cli: Cli, start_worker: StartWorker, dres_env: dict[str, str], tmp_path: Path
) -> None:
    """No worker: two turns go to the broker ahead of the workers (docs/semantics.md, tenants),
    the third waits in Redis for its tenant's turn — and the watch says so, not "no worker"."""
    for _ in range(2):
        cli("enqueue", "hello", "--tenant", "acme")
    turn_id = cli("enqueue", "hello", "--tenant", "acme").stdout.strip()
    err = tmp_path / "watch.err"
    watch = watching(turn_id, dres_env, err)
    try:
        said = "The turn waits for its tenant 'acme' after 5 s (2 running, 1 queued)"
        wait_until(lambda: said in err.read_text(), timeout=30, what="the tenant line")
        start_worker()
        out, _ = watch.communicate(timeout=60)
    finally:
        watch.kill()
    assert err.read_text().splitlines() == [f"{said}; still watching"]
    assert out.splitlines()[-1] == "Completed", out


def test_dres_watch_shows_a_timer_and_the_wake(
    worker: WorkerProcess, cli: Cli, script: Script
) -> None:
    wake_at = time.time() + 2
    remind = {"name": "remind_at", "input": {"at": wake_at, "label": "a"}}
    model = script([{"text": "", "tool_calls": [remind]}, DONE])
    turn_id = cli("enqueue", "remind me", "--model", model).stdout.strip()
    done = cli("watch", turn_id)

    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    waited = [line for line in lines if line.startswith("  [waiting] until ")]
    assert len(waited) == 1 and "remind_at set a timer; no worker waits" in waited[0], lines
    assert "Resuming… (its timer fell due)" in lines
    assert lines[-1] == "Completed"
