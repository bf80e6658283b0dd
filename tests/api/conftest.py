"""API and CLI fixtures: a real redis-server, ``dres api`` and ``dres worker`` as subprocesses.

Every test starts on an empty Redis (``flushall``). The ``dres api`` servers (uvicorn; one open,
one requiring a bearer token) are subprocesses shared by the session: the API keeps no state of
its own outside Redis, and it publishes chunk messages through the broker's default exchange, so
a ``flushall`` leaves nothing behind that it relies on. A test that needs turns to run gets its
own prefork ``dres worker``. Each subprocess runs in its own session, is ready when it answers
(GET /healthz) or says so ("ready."), polled with a deadline, and is stopped by PID in a
finalizer (SIGTERM, then SIGKILL of its process group).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from api_support import ROOT, TOKEN, Cli, Script, Service, StartApi

from ledger.store import Ledger
from worker.base.settings import Settings, load_settings
from worker.dev.redis_server import RedisServer, free_port
from worker.edges.runtime import Runtime

TESTS = ROOT / "tests"

#: the dres settings of these tests: 0.5 s soft limits, a 3 s hard limit, a fast reaper
DRES_ENV = {
    "DRES_TOOLS": "worker.dev.demo_tools,sample_tools",
    "DRES_SOFT_LIMIT_S": "0.5",
    "DRES_HARD_LIMIT_S": "3",
    "DRES_BG_SOFT_LIMIT_S": "0.5",
    "DRES_BG_HARD_LIMIT_S": "3",
    "DRES_VISIBILITY_TIMEOUT_S": "8",
    "DRES_LEASE_S": "1",
    "DRES_HANDOFF_GRACE_S": "1",
    "DRES_REAPER_INTERVAL_S": "0.2",
    "DRES_CANCEL_POLL_S": "0.05",
}
#: seconds an HTTP request may take (an event stream: between two chunks of it)
HTTP_TIMEOUT_S = 10.0


# -- Redis and the environment ------------------------------------------------------------------


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session's real redis-server, emptied for this test."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    return redis_server.url


@pytest.fixture
def rdb(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, socket_timeout=30)
    yield client
    client.close()


@pytest.fixture
def ledger(rdb: redis.Redis) -> Ledger:
    return Ledger(rdb)


def subprocess_env(redis_url: str, **extra: str) -> dict[str, str]:
    """The environment of a dres subprocess: this one's without DRES_*, then the tests' DRES_*."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("DRES_")}
    pythonpath = os.pathsep.join(p for p in (str(TESTS), base.get("PYTHONPATH", "")) if p)
    return {**base, **DRES_ENV, "DRES_REDIS_URL": redis_url, "PYTHONPATH": pythonpath, **extra}


