"""The suite's shared fixtures, a pytest plugin (``pytest_plugins`` in ``tests/conftest.py``).

- ``redis_server``: a private real redis-server for the session (AOF on, a free port). A missing
  one skips the tests that need it locally, but fails the run under ``CI=true``.
- ``redis_cluster``: a private three-master Redis Cluster for the session (``LocalCluster``);
  skipped locally when it cannot start, a failure under ``CI=true``. ``started`` does the same
  for a test module's own (a ``LocalSentinel``, a redis-server it restarts).
- ``backend``/``client``: the ledger tests' three backends: fakeredis, the real server and the
  cluster.
- ``redis_url``, ``rdb``, ``ledger``: the real server, emptied (``flushall``) for this test.
- ``store_env``: the DRES_* settings naming this test's Redis (``DRES_REDIS_URL``; a module may
  override it, as the Sentinel tests do).
- ``dres_env``, ``settings``, ``runtime``: the tests' dres settings (``DRES_ENV``) in this
  process's environment, the settings read from it, and dres wired in this process as an API
  process has it (ledger, lifecycle, dispatch).
- ``start_worker``/``worker``: ``dres worker`` subprocesses on this test's Redis, each in its own
  session; the finalizer SIGKILLs each one's process group, so no test leaves one running. Their
  pool is ``pool``'s: prefork, unless a test is parametrized over ``BOTH_POOLS`` (or a call names
  one). ``start_module_worker``: the same for workers a module's tests share, on the session's
  redis-server. Both start them through ``worker_starter``.
- ``script``: writes scripted-model files in this test's temporary directory.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import fakeredis
import pytest
import redis
from sample_tools import OUTSIDE_EFFECTS  # type: ignore[import-not-found]  # tests/, on pytest's path

from ledger.store import Client, Ledger
from rigs.processes import DresProcess, WorkerProcess, subprocess_env
from rigs.redis_cluster import LocalCluster
from rigs.redis_durability import ReplicatedRedis
from rigs.redis_sentinel import LocalSentinel
from rigs.scripts import Script, script_writer
from rigs.turns import close_runtime
from tests.support.backends import Backend
from tests.support.suite import DRES_ENV, IN_CI, TESTS
from worker.base.settings import Settings, load_settings
from worker.dev.redis_server import RedisServer, RedisServerError
from worker.edges.runtime import Runtime

#: ``start_worker(concurrency=1, extra=(), ready=True, overrides=None, pool=...)``
StartWorker = Callable[..., WorkerProcess]
#: a test's or a module's mark: its workers run prefork, then gevent (``pool``)
BOTH_POOLS = pytest.mark.parametrize("pool", ["prefork", "gevent"])


# -- Redis --------------------------------------------------------------------------------------


S = TypeVar("S", RedisServer, LocalCluster, ReplicatedRedis, LocalSentinel)


def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """``yield from own_redis(tmp_path)`` in a fixture: a test's own redis-server (AOF on, in
    ``tmp_path``), for tests that kill, restart or pause it."""
    yield from started(
        lambda: RedisServer(data_dir=tmp_path / "redis").start(), "a real redis-server"
    )


def started(start: Callable[[], S], what: str) -> Iterator[S]:
    """``yield from started(...)`` in a fixture: a real service for its scope, cleaned up after.
    One that cannot start skips the test locally and fails it under ``CI=true``."""
    try:
        service = start()
    except RedisServerError as e:
        if IN_CI:
            pytest.fail(f"CI=true requires {what}: {e}", pytrace=False)
        pytest.skip(f"no {what}: {e}")
    yield service
    service.cleanup()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    yield from started(lambda: RedisServer().start(), "a real redis-server")


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    yield from started(lambda: LocalCluster().start(), "a Redis Cluster of redis-servers")


@pytest.fixture(params=["fakeredis", "redis-server", "cluster"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "fakeredis":
        server = fakeredis.FakeServer()
        yield Backend("fakeredis", lambda: fakeredis.FakeRedis(server=server))
        return
    clients: list[Client] = []
    if request.param == "cluster":
        cluster: LocalCluster = request.getfixturevalue("redis_cluster")
        cluster.flushall()  # the scripts too: every test loads them on the nodes it uses

        def connect() -> Client:
            clients.append(cluster.client(socket_timeout=30))
            return clients[-1]

    else:
        real: RedisServer = request.getfixturevalue("redis_server")

        def connect() -> Client:
            clients.append(redis.Redis.from_url(real.url, socket_timeout=30))
            return clients[-1]

        connect().flushall()
    yield Backend(request.param, connect)
    for client in clients:
        client.close()


@pytest.fixture
def client(backend: Backend) -> Client:
    return backend.connect()


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


# -- dres in this process -----------------------------------------------------------------------


@pytest.fixture
def store_env(redis_url: str) -> dict[str, str]:
    """The DRES_* settings that point dres at this test's Redis (the Sentinel tests override
    it with their own set-up's)."""
    return {"DRES_REDIS_URL": redis_url}


