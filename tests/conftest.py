"""Shared fixtures: a private real redis-server for the session, and the two ledger backends.

A missing redis-server skips the real-Redis half locally but fails the run under ``CI=true``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import fakeredis
import pytest
import redis
from backends import Backend

from worker.dev.redis_server import RedisServer, RedisServerError

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    try:
        server = RedisServer().start()
    except RedisServerError as e:
        if IN_CI:
            pytest.fail(f"CI=true requires a real redis-server: {e}", pytrace=False)
        pytest.skip(f"no real redis-server: {e}")
    yield server
    server.cleanup()


@pytest.fixture(params=["fakeredis", "redis-server"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "fakeredis":
        server = fakeredis.FakeServer()
        yield Backend("fakeredis", lambda: fakeredis.FakeRedis(server=server))
        return
    real: RedisServer = request.getfixturevalue("redis_server")
    clients: list[redis.Redis] = []

    def connect() -> redis.Redis:
        client = redis.Redis.from_url(real.url, socket_timeout=30)
        clients.append(client)
        return client

    connect().flushall()
    yield Backend("redis-server", connect)
    for client in clients:
        client.close()


@pytest.fixture
def client(backend: Backend) -> redis.Redis:
    return backend.connect()
