"""The store's own faults at the API (docs/faults.md, docs/http-api.md): an unreachable Redis or
broker is answered at once with 503, ``Retry-After`` and a ``detail`` naming the store, a full one
with 507; the same ``dres api`` serves again once the store is back, and event streams and ``dres
watch`` cut by a Redis restart go on after their last event.

Every fault is real: a private redis-server of this module, killed with SIGKILL and started
again on the same port and data directory (AOF), stopped with SIGSTOP (a hung Redis), or set to
``maxmemory`` under ``noeviction``. The time bound asserted on each answer is a hang guard far
above the API's own (about a second): it fails if the API waits an outage out, as a worker does.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

import httpx
import pytest
import redis
from api_support import Sse, redis_state, sse_events

from rigs import ROOT, ApiProcess, close_runtime, say, stop_all, subprocess_env
from tests.support import DRES_ENV, TESTS
from tests.support.fixtures import started
from worker.base.settings import load_settings
from worker.dev.redis_server import RedisServer
from worker.edges.runtime import Runtime
from worker.engine.outcome import RunResult
from worker.engine.recorder import RunContext

pytestmark = pytest.mark.redis_server

#: seconds: an answer slower than this is a hang (the API's own bound is about a second)
HANG_GUARD_S = 5.0
#: seconds an HTTP request of these tests may take
HTTP_TIMEOUT_S = 15.0


# -- the module's Redis servers and API processes -------------------------------------------------


def _server(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[RedisServer]:
    """A private redis-server whose data directory outlives a kill (a restart reloads it)."""
    data_dir = tmp_path_factory.mktemp(name)
    yield from started(lambda: RedisServer(data_dir=data_dir).start(), "a real redis-server")


def _running(server: RedisServer) -> None:
    """The server up, answering and empty, whatever the previous test left it as."""
    if server.process is not None and server.process.poll() is None:
        server.resume()
    else:
        server.start()
    client = redis.Redis.from_url(server.url, socket_timeout=10)
    client.config_set("maxmemory", 0)
    client.flushall()
    client.close()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """The ledger's Redis and the broker of ``api``."""
    yield from _server(tmp_path_factory, "store")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A broker of its own, for ``split_api``."""
    yield from _server(tmp_path_factory, "broker")


def _api(tmp_path_factory: pytest.TempPathFactory, **dres: str) -> Iterator[ApiProcess]:
    env = subprocess_env({**DRES_ENV, **dres}, TESTS)
    log = tmp_path_factory.mktemp("api") / "api.log"
    api = ApiProcess.start(env, log, ready=False)
    try:
        api.wait_ready()
        yield api
    finally:
        stop_all([api])


@pytest.fixture(scope="module")
def api(store: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiProcess]:
    """``dres api`` with the ledger and the broker on ``store``."""
    yield from _api(tmp_path_factory, DRES_REDIS_URL=store.url)


@pytest.fixture(scope="module")
def split_api(
    store: RedisServer, broker: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiProcess]:
    """``dres api`` with the ledger on ``store`` and the broker on ``broker``."""
    yield from _api(tmp_path_factory, DRES_REDIS_URL=store.url, DRES_BROKER_URL=broker.url)


@pytest.fixture
def ledger_redis(store: RedisServer, broker: RedisServer) -> Iterator[redis.Redis]:
    """A client of ``store``; both servers up and empty at the start and the end of the test."""
    _running(store)
    _running(broker)
    client = redis.Redis.from_url(store.url, socket_timeout=10)
    yield client
    client.close()
    _running(store)
    _running(broker)


@pytest.fixture
def http(api: ApiProcess, ledger_redis: redis.Redis) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api.url, timeout=HTTP_TIMEOUT_S) as client:
        yield client
    print(f"--- api log ---\n{api.log()[-6000:]}")


@pytest.fixture
def rt(store: RedisServer, ledger_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> Any:
    """dres in this process on ``store``, for turns crafted at the ledger level."""
    for name in list(os.environ):
        if name.startswith("DRES_"):
            monkeypatch.delenv(name)
    runtime = Runtime.from_settings(load_settings(redis_url=store.url))
    yield runtime
    close_runtime(runtime)


# -- helpers ------------------------------------------------------------------------------------


def timed(call: Callable[[], httpx.Response]) -> tuple[httpx.Response, float]:
    start = time.monotonic()
    response = call()
    return response, time.monotonic() - start


def assert_answered(call: Callable[[], httpx.Response], status: int, *words: str) -> dict[str, Any]:
    """The request is answered with ``status`` within the hang guard, a JSON ``detail`` holding
    every word of ``words``, and for a 503 a ``Retry-After`` of whole seconds."""
    response, took = timed(call)
    assert response.status_code == status, response.text
    assert took < HANG_GUARD_S, f"answered in {took:.1f} s"
    body: dict[str, Any] = response.json()
    for word in words:
        assert word in body["detail"], body
    if status == 503:
        assert response.headers["Retry-After"].isdigit(), response.headers
    print(f"{status} in {took:.2f} s: {body['detail']}")
    return body


def routes(http: httpx.Client, turn_id: str) -> dict[str, Callable[[], httpx.Response]]:
    """Every route of a turn, a new turn's, and the schedules'."""
    turn = f"/v1/turns/{turn_id}"
    return {
        "POST /v1/turns": lambda: http.post("/v1/turns", json={"message": "hello"}),
        "GET turn": lambda: http.get(turn),
        "GET events": lambda: http.get(f"{turn}/events"),
        "GET journal": lambda: http.get(f"{turn}/journal"),
        "POST continue": lambda: http.post(f"{turn}/continue", json={}),
        "POST stop": lambda: http.post(f"{turn}/stop"),
        "POST /v1/schedules": lambda: http.post(
            "/v1/schedules", json={"message": "hello", "every": 60}
        ),
        "GET /v1/schedules": lambda: http.get("/v1/schedules"),
        "GET schedule": lambda: http.get("/v1/schedules/sched_1"),
        "DELETE schedule": lambda: http.delete("/v1/schedules/sched_1"),
    }


def assert_names_no_address(health: dict[str, Any], *servers: RedisServer) -> None:
    """``/healthz`` answers anyone (no token): its body names no host, port or URL
    (docs/http-api.md)."""
    said = json.dumps(health)
    for server in servers:
        for address in (str(server.port), server.url, "127.0.0.1", "localhost", "redis://"):
            assert address not in said, said


def created(http: httpx.Client) -> str:
    response = http.post("/v1/turns", json={"message": "hello"})
    assert response.status_code == 202, response.text
    turn_id: str = response.json()["turn_id"]
    return turn_id


# -- an unreachable Redis -----------------------------------------------------------------------


def test_while_redis_is_down_every_route_answers_503_naming_it_and_202_once_it_is_back(
    http: httpx.Client, store: RedisServer
) -> None:
    turn_id = created(http)
    store.kill()
    for name, call in routes(http, turn_id).items():
        print(name, end=": ")
        assert_answered(call, 503, "the ledger's Redis", f":{store.port}", "unreachable")
    health = assert_answered(lambda: http.get("/healthz"), 503, "the ledger's Redis")
    assert health["redis"].startswith("unreachable") and health["broker"].startswith("unreachable")
    assert_names_no_address(health, store)

    store.start()  # the same port and data: the turn made before is there again
    assert http.get(f"/v1/turns/{turn_id}").json()["status"] == "queued"
    assert http.post("/v1/turns", json={"message": "hello again"}).status_code == 202
    assert http.get("/healthz").json() == {"redis": "ok", "broker": "ok", "workers": 0}


def test_while_redis_hangs_every_route_answers_503_within_the_bound_and_202_once_it_wakes(
    http: httpx.Client, store: RedisServer
) -> None:
    turn_id = created(http)
    store.pause()
    try:
        for name, call in routes(http, turn_id).items():
            print(name, end=": ")
            assert_answered(call, 503, "the ledger's Redis", "unreachable")
        health = assert_answered(lambda: http.get("/healthz"), 503, "the ledger's Redis")
        assert health["redis"].startswith("unreachable"), health
        assert_names_no_address(health, store)
    finally:
        store.resume()

    assert http.get(f"/v1/turns/{turn_id}").status_code == 200
    assert http.post("/v1/turns", json={"message": "hello again"}).status_code == 202


def test_with_its_broker_down_or_hung_a_new_turn_answers_503_naming_it_and_is_taken_back(
    split_api: ApiProcess, broker: RedisServer, ledger_redis: redis.Redis
) -> None:
    """The turn recorded before its first message failed to go out is taken back, whole."""
    new_turn = {"message": "hello"}
    with httpx.Client(base_url=split_api.url, timeout=HTTP_TIMEOUT_S) as http:
        broker.pause()  # Celery would wait for a hung broker forever, and retry
        try:
            assert_answered(lambda: http.post("/v1/turns", json=new_turn), 503, "the broker")
            assert ledger_redis.dbsize() == 0, redis_state(ledger_redis)
        finally:
            broker.resume()

        broker.kill()
        assert_answered(
            lambda: http.post("/v1/turns", json=new_turn), 503, "the broker", "unreachable"
        )
        assert ledger_redis.dbsize() == 0, redis_state(ledger_redis)
        health = assert_answered(lambda: http.get("/healthz"), 503, "the broker")
        assert health["redis"] == "ok" and health["broker"].startswith("unreachable"), health
        assert health["workers"] == 0, health  # the ledger's Redis answers: the count is known
        assert_names_no_address(health, broker)

        broker.start()
        assert http.post("/v1/turns", json=new_turn).status_code == 202


# -- a full Redis -------------------------------------------------------------------------------


def test_while_redis_is_out_of_memory_writes_answer_507_and_change_nothing(
    http: httpx.Client, ledger_redis: redis.Redis, rt: Runtime
) -> None:
    queued = created(http)
    stopped = crashed_stop_of(rt)
    before = redis_state(ledger_redis)
    ledger_redis.config_set("maxmemory", 1)
    try:
        assert_answered(
            lambda: http.post("/v1/turns", json={"message": "hello"}),
            507,
            "the ledger's Redis",
            "out of memory",
        )
        assert_answered(lambda: http.post(f"/v1/turns/{queued}/stop"), 507, "out of memory")
        assert_answered(
            lambda: http.post(f"/v1/turns/{stopped}/continue", json={}), 507, "out of memory"
        )
        assert http.get(f"/v1/turns/{queued}").status_code == 200  # reads still work
        assert redis_state(ledger_redis) == before
    finally:
        ledger_redis.config_set("maxmemory", 0)
    assert http.post("/v1/turns", json={"message": "hello"}).status_code == 202


def test_with_its_broker_out_of_memory_a_new_turn_answers_507_and_is_taken_back(
    split_api: ApiProcess, broker: RedisServer, ledger_redis: redis.Redis
) -> None:
    full = redis.Redis.from_url(broker.url)
    full.config_set("maxmemory", 1)
    with httpx.Client(base_url=split_api.url, timeout=HTTP_TIMEOUT_S) as http:
        try:
            assert_answered(
                lambda: http.post("/v1/turns", json={"message": "hello"}),
                507,
                "the broker",
                "out of memory",
            )
            assert ledger_redis.dbsize() == 0, redis_state(ledger_redis)
        finally:
            full.config_set("maxmemory", 0)
            full.close()
        assert http.post("/v1/turns", json={"message": "hello"}).status_code == 202


def test_a_created_turn_is_withdrawn_whole_on_a_redis_out_of_memory(
    rt: Runtime, ledger_redis: redis.Redis
) -> None:
    """Taking a turn back only deletes, which Redis allows at ``maxmemory``."""
    turn = rt.lifecycle.create("hello", conversation_id="conv-full")
    ledger_redis.config_set("maxmemory", 1)
    try:
        assert rt.lifecycle.withdraw(turn.turn_id, turn.conversation_id)
    finally:
        ledger_redis.config_set("maxmemory", 0)
    assert ledger_redis.dbsize() == 0, redis_state(ledger_redis)


def test_a_turn_that_went_on_is_not_withdrawn(rt: Runtime) -> None:
    turn = rt.lifecycle.create("hello")
    assert rt.lifecycle.claim(turn.turn_id, turn.run_id) is not None
    assert not rt.lifecycle.withdraw(turn.turn_id, turn.conversation_id)
    assert rt.ledger.meta(turn.turn_id).status == "running"


# -- following a turn across a Redis restart ---------------------------------------------------


def crashed_stop_of(rt: Runtime) -> str:
    turn = rt.lifecycle.create("do the task")
    assert rt.lifecycle.claim(turn.turn_id, turn.run_id) is not None
    assert rt.lifecycle.take_over(rt.ledger.meta(turn.turn_id), "lease expired (test)").ok
    return turn.turn_id


def running_turn(rt: Runtime) -> RunContext:
    """A turn whose run this test plays (no worker): claimed, with two lines said."""
    turn = rt.lifecycle.create("count")
    run = rt.lifecycle.claim(turn.turn_id, turn.run_id)
    assert run is not None
    say(rt, run, "one ", "two ")
    return run


def restart_and_finish(store: RedisServer, rt: Runtime, run: RunContext) -> None:
    """Start the killed server again; the run says two more lines and completes the turn."""
    store.start()
    say(rt, run, "three ", "four")
    rt.lifecycle.finish(run, RunResult("completed"))


def test_an_event_stream_cut_by_a_redis_restart_resumes_with_last_event_id_every_event_once(
    http: httpx.Client, store: RedisServer, rt: Runtime
) -> None:
    run = running_turn(rt)
    url = f"/v1/turns/{run.turn_id}/events"
    seen: list[Sse] = []
    with http.stream("GET", url) as response:
        assert response.status_code == 200
        for message in sse_events(response):
            seen.append(message)
            if message.event == "text" and message.json["text"] == "two ":
                store.kill()  # the stream then ends, cleanly, with what it had sent
    assert_answered(lambda: http.get(url, headers={"Last-Event-ID": seen[-1].id}), 503, "Redis")

    restart_and_finish(store, rt, run)
    with http.stream("GET", url, headers={"Last-Event-ID": seen[-1].id}) as response:
        assert response.status_code == 200
        seen += list(sse_events(response))  # to the turn's end, where the server closes it

    assert [m.id for m in seen] == [e.stream_id for e in rt.ledger.read_turn(run.turn_id)]
    assert seen[-1].event == "turn_ended"


def test_dres_watch_rides_out_a_redis_restart_and_prints_every_event_once(
    store: RedisServer, rt: Runtime
) -> None:
    run = running_turn(rt)
    env = subprocess_env({**DRES_ENV, "DRES_REDIS_URL": store.url}, TESTS)
    command = [sys.executable, "-m", "worker.edges.cli", "watch", run.turn_id, "--events"]
    watch = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = Lines(watch.stdout), Lines(watch.stderr)
        printed = out.until(lambda line: " text " in line and "two" in line)
        store.kill()
        err.until(lambda line: "unreachable" in line)  # it says so and waits, not exits
        assert watch.poll() is None
        restart_and_finish(store, rt, run)
        assert watch.wait(timeout=30) == 0
        printed += out.rest()
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    assert printed[-1].strip() == "Completed", printed
    ids = [line.split()[0] for line in printed[:-1]]
    assert ids == [e.stream_id for e in rt.ledger.read_turn(run.turn_id)], printed


class Lines:
    """The lines of a subprocess's pipe as they come, read by a thread of their own."""

    def __init__(self, pipe: IO[str] | None) -> None:
        assert pipe is not None
        self.lines: queue.Queue[str] = queue.Queue()
        self.reader = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self.reader.start()

    def _read(self, pipe: IO[str]) -> None:
        for line in pipe:
            self.lines.put(line)

    def until(self, wanted: Callable[[str], bool], timeout: float = 20) -> list[str]:
        """The lines up to the first one ``wanted`` (included); fails after ``timeout`` s."""
        got: list[str] = []
        deadline = time.monotonic() + timeout
        while not got or not wanted(got[-1]):
            left = deadline - time.monotonic()
            assert left > 0, f"no such line within {timeout} s: {got}"
            try:
                got.append(self.lines.get(timeout=left))
            except queue.Empty:
                continue
        return got

    def rest(self) -> list[str]:
        """Every line left, once the process closed its pipe."""
        self.reader.join(timeout=10)
        return list(self.lines.queue)
