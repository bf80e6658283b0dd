"""The store's own faults as the HTTP API answers them (docs/faults.md, docs/http-api.md).

While the ledger's Redis or the broker cannot be reached, every route answers 503 with
``Retry-After`` and a ``detail`` naming the store; while one refuses writes for memory
(``maxmemory`` under ``noeviction``), a write answers 507. The API never waits an outage out: its
Redis clients and its Celery app fail within about a second (``Runtime.for_api``), and the
caller tries again.

What raises what: redis-py raises ``ConnectionError`` (refused, reset, closed) and
``TimeoutError`` (a hung server) on the API's own clients, ``ledger.store`` turns them into
``LedgerUnavailable`` once its retries are spent, and ``OutOfMemoryError`` is the reply to a
write at ``maxmemory``. Celery's publish raises kombu's ``OperationalError`` for any of these met
on the broker, the redis-py error as its ``__cause__``. ``GET /healthz`` looks at both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from urllib.parse import urlsplit

import kombu.exceptions
import redis
import redis.asyncio as aioredis
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from ledger import keys, presence
from ledger.errors import LedgerUnavailable, StoreFull
from worker.base.settings import Settings
from worker.edges.runtime import Runtime

#: seconds a client should wait before it tries again while the store is unreachable
RETRY_AFTER_S = 2


def place(url: str) -> str:
    """Where a Redis URL points, without its credentials (``host:port``, or a socket's path)."""
    parts = urlsplit(url)
    if not parts.hostname:
        return parts.path or url
    return f"{parts.hostname}:{parts.port or 6379}"


def via_sentinels(settings: Settings) -> str:
    sentinels = ",".join(f"{host}:{port}" for host, port in settings.sentinels)
    return f"master {settings.redis_master} via Sentinels {sentinels}"


def ledger_name(settings: Settings) -> str:
    where = via_sentinels(settings) if settings.sentinels else place(settings.redis_url)
    return f"the ledger's Redis ({where})"


def broker_name(settings: Settings) -> str:
    sentinel = settings.broker.startswith("sentinel://")
    return f"the broker ({via_sentinels(settings) if sentinel else place(settings.broker)})"


def unreachable(detail: str, extra: Mapping[str, str | int] | None = None) -> JSONResponse:
    """503 with ``Retry-After``; ``extra``: more fields of the body (``/healthz``'s checks)."""
    body = {**(extra or {}), "detail": detail}
    return JSONResponse(body, 503, headers={"Retry-After": str(RETRY_AFTER_S)})


def out_of_memory(store: str, error: BaseException) -> JSONResponse:
    return JSONResponse({"detail": f"{store} is out of memory and refuses writes: {error}"}, 507)


def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def ledger_unreachable(request: Request, exc: Exception) -> JSONResponse:
    # LedgerUnavailable says "redis unreachable" too: its cause is what the caller can use
    cause = exc.__cause__ if isinstance(exc, LedgerUnavailable) and exc.__cause__ else exc
    return unreachable(f"{ledger_name(_settings(request))} is unreachable: {cause}")


async def ledger_full(request: Request, exc: Exception) -> JSONResponse:
    # StoreFull (the ledger's word for it) carries redis-py's OutOfMemoryError as its cause
    cause = exc.__cause__ if isinstance(exc, StoreFull) and exc.__cause__ else exc
    return out_of_memory(ledger_name(_settings(request)), cause)


async def broker_failed(request: Request, exc: Exception) -> JSONResponse:
    """A publish (a chunk's message, a revoke) that the broker did not take."""
    name = broker_name(_settings(request))
    cause = exc.__cause__
    if isinstance(cause, redis.exceptions.OutOfMemoryError):
        return out_of_memory(name, cause)
    return unreachable(f"{name} is unreachable: {exc}")


def add_fault_handlers(api: FastAPI) -> None:
    for unreachable_error in (redis.ConnectionError, redis.TimeoutError, LedgerUnavailable):
        api.add_exception_handler(unreachable_error, ledger_unreachable)
    for full_error in (redis.exceptions.OutOfMemoryError, StoreFull):
        api.add_exception_handler(full_error, ledger_full)
    api.add_exception_handler(kombu.exceptions.OperationalError, broker_failed)


async def healthz(request: Request) -> JSONResponse:
    """Reachability of the ledger's Redis (``redis``) and of the broker (``broker``), each
    ``ok`` or ``unreachable: …``, both looked at together and each within about a second, and
    ``workers``: how many workers were seen in the last 30 s (``ledger.presence``; 0 is an
    answer, not a fault). A 503 also names what is unreachable in its ``detail``. It answers
    anyone (no token), so it names no host, port or URL: a store by its role, a fault by its
    kind (the other routes' 503s, behind the token, name the address)."""
    state = request.app.state
    now_ms = int(state.rt.clock.now() * 1000)
    (ledger, workers), broker = await asyncio.gather(
        _ledger_check(state.reader, now_ms), run_in_threadpool(_broker_check, state.rt)
    )
    body: dict[str, str | int] = {"redis": ledger, "broker": broker}
    if workers is not None:
        body["workers"] = workers
    named = (("the ledger's Redis", ledger), ("the broker", broker))
    down = [name for name, check in named if check != "ok"]
    if not down:
        return JSONResponse(body)
    return unreachable("unreachable: " + ", ".join(down), body)


def _fault(error: BaseException) -> str:
    """A check's fault by its kind only: redis-py's and kombu's messages name the address."""
    return f"unreachable: {type(error).__name__}"


async def _ledger_check(reader: aioredis.Redis, now_ms: int) -> tuple[str, int | None]:
    """``ok`` and the workers seen lately, or the fault and None."""
    try:
        workers = await reader.zcount(keys.workers(), *presence.window(now_ms))
    except redis.RedisError as e:
        return _fault(e), None
    return "ok", int(workers)


def _broker_check(rt: Runtime) -> str:
    try:
        with rt.app.connection_for_write() as connection:
            # the Celery app's own socket timeouts bound each attempt (``Runtime.for_api``)
            connection.ensure_connection(max_retries=1, interval_start=0, timeout=2)
    except Exception as e:  # kombu raises many kinds; any of them means unreachable
        return _fault(e)
    return "ok"
