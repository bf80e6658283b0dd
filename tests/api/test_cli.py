"""The ``dres`` command (docs/commands.md, docs/http-api.md), run as a subprocess against the real
redis-server.

Bad input, bad configuration and an unreachable Redis: exit status 2 and one line on stderr.
"""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
import time

import pytest
import redis
from api_support import Cli, expected_journal, turn_with_calls

from ledger import keys
from ledger.store import Ledger
from rigs import MULTI_CHUNK, ROOT, Script, WorkerProcess, crashed_stop
from worker.dev.redis_server import free_port
from worker.edges.runtime import Runtime

TURN_ID = re.compile(r"^turn_[0-9a-f]{32}$")
#: a line of ``dres watch --events``: the stream id, the chunk, the event type
EVENT_LINE = re.compile(r"^\s*(\d+-\d+)\s+c(\d+)\s+(\w+)")


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def test_dres_enqueue_prints_the_turn_id_of_the_turn_it_recorded(
    cli: Cli, ledger: Ledger, rdb: redis.Redis
) -> None:
    done = cli("enqueue", "file the report", "--conversation", "conv-cli", "--background")
    assert done.returncode == 0, done.stderr
    turn_id = done.stdout.strip()
    assert TURN_ID.match(turn_id), done.stdout
    started = ledger.events(turn_id)[0]
    assert started.type == "turn_started"
    assert (started.message, started.conversation_id, started.mode) == (  # type: ignore[union-attr]
        "file the report",
        "conv-cli",
        "background",
    )
    assert rdb.lrange(keys.conversation_turns("conv-cli"), 0, -1) == [turn_id.encode()]


def test_dres_watch_events_follows_a_turn_from_its_start_to_its_end_and_exits_0_on_completed(
    worker: WorkerProcess, cli: Cli, script: Script, ledger: Ledger
) -> None:
    turn_id = cli("enqueue", "send it", "--model", script(MULTI_CHUNK)).stdout.strip()
    done = cli("watch", turn_id, "--events")

    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    printed = [m.groups() for line in lines if (m := EVENT_LINE.match(line))]
    recorded = [(e.stream_id, str(e.event.chunk), e.event.type) for e in ledger.read_turn(turn_id)]
    assert printed == recorded  # every event once, in order, across the chunk boundary
    assert any(chunk != "0" for _, chunk, _ in printed)
    assert lines[-1] == "Completed"


def test_dres_stop_cancels_a_queued_turn_and_dres_watch_then_exits_1_saying_so(
    cli: Cli, ledger: Ledger
) -> None:
    turn_id = cli("enqueue", "never mind").stdout.strip()  # no worker: it stays queued
    stopped = cli("stop", turn_id)
    assert stopped.returncode == 0, stopped.stderr
    watched = cli("watch", turn_id)
    assert watched.returncode == 1, watched.stdout + watched.stderr
    assert watched.stdout.splitlines()[-1] == "Stopped (cancelled)"
    meta = ledger.meta(turn_id)
    assert (meta.status, meta.code) == ("stopped", "cancelled")


