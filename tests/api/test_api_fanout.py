"""One API process serves many watchers of live turns over a few Redis connections (CONTRACT
docs/deploy.md), and at most ``DRES_MAX_STREAMS`` of them at once (docs/configuration.md,
docs/http-api.md).

Real parts: ``dres api`` subprocesses of this module on the session's redis-server, hundreds of
SSE clients (``httpx.AsyncClient``) in this process, and turns whose runs the test plays at the
ledger level (claimed, text appended, completed), as a worker's would be recorded. Every stream
is compared with the ledger; the API's Redis connections are counted from ``/proc``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator

import httpx
import pytest
from starlette.requests import Request
from starlette.types import Message
from structlog.testing import capture_logs

from ledger.store import Ledger
from rigs import ApiProcess, say, stop_all, subprocess_env, wait_until
from rigs.watchers import Watcher, all_started, playing, redis_connections, watch
from tests.support import DRES_ENV, TESTS
from worker.base.errors import ConfigError
from worker.base.settings import Settings, load_settings
from worker.dev.redis_server import RedisServer
from worker.edges.http import fanout as fanout_module
from worker.edges.http.fanout import Fanout
from worker.edges.http.sse import event_stream
from worker.edges.redis.clients import API_STORE_TIMEOUT_S, ledger_reader
from worker.edges.runtime import Runtime
from worker.engine.outcome import RunResult
from worker.engine.recorder import RunContext

#: Redis connections the API may hold while it serves 500 streams ("a few dozen")
CONNECTIONS_LIMIT = 24
#: lines of text each turn says while it is watched
LINES = 20

StartApi = Callable[..., ApiProcess]


@pytest.fixture(scope="module")
def start_api(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StartApi]:
    """``start(**DRES_*)``: a ``dres api`` of this module on the session's Redis, ready."""
    started: list[ApiProcess] = []

    def start(**dres: str) -> ApiProcess:
        env = subprocess_env({**DRES_ENV, "DRES_REDIS_URL": redis_server.url, **dres}, TESTS)
        log = tmp_path_factory.mktemp("api") / "api.log"
        started.append(ApiProcess.start(env, log))
        return started[-1]

    yield start
    stop_all(started)


def line(run: RunContext, n: int) -> str:
    return f"{run.turn_id} says {n}; "


def play(rt: Runtime, runs: list[RunContext]) -> None:
    """Each run says its lines, the turns taking turns, then completes its turn."""
    for n in range(LINES):
        for run in runs:
            say(rt, run, line(run, n))
    for run in runs:
        rt.lifecycle.finish(run, RunResult("completed"))


async def watched(
    url: str, turns: list[str], watchers: int, while_live: Callable[[], None]
) -> list[Watcher]:
    """``watchers`` clients spread over ``turns``; once each has its first event,
    ``while_live`` runs (on a thread), and every stream is followed to its end."""
    limits = httpx.Limits(max_connections=watchers + 10)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:
        clients = [Watcher(turns[i % len(turns)]) for i in range(watchers)]
        tasks = [asyncio.create_task(watch(client, w)) for w in clients]
        await all_started(clients, timeout=30)
        await asyncio.to_thread(while_live)
        async with asyncio.timeout(30):
            return list(await asyncio.gather(*tasks))


def assert_whole(watcher: Watcher, ledger: Ledger, run: RunContext) -> None:
    assert watcher.status == 200, watcher.refused
    assert watcher.ids == [e.stream_id for e in ledger.read_turn(run.turn_id)]
    assert watcher.text == "".join(line(run, n) for n in range(LINES))
    assert watcher.types[-1] == "turn_ended"


def test_500_watchers_of_50_live_turns_each_get_the_whole_text_over_a_few_redis_connections(
    start_api: StartApi, runtime: Runtime, ledger: Ledger, redis_server: RedisServer
) -> None:
    api = start_api()
    runs = playing(runtime, 50)
    by_turn = {run.turn_id: run for run in runs}
    held: list[int] = []

    def live() -> None:
        held.append(redis_connections(api.pid, redis_server.port))  # every stream joined
        play(runtime, runs)
        held.append(redis_connections(api.pid, redis_server.port))

    watchers = asyncio.run(watched(api.url, list(by_turn), 500, live))

    for watcher in watchers:
        assert_whole(watcher, ledger, by_turn[watcher.turn_id])
    held.append(redis_connections(api.pid, redis_server.port))
    print(f"the API's Redis connections: {held}")
    assert 0 < max(held) <= CONNECTIONS_LIMIT, held


