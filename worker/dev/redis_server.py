"""Start and stop a private redis-server process (for ``dres demo``, tests and benchmarks).

The server binds loopback on a free port, keeps its data in its own directory with AOF on
(``appendfsync everysec`` unless told otherwise) and no RDB snapshots, and is stopped by PID
(and, for the chaos runner, killed, paused and resumed by PID).
"""

from __future__ import annotations

import os
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


class RedisServerError(RuntimeError):
    """redis-server is missing or did not come up."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


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
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2, **self.client_options)
        deadline = time.monotonic() + self.START_TIMEOUT_S
        try:
            while True:
                if self.process.poll() is not None:
                    raise RedisServerError(
                        f"redis-server exited with {self.process.returncode}; "
                        f"see {self.data_dir / 'redis.log'}"
                    )
                try:
                    if client.ping():
                        return self
                except redis.ConnectionError:
                    if time.monotonic() > deadline:
                        self.stop()
                        raise RedisServerError(
                            f"redis-server did not answer on port {self.port} "
                            f"within {self.START_TIMEOUT_S} s"
                        ) from None
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