def test_dres_journal_prints_a_table_and_with_json_the_journal_as_json(
    cli: Cli, runtime: Runtime
) -> None:
    turn_id = turn_with_calls(runtime)

    table = cli("journal", turn_id)
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split()[:3] == ["state", "tool", "call_id"]
    assert [row.split()[:3] for row in rows] == [
        ["completed", "send_email", "call-1"],
        ["interrupted", "create_ticket", "call-2"],
    ]

    as_json = cli("journal", turn_id, "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == {"turn_id": turn_id, **expected_journal()}


@pytest.mark.parametrize("command", ["continue", "stop", "watch", "journal"])
def test_a_command_on_an_unknown_turn_exits_2_with_one_line(cli: Cli, command: str) -> None:
    done = cli(command, "turn_nope")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "turn_nope" in one_line(done.stderr)
    assert done.stdout == ""


def test_every_command_exits_2_with_one_line_naming_redis_when_redis_is_unreachable(
    dres_env: dict[str, str],
) -> None:
    closed = f"redis://127.0.0.1:{free_port()}/0"
    env = {**dres_env, "DRES_REDIS_URL": closed}
    commands = [["enqueue", "hello"], ["watch", "t1"], ["journal", "t1"]]
    commands += [["continue", "t1"], ["stop", "t1"]]
    commands += [["approvals"], ["approve", "t1", "a1"], ["deny", "t1", "a1", "--reason", "no"]]
    running = [
        (
            command,
            subprocess.Popen(
                [sys.executable, "-m", "worker.edges.cli", *command],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
        for command in commands
    ]
    for command, process in running:
        out, err = process.communicate(timeout=25)
        assert process.returncode == 2, (command, out, err)
        assert "redis" in one_line(err).lower(), (command, err)


def test_dres_enqueue_with_the_broker_down_exits_2_with_one_line_naming_the_broker(
    cli: Cli, rdb: redis.Redis
) -> None:
    """The ledger's Redis is up, the broker is not: one line naming the broker, exit 2, no
    traceback, and no turn left behind (the enqueue takes its record back)."""
    port = free_port()
    broker = f"redis://127.0.0.1:{port}/0"
    # a cold start and the publish's own retries take seconds: room for a busy machine
    done = cli("enqueue", "hello", env={"DRES_BROKER_URL": broker}, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    line = one_line(done.stderr)
    assert line.startswith("dres: cannot reach the broker"), line
    assert f"127.0.0.1:{port}" in line, line
    assert done.stdout == ""
    assert rdb.dbsize() == 0


def test_dres_api_refuses_a_non_loopback_bind_without_a_token(cli: Cli) -> None:
    done = cli("api", "--host", "0.0.0.0", "--port", str(free_port()), timeout=15)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "DRES_API_TOKEN" in one_line(done.stderr)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        pytest.param(["enqueue", "  "], ["message"], id="blank-message"),
        pytest.param(["enqueue"], ["message"], id="missing-message"),
        pytest.param(["journal", "a{b}"], ["a{b}"], id="bad-turn-id"),
        pytest.param(["enqueue", "hi", "--priority", "1"], ["--priority"], id="unknown-option"),
        pytest.param(["frobnicate"], ["frobnicate"], id="unknown-command"),
    ],
)
def test_bad_input_to_the_cli_exits_2_with_one_line_naming_it(
    cli: Cli, rdb: redis.Redis, args: list[str], words: list[str]
) -> None:
    done = cli(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    line = one_line(done.stderr)
    for word in words:
        assert word in line, line
    assert rdb.dbsize() == 0  # nothing recorded


def test_dres_watch_of_a_continued_turn_follows_it_past_its_earlier_stop(
    dres_env: dict[str, str], runtime: Runtime, ledger: Ledger
) -> None:
    """The replayed turn_ended of the stop a Continue superseded does not end the watch."""
    turn_id = crashed_stop(runtime)
    assert runtime.lifecycle.continue_turn(turn_id, auto=False).ok  # queued again, no worker
    watch = subprocess.Popen(
        [sys.executable, "-m", "worker.edges.cli", "watch", turn_id, "--events"],
        cwd=ROOT,
        env=dres_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines: queue.Queue[str] = queue.Queue()
        reader = threading.Thread(target=lambda: [lines.put(x) for x in watch.stdout or ()])
        reader.start()
        replayed = []
        deadline = time.monotonic() + 15
        while not any(" turn_ended " in line for line in replayed):
            replayed.append(lines.get(timeout=max(0.1, deadline - time.monotonic())))
        assert runtime.lifecycle.stop(turn_id).ok  # cancelled before its run starts
        watch.wait(timeout=15)
        reader.join(timeout=5)
        err = watch.stderr.read() if watch.stderr else ""
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    output = replayed + list(lines.queue)
    assert output[-1].strip() == "Stopped (cancelled)", output
    assert watch.returncode == 1, err
    printed = [m.group(1) for line in output if (m := EVENT_LINE.match(line))]
    assert printed == [e.stream_id for e in ledger.read_turn(turn_id)]