@pytest.fixture
def dres_env(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The whole environment of this test's subprocesses; its DRES_* are set here too."""
    for name in list(os.environ):
        if name.startswith("DRES_"):
            monkeypatch.delenv(name)
    for name, value in {**DRES_ENV, "DRES_REDIS_URL": redis_url}.items():
        monkeypatch.setenv(name, value)
    return subprocess_env(redis_url)


@pytest.fixture
def settings(dres_env: dict[str, str]) -> Settings:
    return load_settings()


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    """dres in this process (ledger, control), for turns crafted at the ledger level."""
    rt = Runtime.from_settings(settings)
    yield rt
    if "app" in rt.__dict__:
        rt.app.close()
    if "redis" in rt.__dict__:
        rt.redis.close()


# -- subprocesses -------------------------------------------------------------------------------


def stop_all(services: list[Service]) -> None:
    for service in services:
        service.terminate()  # all at once: their shutdowns overlap
    for service in services:
        service.stop()


@pytest.fixture
def services() -> Iterator[list[Service]]:
    """Every subprocess this test started; the finalizer stops each by PID."""
    started: list[Service] = []
    yield started
    stop_all(started)
    for service in started:
        # Shown by pytest only when the test failed.
        print(f"--- {service.name} (pid {service.pid}) ---\n{service.log()[-6000:]}")


def _spawn(
    name: str, argv: list[str], env: dict[str, str], log_dir: Path, services: list[Service]
) -> Service:
    log_path = log_dir / f"{name}-{len(services) + 1}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    service = Service(name, process, log_path)
    services.append(service)
    return service


@pytest.fixture(scope="session")
def api_servers(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StartApi]:
    """Start ``dres api`` on a free loopback port, ready on /healthz: ``start(token=None)``.

    The servers live for the session (the finalizer stops each by PID).
    """
    started: list[Service] = []
    log_dir = tmp_path_factory.mktemp("api")

    def start(token: str | None = None) -> Service:
        port = free_port()
        env = subprocess_env(redis_server.url, **({"DRES_API_TOKEN": token} if token else {}))
        argv = [sys.executable, "-m", "worker.edges.cli", "api", "--host", "127.0.0.1"]
        argv += ["--port", str(port)]
        api = _spawn("api", argv, env, log_dir, started)
        api.url = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            try:
                return httpx.get(f"{api.url}/healthz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        api.wait(healthy)
        return api

    yield start
    stop_all(started)


@pytest.fixture(scope="session")
def api(api_servers: StartApi) -> Service:
    """The session's ``dres api`` without a token."""
    return api_servers()


@pytest.fixture(scope="session")
def guarded_api(api_servers: StartApi) -> Service:
    """The session's ``dres api`` that requires the bearer token ``TOKEN``."""
    return api_servers(token=TOKEN)


def client_of(server: Service) -> Iterator[httpx.Client]:
    """A client of ``server``; what the server logged meanwhile is shown if the test fails."""
    offset = server.log_path.stat().st_size
    with httpx.Client(base_url=server.url, timeout=HTTP_TIMEOUT_S) as client:
        yield client
    with server.log_path.open("rb") as log:
        log.seek(offset)
        print(f"--- {server.name} (pid {server.pid}) during the test ---")
        print(log.read()[-6000:].decode(errors="replace"))


@pytest.fixture
def http(api: Service, redis_url: str) -> Iterator[httpx.Client]:
    """A client of the open server, on an empty Redis."""
    yield from client_of(api)


@pytest.fixture
def guarded(guarded_api: Service, redis_url: str) -> Iterator[httpx.Client]:
    """A client of the server that requires the token (sent by no request by default)."""
    yield from client_of(guarded_api)


@pytest.fixture
def worker(dres_env: dict[str, str], tmp_path: Path, services: list[Service]) -> Service:
    """A ready prefork ``dres worker`` with one pool process, on this test's empty Redis."""
    argv = [sys.executable, "-m", "worker.edges.cli", "worker", "-c", "1", "--without-heartbeat"]
    process = _spawn("worker", argv, dres_env, tmp_path, services)
    process.wait(lambda: "ready." in process.log())
    return process


# -- scripts and the CLI ------------------------------------------------------------------------


@pytest.fixture
def script(tmp_path: Path) -> Script:
    """Write a scripted-model file (CONTRACT §5); returns its model spec ``scripted:PATH``."""
    counter = iter(range(1, 1_000_000))

    def write(steps: list[dict[str, Any]], on_resume: str = "continue") -> str:
        path = tmp_path / f"script-{next(counter)}.json"
        path.write_text(json.dumps({"steps": steps, "on_resume": on_resume}))
        return f"scripted:{path}"

    return write


@pytest.fixture
def cli(dres_env: dict[str, str]) -> Cli:
    """Run ``dres ARGS…`` (``python -m worker.edges.cli``): ``cli(*args, env={…overrides})``."""

    def run(
        *args: str, env: dict[str, str] | None = None, timeout: float = 25
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "worker.edges.cli", *args],
            cwd=ROOT,
            env={**dres_env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run
