"""``dres up``: everything a person needs to try dres, in one command (docs/commands.md).

An embedded redis-server (``DRES_REDIS_URL`` when set; as ``dres demo`` does), a prefork worker
and the API with the page, each a ``dres`` subprocess in its own session. It prints the page's
URL and waits; Ctrl-C (SIGINT) or SIGTERM stops every process it started, by PID.

Without ``DRES_API_TOKEN`` it makes a random one for the API, so that no other program or page on
this machine can drive it, and prints the page's URL carrying it after ``#`` (a fragment, which no
browser sends to any server): the page keeps it for the tab and takes it out of the address bar.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TextIO

from worker.base.errors import ConfigError
from worker.base.masking import mask_url
from worker.base.settings import Settings, load_settings
from worker.dev.embedded import embedded_redis
from worker.dev.worker_process import READY_S, DresProcess, WorkerProcess
from worker.engine.frameworks.loops import locate

#: seconds between looks at the children while ``dres up`` waits for a signal
WATCH_S = 0.5
#: random bytes of the token ``dres up`` makes (43 characters, base64url)
TOKEN_BYTES = 32


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=1) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def run_up(port: int, out: TextIO = sys.stdout) -> int:
    """Start redis (or use DRES_REDIS_URL), a worker and the API; wait for SIGINT or SIGTERM."""
    if not 0 < port < 65536:
        raise ConfigError(f"--port must be between 1 and 65535, not {port}")
    if not _port_free(port):
        raise ConfigError(f"port {port} on 127.0.0.1 is in use: choose another with --port")
    settings = load_settings()  # a bad DRES_* setting fails here, before anything starts
    for loop in settings.loops:  # a DRES_LOOP framework or module that is not there, too
        locate(loop)
    _check_configured_redis(settings)
    made_token = None if settings.api_token else secrets.token_urlsafe(TOKEN_BYTES)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    started: list[DresProcess] = []
    try:
        with embedded_redis() as redis_info, tempfile.TemporaryDirectory(prefix="dres-up-") as tmp:
            env = {**os.environ, "DRES_REDIS_URL": redis_info.url}
            if made_token:
                env["DRES_API_TOKEN"] = made_token
            print(f"dres up: redis: {redis_info.description}", file=out, flush=True)
            print(f"dres up: for other dres commands: {_export(redis_info.url)}", file=out)
            if not redis_info.durable:
                print("  WARNING: no redis-server found; fakeredis keeps nothing", file=out)
            worker = WorkerProcess.start(env, Path(tmp) / "worker.log", ready=False)
            started.append(worker)
            url = f"http://127.0.0.1:{port}"
            args = ["api", "--host", "127.0.0.1", "--port", str(port)]
            api = DresProcess.launch(args, env, Path(tmp) / "api.log", name="api")
            started.append(api)
            if not _wait_ready(worker, api, url, stop):
                return 130
            print(f"dres up: worker pid {worker.pid}, api pid {api.pid}", file=out)
            page = f"{url}/#token={made_token}" if made_token else f"{url}/"
            print(f"dres up: open {page}   (Ctrl-C stops everything)", file=out, flush=True)
            return _wait(started, stop, out)
    finally:
        for process in started:
            process.terminate()
        for process in started:
            process.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _check_configured_redis(settings: Settings) -> None:
    """A configured Redis (DRES_REDIS_URL, DRES_BROKER_URL) that cannot be reached: one line,
    before anything starts (a worker would wait for it, and the page would never be ready)."""
    if not (os.environ.get("DRES_REDIS_URL") or settings.broker_url):
        return  # ``dres up`` starts its own
    from worker.edges.redis.policy import read_stores
    from worker.edges.redis.reach import store_url

    away = [r for r in read_stores(settings) if not r.reached]
    if away:
        urls = ", ".join(store_url(settings, r) for r in away)
        raise ConfigError(f"cannot reach Redis at {urls}: {away[0].error}")


def _export(url: str) -> str:
    """The line to paste in another shell so that its ``dres`` commands use this Redis: a
    configured URL's secrets masked, and said so."""
    shown = mask_url(url)
    masked = "   (its secrets masked: put yours back)" if shown != url else ""
    return f"export DRES_REDIS_URL={shown}{masked}"


def _wait_ready(worker: WorkerProcess, api: DresProcess, url: str, stop: threading.Event) -> bool:
    """Both children ready, or False (a signal arrived); a child that exits or is not ready in
    time raises ``ConfigError``: one line, its own last line (its one-line start-up error)."""
    checks: list[tuple[DresProcess, Callable[[], bool]]] = [
        (worker, lambda: "ready." in worker.log()),
        (api, lambda: _healthy(url)),
    ]
    for process, ready in checks:
        try:
            process.wait(_or_stopped(ready, stop), READY_S)
        except RuntimeError:
            raise ConfigError(_failed_at_start(process)) from None
        if stop.is_set():
            return False
    return True


def _failed_at_start(process: DresProcess) -> str:
    lines = [line.strip() for line in process.log().splitlines() if line.strip()]
    said = f": {lines[-1].removeprefix('dres: ')[:300]}" if lines else ""
    code = process.process.poll()
    if code is None:
        return f"the {process.name} was not ready within {READY_S:g} s{said}"
    return f"the {process.name} exited at start ({code}){said}"


def _or_stopped(ready: Callable[[], bool], stop: threading.Event) -> Callable[[], bool]:
    return lambda: stop.is_set() or ready()


def _wait(started: list[DresProcess], stop: threading.Event, out: TextIO) -> int:
    while not stop.wait(WATCH_S):
        for process in started:
            if not process.alive():
                print(
                    f"dres up: the {process.name} exited ({process.process.returncode}):\n"
                    f"{process.log()[-4000:]}",
                    file=sys.stderr,
                )
                return 1
    print("dres up: stopping", file=out, flush=True)
    return 0
