"""``dres worker`` and ``dres api`` refuse a Redis whose ``maxmemory-policy`` may evict dres's
keys (docs/configuration.md, ``DRES_ALLOW_EVICTION``), on real redis-servers and real processes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from structlog.testing import capture_logs

from rigs import ROOT, ApiProcess, subprocess_env
from rigs.scrape import Scrape, scrape
from tests.support import DRES_ENV, TESTS
from tests.support.fixtures import StartWorker, started
from worker.base.errors import ConfigError
from worker.base.settings import load_settings
from worker.dev.redis_server import RedisServer, free_port
from worker.edges.redis.policy import check_stores

pytestmark = pytest.mark.redis_server

ALLOWED = "Redis may evict dres's keys; starting anyway (DRES_ALLOW_EVICTION=1)"
UNREADABLE = "maxmemory-policy not readable: make sure it is noeviction"


def policy_of(server: RedisServer) -> str:
    client = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        return str(client.config_get("maxmemory-policy")["maxmemory-policy"])
    finally:
        client.close()


@pytest.fixture(scope="module", params=["allkeys-lru", "volatile-lru"])
def evicting(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    """A redis-server that may evict: its ``--maxmemory-policy`` after RedisServer's own
    ``noeviction`` (the later option wins, checked here)."""
    policy: str = request.param
    for server in started(
        lambda: RedisServer(extra=["--maxmemory-policy", policy]).start(), "a real redis-server"
    ):
        assert policy_of(server) == policy
        yield server


@pytest.fixture(scope="module")
def config_hidden() -> Iterator[RedisServer]:
    """A redis-server whose CONFIG is renamed away, as a managed Redis hides it."""
    yield from started(
        lambda: RedisServer(extra=["--rename-command", "CONFIG", ""]).start(),
        "a real redis-server",
    )


def env_on(server: RedisServer, **dres: str) -> dict[str, str]:
    """A dres subprocess's environment on ``server``, logging one JSON object per line."""
    return subprocess_env(
        {**DRES_ENV, "DRES_REDIS_URL": server.url, "DRES_LOG_FORMAT": "json", **dres}, TESTS
    )


def logged(text: str, event: str) -> list[dict[str, Any]]:
    """The JSON log lines of ``text`` whose event is ``event``."""
    found = []
    for line in text.splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            if entry.get("event") == event:
                found.append(entry)
    return found


@pytest.mark.parametrize("command", [["worker"], ["api", "--port", "0"]], ids=lambda c: c[0])
def test_a_worker_and_the_api_refuse_to_start_on_a_redis_that_may_evict_with_one_line(
    evicting: RedisServer, command: list[str]
) -> None:
    policy = policy_of(evicting)
    done = subprocess.run(
        [sys.executable, "-m", "worker.edges.cli", *command],
        cwd=ROOT,
        env=env_on(evicting),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("dres: ")]
    assert len(said) == 1, done.stderr
    assert said[0] == done.stderr.strip().splitlines()[-1]
    assert f"ledger's Redis at 127.0.0.1:{evicting.port} has maxmemory-policy {policy}" in said[0]
    assert "CONFIG SET maxmemory-policy noeviction" in said[0]
    assert "DRES_ALLOW_EVICTION=1" in said[0]


def test_with_allow_eviction_a_worker_starts_warns_and_serves_the_gauge(
    evicting: RedisServer, start_worker: StartWorker
) -> None:
    policy = policy_of(evicting)
    port = free_port()
    worker = start_worker(
        overrides=env_on(evicting, DRES_ALLOW_EVICTION="1", DRES_METRICS_PORT=str(port))
    )
    [warning] = logged(worker.log(), ALLOWED)
    assert (warning["level"], warning["store"], warning["policy"]) == (
        "warning",
        "ledger",
        policy,
    )
    assert warning["address"] == f"127.0.0.1:{evicting.port}"
    got = scrape(f"http://127.0.0.1:{port}/metrics")
    assert got.value("dres_store_eviction_allowed", store="ledger", policy=policy) == 1


def test_with_allow_eviction_the_api_starts_warns_and_serves_the_gauge(
    evicting: RedisServer, tmp_path: Path
) -> None:
    policy = policy_of(evicting)
    env = env_on(evicting, DRES_ALLOW_EVICTION="1")
    api = ApiProcess.start(env, tmp_path / "api.log", ready=False)
    try:
        api.wait_ready()
        [warning] = logged(api.log(), ALLOWED)
        assert (warning["level"], warning["store"], warning["policy"]) == (
            "warning",
            "ledger",
            policy,
        )
        got: Scrape = scrape(f"{api.url}/metrics")
        assert got.value("dres_store_eviction_allowed", store="ledger", policy=policy) == 1
    finally:
        api.stop()


def test_a_worker_starts_with_a_warning_on_a_redis_that_hides_config(
    config_hidden: RedisServer, start_worker: StartWorker
) -> None:
    worker = start_worker(overrides=env_on(config_hidden))
    [warning] = logged(worker.log(), "maxmemory-policy not readable: make sure it is noeviction")
    assert (warning["level"], warning["store"]) == ("warning", "ledger")
    assert "unknown command" in warning["error"]


def test_a_broker_that_may_evict_is_refused_though_the_ledgers_redis_does_not(
    redis_server: RedisServer, evicting: RedisServer
) -> None:
    settings = load_settings(redis_url=redis_server.url, broker_url=evicting.url)
    with pytest.raises(ConfigError) as refused:
        check_stores(settings)
    said = str(refused.value)
    assert f"the broker's Redis at 127.0.0.1:{evicting.port} has maxmemory-policy" in said
    assert "ledger's" not in said


def test_a_broker_and_ledger_on_noeviction_pass_without_a_word(redis_server: RedisServer) -> None:
    other = redis_server.url.replace("/0", "/1")
    settings = load_settings(redis_url=redis_server.url, broker_url=other)
    with capture_logs() as logs:
        readings = check_stores(settings)
    assert [e for e in logs if e["log_level"] != "debug"] == []
    assert [(r.store, r.policy) for r in readings] == [
        ("ledger", "noeviction"),
        ("broker", "noeviction"),
    ]
