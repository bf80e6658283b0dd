"""The HTTP API (docs/http-api.md): FastAPI, JSON errors with a ``detail``, live events over SSE.

The app: its routers (``turns``, ``listings``, the page), error handlers and body limit. Every Redis
client here fails fast, so an unreachable or full store is answered at once with 503 or 507
(``api_faults``) instead of being waited out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import structlog
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ledger.errors import BadCursor, CorruptTurn, UnknownTurn
from ledger.ids import ID, ID_RULE, TENANT, TENANT_RULE
from worker.base.errors import ConfigError, InvalidInput, QueueFull, Refused
from worker.base.settings import Settings
from worker.edges.http.access import CallerCheck
from worker.edges.http.agui import router as agui_router
from worker.edges.http.chat import router as chat_router
from worker.edges.http.chatmessages import router as chat_messages_router
from worker.edges.http.decisions import router as decisions_router
from worker.edges.http.deps import authorize
from worker.edges.http.document import install_document, operation_id
from worker.edges.http.fanout import Fanout
from worker.edges.http.faults import add_fault_handlers, healthz
from worker.edges.http.limits import StreamCap, stream_cap
from worker.edges.http.listings import approvals_router, conversations_router
from worker.edges.http.metrics import serve_metrics
from worker.edges.http.models import check_allow_list
from worker.edges.http.page import router as page_router
from worker.edges.http.schedules import router as schedules_router
from worker.edges.http.schemas import HEALTH_ERRORS
from worker.edges.http.sse import SSE_KEEPALIVE_S
from worker.edges.http.tenants import router as tenants_router
from worker.edges.http.turns import router
from worker.edges.redis.clients import API_STORE_TIMEOUT_S, ledger_reader
from worker.edges.runtime import Runtime
from worker.engine.frameworks.loops import locate

log = structlog.get_logger("dres.api")

#: bytes: the largest request body accepted
MAX_BODY_BYTES = 256 * 1024


def create_api(settings: Settings, runtime: Runtime | None = None) -> FastAPI:
    api = FastAPI(
        title="dres",
        version="1",
        description="Durable resume for agent turns",
        lifespan=_lifespan,
        generate_unique_id_function=operation_id,
        # no Swagger UI or ReDoc: they would answer without the token and load their scripts from
        # a CDN; /openapi.json is the document itself, served behind the token (install_document)
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    check_allow_list(settings)  # a bad DRES_MODELS fails at start
    for loop in settings.loops:  # a framework or module DRES_LOOP names that is not there
        locate(loop)  # fails at start too, importing neither: the workers run the agents
    api.state.settings = settings
    api.state.rt = runtime or Runtime.for_api(settings)
    api.state.rt.tracer  # noqa: B018 (a bad OTEL_* fails at start)
    api.state.reader = ledger_reader(settings, socket_timeout=API_STORE_TIMEOUT_S)
    # the event streams' XREAD BLOCK waits up to SSE_KEEPALIVE_S for news
    api.state.tail = ledger_reader(settings, socket_timeout=SSE_KEEPALIVE_S + 30)
    # one reader follows every live stream, except on a cluster (one XREAD cannot span nodes:
    # each stream then holds a connection of its own besides its client's)
    shared = not settings.redis_cluster
    cap = stream_cap(settings.max_streams, files_per_stream=1 if shared else 2)
    _log_cap(cap)
    api.state.streams = Fanout(api.state.reader, api.state.tail, cap.streams, shared=shared)
    api.add_middleware(BodyLimit)
    api.add_middleware(CallerCheck, settings=settings)  # the outermost: before anything is read
    api.add_exception_handler(HTTPException, http_error)  # type: ignore[arg-type]
    api.add_exception_handler(RequestValidationError, invalid)  # type: ignore[arg-type]
    api.add_exception_handler(UnknownTurn, unknown)  # type: ignore[arg-type]
    api.add_exception_handler(CorruptTurn, corrupt)  # type: ignore[arg-type]
    api.add_exception_handler(BadCursor, bad_cursor)  # type: ignore[arg-type]
    api.add_exception_handler(ConfigError, bad_config)  # type: ignore[arg-type]
    api.add_exception_handler(InvalidInput, bad_input)  # type: ignore[arg-type]
    api.add_exception_handler(Refused, refused)  # type: ignore[arg-type]
    api.add_exception_handler(QueueFull, queue_full)  # type: ignore[arg-type]
    api.add_exception_handler(Exception, internal_error)
    add_fault_handlers(api)
    api.include_router(router)
    api.include_router(decisions_router)
    api.include_router(approvals_router)
    api.include_router(conversations_router)
    api.include_router(chat_router)
    api.include_router(chat_messages_router)
    api.include_router(agui_router)
    api.include_router(tenants_router)
    api.include_router(schedules_router)
    api.include_router(page_router)
    api.add_api_route("/healthz", healthz, methods=["GET"], responses=HEALTH_ERRORS)
    install_document(api, settings)
    # behind the token when one is set (Prometheus scrapes with a bearer token); Prometheus text,
    # not JSON, so not in the OpenAPI schema
    api.add_api_route(
        "/metrics",
        serve_metrics,
        methods=["GET"],
        dependencies=[Depends(authorize)],
        include_in_schema=False,
    )

    return api


def _log_cap(cap: StreamCap) -> None:
    """Say once, at start, how many live streams this process serves (and why fewer than asked)."""
    fields = {"streams": cap.streams, "max_streams": cap.asked, "open_file_limit": cap.files}
    if cap.streams < cap.asked:
        log.warning(
            "live event streams capped below DRES_MAX_STREAMS by the open-file limit: raise it "
            "(ulimit -n, LimitNOFILE=) to serve more",
            **fields,
        )
    else:
        log.info("live event streams", **fields)


@asynccontextmanager
async def _lifespan(api: FastAPI) -> AsyncIterator[None]:
    yield
    await api.state.streams.close()
    await api.state.reader.aclose()
    await api.state.tail.aclose()


class BodyLimit:
    """Refuse a body over MAX_BODY_BYTES: by its Content-Length, or as it arrives (chunked)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = f"request body over {MAX_BODY_BYTES} bytes"
        length = Headers(scope=scope).get("content-length")
        if length and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            await JSONResponse({"detail": too_large}, 413)(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > MAX_BODY_BYTES:
                raise HTTPException(413, too_large)  # answered by ``http_error``
            return message

        await self.app(scope, counted, send)


async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
    headers = exc.headers
    if exc.status_code == 405:
        # Starlette's Allow names the methods of the first route of the path only (GET and
        # DELETE of a conversation are two routes): name every route's
        headers = {**(headers or {}), "Allow": ", ".join(_allowed_methods(request))}
    return JSONResponse({"detail": str(exc.detail)}, exc.status_code, headers=headers)


#: the methods a 405's ``Allow`` may name
METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def _allowed_methods(request: Request) -> list[str]:
    """The methods some route of the request's path answers: each one asked of the routes as
    Starlette routes it. A route's ``methods`` are not read: FastAPI 0.165 keeps an included
    router as one opaque route, whose match stands for all of its own."""
    routes = request.app.router.routes
    return [
        method
        for method in METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes
        )
    ]


