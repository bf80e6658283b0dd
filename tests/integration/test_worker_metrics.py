"""A worker's Prometheus metrics on DRES_METRICS_PORT (docs/configuration.md, docs/http-api.md): its
pool processes' values served together (multiprocess mode), agreeing with the ledger."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from sample_tools import effects

from rigs import DONE, having, send, slow_write, think, wait_for, wait_until
from rigs.scrape import Scrape, scrape
from rigs.waiting import ended, of
from tests.support.fixtures import StartWorker
from worker.dev.redis_server import free_port
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server

#: seconds: longer than the 0.5 s soft limit, so the step's first attempt ends chunk 0
PAST_THE_LIMIT_S = 0.8


def metrics_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/metrics"


def test_a_two_process_worker_serves_its_pools_counts_of_a_turn_with_a_blocked_duplicate(
    runtime: Runtime, start_worker: StartWorker, script: Callable[..., str]
) -> None:
    """Chunk 0 sends the email and hits its soft limit; chunk 1's model (restart) re-issues the
    send, which is blocked. The worker's port counts exactly what the ledger records."""
    port = free_port()
    start_worker(concurrency=2, overrides={"DRES_METRICS_PORT": str(port)})
    model = script([send("a@x.io", "A"), think(PAST_THE_LIMIT_S), DONE], on_resume="restart")
    turn = runtime.lifecycle.enqueue("email a", model=model)
    events = wait_for(runtime.ledger, turn.turn_id, ended("completed"), timeout=20)
    blocked = of(events, "tool_blocked")
    assert [(e.tool, e.reason) for e in blocked] == [("send_email", "completed")]
    ran = [e for e in of(events, "tool_done") if not e.is_error]

    def settled() -> Scrape | None:
        # a pool process counts a chunk's end just after the ledger has it
        got = scrape(metrics_url(port))
        done = got.value("dres_chunk_duration_seconds_count", mode="foreground", ended="completed")
        return got if done else None

    got = wait_until(settled, timeout=5, what="the completed chunk counted")
    assert got.value("dres_tool_calls_total", outcome="blocked") == 1
    assert got.value("dres_tool_calls_total", outcome="ran") == len(ran)
    assert got.value("dres_tool_calls_total", outcome="refused") == 0
    assert got.value("dres_duplicates_prevented_total", reason="completed") == 1
    assert got.total("dres_duplicates_prevented_total") == 1
    assert got.value("dres_turns_ended_total", status="completed", code="") == 1
    assert got.total("dres_turns_ended_total", status="stopped") == 0
    assert got.value("dres_chunk_duration_seconds_count", mode="foreground", ended="chained") == 1

    # The hand-over measured on the ledger's record: chunk 0's run_ended -> chunk 1's run_started
    [limit] = of(events, "run_ended", reason="soft_limit")
    [resumed] = of(events, "run_started", chunk=1)
    assert got.value("dres_chunk_handoff_seconds_count") == 1
    assert got.value("dres_chunk_handoff_seconds_sum") == pytest.approx(resumed.ts - limit.ts)
    print(f"hand-over: {(resumed.ts - limit.ts) * 1000:.1f} ms")
    appends = got.value("dres_ledger_append_seconds_count")
    assert appends >= len(ran) + len(blocked)  # each tool_done and tool_blocked is an append
    mean_ms = got.value("dres_ledger_append_seconds_sum") / appends * 1000
    print(f"ledger appends: {appends:.0f}, mean {mean_ms:.2f} ms")