@pytest.fixture
def dres_env(store_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The whole environment of this test's subprocesses; its DRES_* are set here too (for
    ``load_settings``), any other DRES_* removed."""
    for name in list(os.environ):
        if name.startswith("DRES_"):
            monkeypatch.delenv(name)
    dres = {**DRES_ENV, **store_env}
    for name, value in dres.items():
        monkeypatch.setenv(name, value)
    return subprocess_env(dres, TESTS)


@pytest.fixture
def settings(dres_env: dict[str, str]) -> Settings:
    return load_settings()


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    """dres in this process (ledger, lifecycle, dispatch), for turns crafted at the ledger level."""
    rt = Runtime.from_settings(settings)
    yield rt
    close_runtime(rt)


@pytest.fixture
def script(tmp_path: Path) -> Script:
    """``script(steps, on_resume="continue")`` writes a scripted-model file; its model spec."""
    return script_writer(tmp_path)


# -- worker processes ---------------------------------------------------------------------------


def show_logs(processes: Iterable[DresProcess], chars: int = 8000) -> None:
    """Print the tail of each process's log (pytest shows it only for a failed test)."""
    for process in processes:
        print(f"--- {process.log_path.name} (pid {process.pid}) ---\n{process.log()[-chars:]}")


@pytest.fixture
def pool() -> str:
    """The Celery pool of ``start_worker``'s workers (``BOTH_POOLS`` parametrizes it)."""
    return "prefork"


def worker_starter(
    env: dict[str, str], log_dir: Path, pool: str = "prefork"
) -> tuple[StartWorker, list[WorkerProcess]]:
    """The one way the suite starts ``dres worker`` processes: ``start(concurrency=1, extra=(),
    ready=True, overrides=None, pool=pool)`` starts one in its own session with ``env`` and
    ``overrides`` (its DRES_* settings: a soft limit, a model, ...), its pool ``pool`` unless
    ``extra`` names one, its log in ``log_dir``; the list holds every one started, for the
    fixture's finalizer (``stop_workers``)."""
    started: list[WorkerProcess] = []

    def start(
        concurrency: int = 1,
        extra: tuple[str, ...] = (),
        ready: bool = True,
        overrides: dict[str, str] | None = None,
        pool: str = pool,
    ) -> WorkerProcess:
        log_path = log_dir / f"worker-{len(started) + 1}.log"
        every = {**env, **(overrides or {})}
        if pool != "prefork" and not any(arg.startswith(("-P", "--pool")) for arg in extra):
            extra = ("-P", pool, *extra)
        process = WorkerProcess.start(
            every, log_path, concurrency=concurrency, extra=extra, ready=False
        )
        started.append(process)
        if ready:
            process.wait_ready()
        return process

    return start, started


def stop_workers(started: list[WorkerProcess]) -> None:
    # SIGKILL, not a warm shutdown: the test is over, and Celery's warm shutdown of an idle worker
    # takes ~2.7 s (its hub's poll, then its pool's stop), paid by every worker test
    # (test_graceful_shutdown.py tests the warm shutdown itself)
    for process in started:
        process.kill_group()
    show_logs(started)


@pytest.fixture
def start_worker(dres_env: dict[str, str], tmp_path: Path, pool: str) -> Iterator[StartWorker]:
    """``start_worker(concurrency=1, extra=(), ready=True, overrides=None, pool=pool)`` starts a
    worker process (``worker_starter``) on this test's Redis; each is SIGKILLed after the test."""
    start, started = worker_starter(dres_env, tmp_path, pool)
    yield start
    stop_workers(started)


@pytest.fixture(scope="module")
def start_module_worker(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StartWorker]:
    """``start_worker`` for a module's workers, which outlive its tests: on the session's
    redis-server (each test empties it: such a worker keeps nothing there between turns that a
    test relies on), SIGKILLed after the module."""
    env = subprocess_env({**DRES_ENV, "DRES_REDIS_URL": redis_server.url}, TESTS)
    start, started = worker_starter(env, tmp_path_factory.mktemp("module-workers"))
    yield start
    stop_workers(started)


@pytest.fixture
def effects_file(tmp_path: Path) -> str:
    """The file ``sample_tools.outside_write`` logs its effects to, outside the ledger's Redis."""
    return str(tmp_path / "effects.jsonl")


def outside_worker(
    start_worker: StartWorker,
    effects_file: str,
    monkeypatch: pytest.MonkeyPatch,
    chunks: dict[str, str],
) -> StartWorker:
    """For a module's worker fixture: ``start_worker`` with the DRES_* settings ``chunks`` (set
    in this process too, whose runtime reads the same) and ``outside_write`` logging to
    ``effects_file``; a call's own ``overrides`` come last."""
    for name, value in chunks.items():
        monkeypatch.setenv(name, value)

    def start(overrides: dict[str, str] | None = None, **kwargs: Any) -> WorkerProcess:
        every = {**chunks, OUTSIDE_EFFECTS: effects_file, **(overrides or {})}
        return start_worker(overrides=every, **kwargs)

    return start


@pytest.fixture
def worker(start_worker: StartWorker) -> WorkerProcess:
    """One ready prefork worker with a single pool process, on this test's empty Redis."""
    return start_worker()
