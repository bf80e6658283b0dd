"""Compose without Docker (issue 15): the ``worker`` and ``api`` services of ``compose.yaml``,
their ``command``, ``environment`` and healthchecks read from the file, run as real processes
against a real redis-server; a turn enqueued through the api service is completed by the worker
service.

What stands in for Docker, and why:
- the redis service is its own command (``--requirepass`` among its options) run as a
  redis-server process on a free port here, and its host (``redis:6379`` on the compose network,
  after the password in the dres services' URLs) becomes that port;
- each container has a network of its own, these processes share this host's: the API's
  container port and the worker's ``DRES_METRICS_PORT`` become free ports here, and the API's
  healthcheck asks that port;
- the shell's (or ``.env``'s) variables are a dict: ``DRES_API_TOKEN`` and ``REDIS_PASSWORD``
  (compose requires both), ``DRES_MODELS``
  listing this test's scripted model, and ``WORKER_CONCURRENCY=1`` (one pool process, fewer
  forks on a shared two-core machine). Every other value is compose's own, time limits included.
- under the ha profile, the sentinel-N services are three sentinels here run with compose's own
  ``sentinel-conf`` (its ``redis 6379`` a private primary, with a replica, both wanting the
  password), and the variables
  add the header's ``DRES_REDIS_SENTINELS`` and ``DRES_REDIS_MASTER``, their names this host's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import redis
from compose_support import HA_VARIABLES, Service, interpolate, load, service

from ledger.store import Ledger
from rigs import (
    ROOT,
    ApiProcess,
    DresProcess,
    Script,
    WorkerProcess,
    of,
    send,
    stop_all,
    subprocess_env,
    wait_until,
)
from rigs.redis_sentinel import LocalSentinel
from tests.support.fixtures import started as rig_started
from worker.dev.redis_server import RedisServer, free_port

TOKEN = "compose-test-token-0123456789abcdef"
PASSWORD = "compose-test-redis-password"
#: the variables compose.yaml requires (from .env or the shell)
SECRETS = {"DRES_API_TOKEN": TOKEN, "REDIS_PASSWORD": PASSWORD}
#: where compose's services find redis: the service name on the compose network
COMPOSE_REDIS = "@redis:6379"
#: the API's port inside its container (compose maps a host port to it)
CONTAINER_PORT = "8000"
#: seconds a healthcheck may take here (compose gives the worker's 15)
HEALTHCHECK_S = 30
#: seconds the turn may take from its POST to completed
TURN_S = 30


def on_this_host(environment: Mapping[str, str], redis_url: str) -> dict[str, str]:
    """The service's environment with the redis service replaced by the test's redis-server."""
    host = urlsplit(redis_url).netloc.rpartition("@")[2]
    return {name: value.replace(COMPOSE_REDIS, f"@{host}") for name, value in environment.items()}


@pytest.fixture
def compose_redis() -> Iterator[RedisServer]:
    """The redis service: its own command's options (the password it requires among them),
    run as a redis-server here."""
    redis_service = service("redis", SECRETS)
    assert redis_service.command[0] == "redis-server"
    options = {"password": PASSWORD}

    def start() -> RedisServer:
        return RedisServer(extra=redis_service.command[1:], client_options=options).start()

    yield from rig_started(start, "a real redis-server")


def url_of(server: RedisServer) -> str:
    return f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0"


def run_healthcheck(check: list[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """A CMD healthcheck as Docker runs it in the container: ``python`` is this interpreter."""
    argv = [sys.executable if check[0] == "python" else check[0], *check[1:]]
    return subprocess.run(
        argv, cwd=ROOT, env=dict(env), capture_output=True, text=True, timeout=HEALTHCHECK_S
    )


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[DresProcess]]:
    processes: list[DresProcess] = []
    yield processes
    stop_all(processes)
    for process in processes:
        print(f"--- {process.name} ---\n{process.log()[-6000:]}")


def worker_service(
    variables: Mapping[str, str], here: Callable[[Mapping[str, str]], dict[str, str]]
) -> tuple[Service, dict[str, str]]:
    """The worker service and its environment on this host (``here`` maps compose's names)."""
    worker = service("worker", variables)
    env = here(worker.environment)
    env["DRES_METRICS_PORT"] = str(free_port())
    return worker, subprocess_env(env)


@dataclass
class Deployment:
    """The worker and api services running here, both ready and healthy."""

    worker: WorkerProcess
    #: the worker's environment (its metrics port among it)
    worker_env: dict[str, str]
    api: ApiProcess


def deploy(
    variables: Mapping[str, str],
    here: Callable[[Mapping[str, str]], dict[str, str]],
    tmp_path: Path,
    started: list[DresProcess],
) -> Deployment:
    """Start the worker and api services as compose would, then run their healthchecks."""
    worker, worker_env = worker_service(variables, here)
    assert worker.command[0] == "worker"
    worker_process = WorkerProcess.launch(worker.command, worker_env, tmp_path / "worker.log")
    started.append(worker_process)

    api = service("api", variables)
    port = str(free_port())
    command = [port if arg == CONTAINER_PORT else arg for arg in api.command]
    assert command != api.command, "the api's command names no --port 8000"
    api_env = subprocess_env(here(api.environment))
    api_process = ApiProcess.launch(
        command, api_env, tmp_path / "api.log", url=f"http://127.0.0.1:{port}"
    )
    started.append(api_process)
    worker_process.wait_ready()
    api_process.wait_ready()

    api_check = [arg.replace(f":{CONTAINER_PORT}/", f":{port}/") for arg in api.healthcheck]
    for name, check, env in (
        ("worker", worker.healthcheck, worker_env),
        ("api", api_check, api_env),
    ):
        done = run_healthcheck(check, env)
        assert done.returncode == 0, f"{name} healthcheck: {done.stdout}{done.stderr}"
    return Deployment(worker_process, worker_env, api_process)


def completed_turn(http: httpx.Client, model: str) -> str:
    """POST a turn to the api service and wait until the worker service completed it."""
    body = {"message": "Email Ada the launch notes", "model": model}
    assert http.post("/v1/turns", json=body).status_code == 401
    auth = {"Authorization": f"Bearer {TOKEN}"}
    created = http.post("/v1/turns", json=body, headers=auth)
    assert created.status_code == 202, created.text
    turn_id: str = created.json()["turn_id"]

    def completed() -> bool:
        status = http.get(f"/v1/turns/{turn_id}", headers=auth).json()["status"]
        assert status in {"queued", "running", "resuming", "completed"}, status
        return status == "completed"

    wait_until(completed, TURN_S, "the turn completed by the worker service")
    return turn_id


def test_the_redis_service_wants_its_password_and_its_healthcheck_gives_it(
    compose_redis: RedisServer,
) -> None:
    with redis.Redis(port=compose_redis.port) as anyone, pytest.raises(redis.AuthenticationError):
        anyone.ping()
    redis_service = service("redis", SECRETS)
    check = redis_service.healthcheck
    assert check == ["redis-cli", "ping"]
    # its container's redis-cli finds it on 6379; here it is told the port
    here = [check[0], "-p", str(compose_redis.port), *check[1:]]
    done = run_healthcheck(here, subprocess_env(redis_service.environment))
    assert done.stdout.strip() == "PONG", done.stdout + done.stderr
    refused = run_healthcheck(here, subprocess_env({}))
    assert "NOAUTH" in refused.stdout + refused.stderr


def test_the_api_service_enqueues_and_the_worker_service_completes_the_turn(
    compose_redis: RedisServer, script: Script, tmp_path: Path, started: list[DresProcess]
) -> None:
    model = script([send("ada@x.io", "Launch"), {"text": "Sent."}])
    variables = {**SECRETS, "DRES_MODELS": model, "WORKER_CONCURRENCY": "1"}
    redis_url = url_of(compose_redis)
    deployed = deploy(variables, lambda env: on_this_host(env, redis_url), tmp_path, started)

    with httpx.Client(base_url=deployed.api.url, timeout=10) as http:
        turn_id = completed_turn(http, model)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert "dres_turns" in http.get("/metrics", headers=auth).text

    # the worker serves its metrics on the port compose gives it (a free one here)
    scrape = f"http://127.0.0.1:{deployed.worker_env['DRES_METRICS_PORT']}/metrics"
    ran = 'dres_tool_calls_total{outcome="ran"} 1.0'
    wait_until(lambda: ran in httpx.get(scrape, timeout=5).text, 10, "the worker's metrics")

    with redis.Redis.from_url(redis_url) as client:
        events = Ledger(client).events(turn_id)
    assert [e.tool for e in of(events, "tool_done")] == ["send_email"]
    # compose's services log JSON (DRES_LOG_FORMAT defaults to json there), one object a line
    for process in started:
        for line in process.log().splitlines():
            assert isinstance(json.loads(line), dict), f"{process.name}: {line}"
    for process in started:
        assert TOKEN not in process.log(), f"{process.name} logged the token"
        assert PASSWORD not in process.log(), f"{process.name} logged redis's password"


@pytest.fixture
def ha_sentinels() -> Iterator[LocalSentinel]:
    """The ha profile's Sentinels as compose configures them (``sentinel-conf``), the redis
    service (``redis:6379`` there) a private primary here, with a replica beside it."""
    conf = interpolate(str(load()["configs"]["sentinel-conf"]["content"]), SECRETS)

    def here(primary: int) -> list[str]:
        return conf.replace("redis 6379", f"127.0.0.1 {primary}").splitlines()

    name = HA_VARIABLES["DRES_REDIS_MASTER"]
    yield from rig_started(
        lambda: LocalSentinel(name=name, conf=here, password=PASSWORD).start(),
        "a primary, a replica, sentinels",
    )


def test_under_the_ha_profile_the_services_complete_a_turn_through_the_sentinels(
    ha_sentinels: LocalSentinel, script: Script, tmp_path: Path, started: list[DresProcess]
) -> None:
    """The worker and api services with the header's DRES_REDIS_SENTINELS and
    DRES_REDIS_MASTER, the sentinel-N services' names being this host's sentinels."""
    sentinels = {
        f"sentinel-{i + 1}:26379": f"127.0.0.1:{port}" for i, port in enumerate(ha_sentinels.ports)
    }

    def here(environment: Mapping[str, str]) -> dict[str, str]:
        env = dict(environment)
        for compose_name, local in sentinels.items():
            env["DRES_REDIS_SENTINELS"] = env["DRES_REDIS_SENTINELS"].replace(compose_name, local)
        return env

    model = script([send("ada@x.io", "Launch"), {"text": "Sent."}])
    variables = {
        **SECRETS,
        "DRES_MODELS": model,
        "WORKER_CONCURRENCY": "1",
        **HA_VARIABLES,
    }
    deployed = deploy(variables, here, tmp_path, started)
    with httpx.Client(base_url=deployed.api.url, timeout=10) as http:
        turn_id = completed_turn(http, model)
    with ha_sentinels.master_client() as client:
        events = Ledger(client).events(turn_id)
    assert [e.tool for e in of(events, "tool_done")] == ["send_email"], "on the master"


def test_the_worker_healthcheck_fails_when_its_worker_does_not_answer(
    compose_redis: RedisServer,
) -> None:
    """The same check with no worker running: Docker would mark the container unhealthy."""
    redis_url = url_of(compose_redis)
    worker, env = worker_service(SECRETS, lambda env: on_this_host(env, redis_url))
    done = run_healthcheck(worker.healthcheck, env)
    assert done.returncode != 0