def test_a_killed_pool_processs_stop_and_the_refused_retry_after_continue_are_counted(
    runtime: Runtime, start_worker: StartWorker, script: Callable[..., str], tmp_path: Path
) -> None:
    """A foreground turn's pool process is SIGKILLed after its write's effect: the turn stops
    (crashed, by the reaper or the redelivered message); after Continue the identical retry of
    the interrupted write is refused and the turn completes. The dead process's counts stay."""
    port = free_port()
    directory = tmp_path / "prometheus"
    overrides = {"DRES_METRICS_PORT": str(port), "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    worker = start_worker(overrides=overrides)
    model = script([slow_write("report"), DONE], on_resume="restart")
    turn = runtime.lifecycle.enqueue("write the report", model=model)
    wait_for(runtime.ledger, turn.turn_id, having("tool_start", tool="slow_write"))
    wait_until(lambda: effects(runtime.redis, "slow_write"), timeout=2, what="the write's effect")
    killed = worker.pool_child()
    os.kill(killed, signal.SIGKILL)
    wait_for(runtime.ledger, turn.turn_id, ended("stopped"), timeout=15, what="the stop")

    assert runtime.lifecycle.continue_turn(turn.turn_id, auto=False).ok
    events = wait_for(runtime.ledger, turn.turn_id, ended("completed"), timeout=10)
    [blocked] = of(events, "tool_blocked")
    assert (blocked.tool, blocked.reason) == ("slow_write", "interrupted")

    def settled() -> Scrape | None:
        got = scrape(metrics_url(port))
        return got if got.value("dres_turns_ended_total", status="completed", code="") else None

    got = wait_until(settled, timeout=5, what="the completed turn counted")
    assert got.value("dres_turns_ended_total", status="stopped", code="crashed") == 1
    assert got.value("dres_tool_calls_total", outcome="refused") == 1
    assert got.value("dres_duplicates_prevented_total", reason="interrupted") == 1
    assert got.value("dres_tool_calls_total", outcome="ran") == 0, "the write never finished"
    assert (directory / f"histogram_{killed}.db").exists(), "its appends stay in the sum"
    print("reaper:", {k: v for k, v in got.samples.items() if k[0] == "dres_reaper_actions_total"})


def test_a_worker_empties_the_given_metrics_directory_of_a_previous_runs_files(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    directory = tmp_path / "prometheus"
    directory.mkdir()
    stale = directory / "counter_999999.db"
    stale.write_bytes(b"not a metrics file of this run")
    port = free_port()
    overrides = {"DRES_METRICS_PORT": str(port), "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    start_worker(concurrency=2, overrides=overrides)

    got = scrape(metrics_url(port))

    assert not stale.exists()
    assert got.value("dres_tool_calls_total", outcome="blocked") == 0
    named = {"dres_tool_calls", "dres_turns_ended", "dres_duplicates_prevented"}
    assert named <= set(got.families)
    assert any(directory.glob("*.db")), "the processes write their values there"


def test_a_metrics_port_in_use_fails_the_worker_at_start_naming_the_variable(
    start_worker: StartWorker,
) -> None:
    with socket.create_server(("0.0.0.0", 0)) as taken:
        port = taken.getsockname()[1]
        worker = start_worker(overrides={"DRES_METRICS_PORT": str(port)}, ready=False)

        assert worker.process.wait(timeout=20) == 2
    lines = [line for line in worker.log().splitlines() if "DRES_METRICS_PORT" in line]
    assert lines and f"port {port}" in lines[0], worker.log()


def listening(port: int) -> list[str]:
    """The local addresses of the sockets listening on ``port`` on this machine, read from
    the kernel's own tables (``/proc/net/tcp`` and ``tcp6``)."""
    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port and len(address) == width:
                # IPv4: one little-endian word; IPv6: four of them
                raw = b"".join(bytes.fromhex(address[i : i + 8])[::-1] for i in range(0, width, 8))
                found.append(
                    socket.inet_ntop(socket.AF_INET if width == 8 else socket.AF_INET6, raw)
                )
    return found


@pytest.mark.parametrize(("host", "address"), [(None, "127.0.0.1"), ("0.0.0.0", "0.0.0.0")])
def test_a_workers_metrics_listen_on_loopback_unless_dres_metrics_host_says_otherwise(
    start_worker: StartWorker, host: str | None, address: str
) -> None:
    port = free_port()
    overrides = {"DRES_METRICS_PORT": str(port)}
    if host is not None:
        overrides["DRES_METRICS_HOST"] = host
    start_worker(overrides=overrides)

    assert "dres_tool_calls" in scrape(metrics_url(port)).families  # it answers on loopback
    assert listening(port) == [address]