async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    first = exc.errors()[0]
    if first.get("type") == "json_invalid":
        return JSONResponse({"detail": f"malformed JSON body: {first.get('msg')}"}, 400)
    where = ".".join(str(p) for p in first.get("loc", ())) or "request"
    said = first.get("msg")
    if first.get("type") == "string_pattern_mismatch":
        # the rule in words, not the pattern that spells it
        said = {ID: ID_RULE, TENANT: TENANT_RULE}.get(first.get("ctx", {}).get("pattern"), said)
    return JSONResponse({"detail": f"{where}: {said}"}, 422)


async def internal_error(request: Request, exc: Exception) -> JSONResponse:
    """What nothing else answered: a JSON 500 naming the error's kind, never its text (which may
    quote a stored value); the whole error goes to the log."""
    log.error("a request failed", path=request.url.path, exc_info=exc)
    return JSONResponse({"detail": f"internal error ({type(exc).__name__})"}, 500)


async def bad_config(request: Request, exc: ConfigError) -> JSONResponse:
    """A request naming something unusable, such as a model spec with no script file."""
    return JSONResponse({"detail": str(exc)}, 422)


async def bad_input(request: Request, exc: InvalidInput) -> JSONResponse:
    """A request the lifecycle finds unusable (an empty message, an unknown fork target)."""
    return JSONResponse({"detail": str(exc)}, 422)


async def refused(request: Request, exc: Refused) -> JSONResponse:
    """A request the state of its turn or conversation refuses now (docs/http-api.md)."""
    return JSONResponse({"detail": str(exc)}, 409)


async def queue_full(request: Request, exc: QueueFull) -> JSONResponse:
    """A new turn whose tenant has DRES_TENANT_MAX_QUEUED turns queued: nothing was recorded;
    ``Retry-After`` says when its queue may have room (docs/http-api.md, "Tenants")."""
    retry_after = str(max(1, int(exc.retry_after_s)))
    return JSONResponse({"detail": str(exc)}, 429, headers={"Retry-After": retry_after})


async def unknown(request: Request, exc: UnknownTurn) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, 404)


async def bad_cursor(request: Request, exc: BadCursor) -> JSONResponse:
    """A listing's cursor the ledger cannot read (not one of its pages' ``next_cursor``)."""
    return JSONResponse({"detail": str(exc)}, 422)


async def corrupt(request: Request, exc: CorruptTurn) -> JSONResponse:
    """A turn whose metadata is not a turn's: said as it is, never guessed at."""
    return JSONResponse({"detail": str(exc)}, 500)
