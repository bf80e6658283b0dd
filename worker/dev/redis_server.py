"""Start and stop a private redis-server process (for ``dres demo``, tests and benchmarks).

The server binds loopback on a free port, keeps its data in its own directory with AOF on
(``appendfsync everysec`` unless told otherwise) and no RDB snapshots, and is stopped by PID
(and, for the chaos runner, killed, paused and resumed by PID).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry


class RedisServerError(RuntimeError):
    """redis-server is missing or did not come up."""


#: where ``free_port`` looks: below the kernel's ephemeral range, which outgoing connections
#: take their local ports from (a port the kernel hands out for ``bind(0)`` may be some client's
#: by the time a server binds it: a server then exits with "Address already in use")
LOW_PORT = 10_000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_low() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A loopback port nothing listens on now, outside the ephemeral range when it can: the
    port is free until a server binds it unless another process picks the same one (random
    among some 20,000, and checked), not whenever a client connects somewhere."""
    high = ephemeral_low()
    for _ in range(50) if high - LOW_PORT > 1000 else ():
        port = LOW_PORT + secrets.randbelow(high - LOW_PORT)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        found: int = s.getsockname()[1]
        return found


def probe(port: int, options: Mapping[str, Any]) -> redis.Redis:
    """A client that asks a starting server once per call: short timeouts, no retries (redis-py
    retries a timeout three times by default, with a backoff)."""
    return redis.Redis(
        port=port,
        socket_connect_timeout=0.2,
        socket_timeout=1,
        retry=Retry(NoBackoff(), 0),
        **options,
    )


def answers_as(client: redis.Redis, pid: int) -> bool:
    """Whether the server ``client`` reaches answers, and is the process ``pid``: not another
    process's server (or a listener that answers nothing) on a port this one could not bind."""
    try:
        return int(client.info("server")["process_id"]) == pid
    except (redis.RedisError, OSError, KeyError, ValueError):
        return False


def in_use(log: Path) -> bool:
    """Whether a redis-server that exited at start did so because its port was taken."""
    try:
        return "Address already in use" in log.read_text(errors="replace")
    except OSError:
        return False


class RedisServer:
    #: seconds to wait for the server to answer PING after it is started
    START_TIMEOUT_S = 10.0

    def __init__(
        self,
        *,
        port: int | None = None,
        data_dir: str | Path | None = None,
        appendfsync: str = "everysec",
        binary: str | None = None,
        extra: Sequence[str] = (),
        client_options: Mapping[str, Any] | None = None,
    ) -> None:
        found = binary or shutil.which("redis-server")
        if not found:
            raise RedisServerError("redis-server is not installed (apt-get install redis-server)")
        self.binary = found
        self.port = port or free_port()
        #: times ``start()`` may move to another port when the one it chose was taken
        self._moves = 5 if port is None else 0
        self._started = False
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="dres-redis-"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.appendfsync = appendfsync
        #: more redis-server options (``--cluster-enabled yes``, ...)
        self.extra = tuple(extra)
        #: redis-py options a client of it needs (``ssl=True, ...`` when ``extra`` makes it
        #: serve TLS only: ``--port 0 --tls-port PORT``); start() waits for an answer with them
        self.client_options = dict(client_options or {})
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.data_dir),
            "--appendonly",
            "yes",
            "--appendfsync",
            self.appendfsync,
            "--save",
            "",
            "--daemonize",
            "no",
            "--maxmemory-policy",
            "noeviction",
            "--logfile",
            str(self.data_dir / "redis.log"),
            *self.extra,
        ]
        self.process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        client = probe(self.port, self.client_options)
        deadline = time.monotonic() + self.START_TIMEOUT_S
        try:
            while True:
                if self.process.poll() is not None:
                    log = self.data_dir / "redis.log"
                    if self._moves and not self._started and in_use(log):
                        log.unlink()  # another process took the port meanwhile: another one
                        self._moves -= 1
                        self.port = free_port()
                        return self.start()
                    raise RedisServerError(
                        f"redis-server exited with {self.process.returncode}; see {log}"
                    )
                if answers_as(client, self.process.pid):
                    self._started = True
                    return self
                if time.monotonic() > deadline:
                    self.stop()
                    raise RedisServerError(
                        f"redis-server did not answer on port {self.port} "
                        f"within {self.START_TIMEOUT_S} s"
                    )
                time.sleep(0.02)
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL the server (a crash); its AOF stays for ``start()`` to reload."""
        if self.process and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP the server (a hung Redis): its port still takes connections, nothing is
        answered until ``resume()``."""
        if self.process and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused server; harmless on a running one."""
        if self.process and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        self.resume()  # a paused server would not act on SIGTERM until resumed
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
