"""The private redis-servers and sentinels the demo, the tests, the bench and chaos start
(``worker.dev.redis_server``, ``rigs.redis_sentinel``): a port chosen free may be taken by
another process before the server binds it (under ``-n 3`` and the chaos runner's workers).

A server then exits at start with "Address already in use"; one whose port nobody knows yet
takes another and comes up, and a set-up built on it (a replica, the sentinels' monitor) follows
the port it has. ``free_port`` looks below the kernel's ephemeral range, where no client's
outgoing connection takes a port (CI failed once on a sentinel whose port was taken).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis

from rigs.redis_sentinel import LocalSentinel
from worker.dev.redis_server import RedisServer, RedisServerError, ephemeral_low, free_port

pytestmark = pytest.mark.redis_server


@contextmanager
def taken(port: int) -> Iterator[None]:
    """Another process's listener on ``port`` (what the race leaves)."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
        yield


def test_a_free_port_is_below_the_ephemeral_range_and_bindable() -> None:
    ports = {free_port() for _ in range(20)}
    assert all(1024 < port < ephemeral_low() for port in ports), ports
    assert len(ports) > 1  # random, not one port every process would pick
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_server_whose_chosen_port_was_taken_comes_up_on_another() -> None:
    server = RedisServer()
    first = server.port
    try:
        with taken(first):
            server.start()
            assert server.port != first
            with redis.Redis(port=server.port) as client:
                assert client.ping()
            assert server.url.endswith(f":{server.port}/0")
    finally:
        server.cleanup()


def test_a_server_told_its_port_fails_naming_its_log_when_the_port_is_taken() -> None:
    port = free_port()
    server = RedisServer(port=port)
    try:
        with taken(port), pytest.raises(RedisServerError, match=r"exited with 1; see .*redis\.log"):
            server.start()
        assert server.port == port  # a port someone was told of never moves
    finally:
        server.cleanup()


def test_a_sentinel_set_up_follows_a_primary_and_a_sentinel_that_moved() -> None:
    rig = LocalSentinel()
    primary, sentinel = rig.nodes[0].port, rig.ports[0]
    try:
        with taken(primary), taken(sentinel):
            rig.start()  # ready: every sentinel names the primary, sees the replica's link up
        assert rig.nodes[0].port != primary and rig.ports[0] != sentinel
        assert f"127.0.0.1:{rig.ports[0]}" in rig.env()["DRES_REDIS_SENTINELS"]
        with rig.sentinel(0) as client:
            _host, port = client.sentinel_get_master_addr_by_name(rig.name)
        assert int(port) == rig.nodes[0].port
    finally:
        rig.cleanup()
