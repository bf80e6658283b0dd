"""A Redis for ``dres demo`` when none is configured (docs/commands.md).

``DRES_REDIS_URL`` when set; else a private ``redis-server`` (AOF on, a temp dir, a free loopback
port) when the binary exists; else fakeredis's TCP server, with a warning that nothing is durable.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from worker.base.errors import ConfigError
from worker.base.masking import mask_url
from worker.dev.redis_server import RedisServer, RedisServerError, free_port


@dataclass(frozen=True)
class EmbeddedRedis:
    url: str
    #: what it is, for people
    description: str
    durable: bool


@contextmanager
def embedded_redis() -> Iterator[EmbeddedRedis]:
    configured = os.environ.get("DRES_REDIS_URL")
    if configured:
        yield EmbeddedRedis(configured, f"DRES_REDIS_URL ({mask_url(configured)})", durable=True)
        return
    try:
        server = RedisServer().start()
    except RedisServerError:
        server = None
    if server is not None:
        try:
            yield EmbeddedRedis(
                server.url,
                f"a private redis-server on 127.0.0.1:{server.port} (AOF on, {server.data_dir})",
                durable=True,
            )
        finally:
            server.cleanup()
        return
    with _fake_server() as url:
        yield EmbeddedRedis(url, f"fakeredis TCP server at {url}", durable=False)


@contextmanager
def _fake_server() -> Iterator[str]:
    try:
        from fakeredis import TcpFakeServer
    except ImportError:
        raise ConfigError(
            "no Redis: set DRES_REDIS_URL, install redis-server, or pip install 'fakeredis[lua]'"
        ) from None
    port = free_port()
    server = TcpFakeServer(("127.0.0.1", port), server_type="redis")
    thread = threading.Thread(target=server.serve_forever, name="fakeredis", daemon=True)
    thread.start()
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.shutdown()
        server.server_close()