def test_one_stream_over_dres_max_streams_gets_503_with_retry_after_and_the_others_finish_whole(
    start_api: StartApi, runtime: Runtime, ledger: Ledger
) -> None:
    api = start_api(DRES_MAX_STREAMS="3")
    [run] = playing(runtime, 1)
    url = f"/v1/turns/{run.turn_id}/events"
    refused: list[httpx.Response] = []

    def live() -> None:
        """All three streams are open: a fourth is refused before any body."""
        refused.append(httpx.get(f"{api.url}{url}", timeout=10))
        play(runtime, [run])

    watchers = asyncio.run(watched(api.url, [run.turn_id], 3, live))

    for watcher in watchers:
        assert_whole(watcher, ledger, run)
    [fourth] = refused
    assert fourth.status_code == 503, fourth.text
    assert fourth.headers["Retry-After"].isdigit()
    assert "DRES_MAX_STREAMS" in fourth.json()["detail"]
    # the three ended: their slots are free again (released once each response is done)
    again = wait_until(
        lambda: (r := httpx.get(f"{api.url}{url}", timeout=10)).status_code == 200 and r,
        timeout=5,
        what="a stream admitted once the others ended",
    )
    assert again.text.count("event: turn_ended") == 1


def test_dres_max_streams_below_one_is_refused_naming_the_variable() -> None:
    with pytest.raises(ConfigError, match="DRES_MAX_STREAMS"):
        load_settings(max_streams=0)
    assert Settings.model_fields["max_streams"].default == 2000


# -- the reader itself, in this process -------------------------------------------------------


def _request() -> Request:
    """A request whose client never leaves."""

    async def receive() -> Message:
        await asyncio.Event().wait()
        return {"type": "http.disconnect"}

    return Request({"type": "http", "method": "GET", "path": "/", "headers": []}, receive)


@contextlib.asynccontextmanager
async def fanout(settings: Settings) -> AsyncIterator[Fanout]:
    reader = ledger_reader(settings, socket_timeout=API_STORE_TIMEOUT_S)
    tail = ledger_reader(settings, socket_timeout=30)
    streams = Fanout(reader, tail, 10, shared=True)
    try:
        yield streams
    finally:
        await streams.close()
        await reader.aclose()
        await tail.aclose()


async def until_live(stream: AsyncIterator[bytes]) -> list[bytes]:
    """The stream's replay of a new turn (turn_started, run_started): what it waits for next
    is live."""
    replayed = [await anext(stream)]
    while b"event: run_started" not in b"".join(replayed):
        replayed.append(await anext(stream))
    return replayed


def ids_of(chunks: list[bytes]) -> list[str]:
    """The SSE ids in what a stream gave, in order."""
    lines = b"".join(chunks).decode().splitlines()
    return [line.removeprefix("id: ") for line in lines if line.startswith("id: ")]


def test_a_new_turn_wakes_the_reader_at_once_instead_of_waiting_out_its_block(
    settings: Settings, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fanout_module, "BLOCK_MS", 20_000)
    first, second = playing(runtime, 2)

    async def main() -> float:
        async with fanout(settings) as streams:
            one = event_stream(streams, _request(), first.turn_id, "0-0")
            await until_live(one)
            waiting = asyncio.create_task(anext(one))  # the reader blocks on the first turn
            say(runtime, first, "one")
            assert b'"text":"one"' in await waiting
            two = event_stream(streams, _request(), second.turn_id, "0-0")
            await until_live(two)
            waiting = asyncio.create_task(anext(two))
            said = time.monotonic()
            say(runtime, second, "two")
            assert b'"text":"two"' in await waiting
            return time.monotonic() - said

    took = asyncio.run(main())
    print(f"the second turn's first live event: {took * 1000:.1f} ms")
    assert took < 5, "the reader waited out its block"


def test_a_watcher_that_falls_behind_is_let_go_reads_on_its_own_and_misses_nothing(
    settings: Settings, runtime: Runtime, ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its client does not read while the turn is written; the other watcher is not held up."""
    monkeypatch.setattr(fanout_module, "BACKLOG", 2)
    [run] = playing(runtime, 1)

    async def main() -> tuple[list[bytes], list[bytes]]:
        async with fanout(settings) as streams:
            quick = event_stream(streams, _request(), run.turn_id, "0-0")
            slow = event_stream(streams, _request(), run.turn_id, "0-0")
            got = {"quick": await until_live(quick), "slow": await until_live(slow)}
            stalled = asyncio.create_task(anext(slow))  # takes one message, then reads no more
            for n in range(LINES):
                say(runtime, run, line(run, n))  # one batch each: the quick one reads it first
                got["quick"].append(await anext(quick))
            runtime.lifecycle.finish(run, RunResult("completed"))
            got["quick"] += [message async for message in quick]
            got["slow"] += [await stalled] + [message async for message in slow]
            return got["quick"], got["slow"]

    with capture_logs() as logs:
        quick, slow = asyncio.run(main())

    assert ids_of(quick) == [e.stream_id for e in ledger.read_turn(run.turn_id)]
    assert b"".join(slow) == b"".join(quick)
    assert [e["event"] for e in logs].count("a watcher fell behind: it reads on its own") == 1
