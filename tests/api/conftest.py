"""API and CLI fixtures: ``dres api`` servers as subprocesses, HTTP clients of them, the CLI.

Redis, the dres settings and runtime, ``worker`` (a prefork ``dres worker`` of this test) and
``script`` are the shared fixtures of ``tests.support.fixtures``; every test starts on an empty
Redis (``flushall``). The ``dres api`` servers (uvicorn; one open, one requiring a bearer token)
are subprocesses shared by the session: the API keeps no state of its own outside Redis, and it
publishes chunk messages through the broker's default exchange, so a ``flushall`` leaves nothing
behind that it relies on. Each is ready when it answers GET /healthz, polled with a deadline, and
is stopped by PID in a finalizer (SIGTERM, then SIGKILL of its process group). ``node_clients``
is ``tests/node`` with the chat front ends' own clients installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from api_support import APPROVERS, NODE_DIR, TOKEN, Cli, StartApi

from rigs import ROOT, ApiProcess, stop_all, subprocess_env
from rigs.scripts import Script, script_writer
from tests.support import DRES_ENV, TESTS
from worker.dev.redis_server import RedisServer

#: seconds an HTTP request may take (an event stream: between two chunks of it)
HTTP_TIMEOUT_S = 10.0
#: scripted-model files a test may hand the session's servers (DRES_MODELS lists each)
SCRIPT_SLOTS = 4


@pytest.fixture(scope="session")
def api_script_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where ``script`` writes in these tests: files the session's servers allow by name."""
    return tmp_path_factory.mktemp("api-scripts")


@pytest.fixture
def script(api_script_dir: Path) -> Script:
    """``script(steps)`` as everywhere, but written to ``script-N.json`` (N = 1, 2, … of this
    test) in ``api_script_dir``, a spec the API servers' DRES_MODELS lists."""
    return script_writer(api_script_dir)


@pytest.fixture(scope="session")
def api_servers(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory, api_script_dir: Path
) -> Iterator[StartApi]:
    """Start ``dres api`` on a free loopback port, ready on /healthz: ``start(token=None,
    **DRES_…)`` (more settings of that server, such as ``DRES_APPROVER_TOKENS``).

    The servers live for the session (the finalizer stops each by PID).
    """
    started: list[ApiProcess] = []
    log_dir = tmp_path_factory.mktemp("api")
    slots = [f"scripted:{api_script_dir / f'script-{n}.json'}" for n in range(1, SCRIPT_SLOTS + 1)]

    def start(token: str | None = None, **settings: str) -> ApiProcess:
        dres = {**DRES_ENV, "DRES_REDIS_URL": redis_server.url, "DRES_MODELS": ",".join(slots)}
        dres |= settings | ({"DRES_API_TOKEN": token} if token else {})
        env = subprocess_env(dres, TESTS)
        api = ApiProcess.start(env, log_dir / f"api-{len(started) + 1}.log", ready=False)
        started.append(api)
        api.wait_ready()
        return api

    yield start
    stop_all(started)


@pytest.fixture(scope="session")
def api(api_servers: StartApi) -> ApiProcess:
    """The session's ``dres api`` without a token."""
    return api_servers()


@pytest.fixture(scope="session")
def guarded_api(api_servers: StartApi) -> ApiProcess:
    """The session's ``dres api`` that requires the bearer token ``TOKEN``."""
    return api_servers(token=TOKEN)


def client_of(server: ApiProcess) -> Iterator[httpx.Client]:
    """A client of ``server``; what the server logged meanwhile is shown if the test fails."""
    offset = server.log_path.stat().st_size
    with httpx.Client(base_url=server.url, timeout=HTTP_TIMEOUT_S) as client:
        yield client
    with server.log_path.open("rb") as log:
        log.seek(offset)
        print(f"--- {server.name} (pid {server.pid}) during the test ---")
        print(log.read()[-6000:].decode(errors="replace"))


@pytest.fixture(scope="session")
def approvers_api(api_servers: StartApi) -> ApiProcess:
    """The session's ``dres api`` with the token ``TOKEN`` and the approvers ``APPROVERS``."""
    return api_servers(token=TOKEN, DRES_APPROVER_TOKENS=json.dumps(APPROVERS))


@pytest.fixture
def http(api: ApiProcess, redis_url: str) -> Iterator[httpx.Client]:
    """A client of the open server, on an empty Redis."""
    yield from client_of(api)


@pytest.fixture
def guarded(guarded_api: ApiProcess, redis_url: str) -> Iterator[httpx.Client]:
    """A client of the server that requires the token (sent by no request by default)."""
    yield from client_of(guarded_api)


@pytest.fixture
def approving(approvers_api: ApiProcess, redis_url: str) -> Iterator[httpx.Client]:
    """A client of the server with approvers (sending no token by default)."""
    yield from client_of(approvers_api)


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


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: the chat clients' tests must run)")
    pytest.skip(f"SKIPPED LOUDLY: {reason}")


@pytest.fixture(scope="session")
def node_clients() -> Path:
    """``tests/node`` with its packages installed (``npm ci``, once): the chat front ends' own
    clients, driven by the node scripts there. Without node, or when the packages cannot be
    installed, the tests that use them skip with the reason, except under ``CI=true``."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        _missing("node and npm are needed for the chat clients' tests")
    if not (NODE_DIR / "node_modules" / "ai").is_dir():
        done = subprocess.run(
            [str(npm), "ci", "--no-audit", "--no-fund"],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            _missing(f"npm ci in tests/node failed: {done.stderr[-2000:]}")
    return NODE_DIR
