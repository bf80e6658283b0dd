"""MCP servers' tools as dres tools (DRES_MCP_SERVERS), through the official ``mcp`` SDK (2.x).

At a worker's start each server is connected once, its tools listed, and the connection closed
(``list_server``): a server that cannot be reached or listed stops the worker with one line
naming it. The list is fixed for the worker's life (restart the worker to reload it). Each tool
becomes ``NAME__tool`` with the server's description and input schema, classified by the spec's
annotations with the spec's defaults: ``readOnlyHint: true`` → read-only, anything else a write;
``idempotentHint: true`` → idempotent; the entry's ``read_only``/``writes``/``idempotent`` lists
override the hints.

Calls go through one session per server per process (``Connection``), opened on first use, so
after the pool's fork, and reopened after a failure. The SDK is async: a process's sessions live
on one event loop in a daemon thread of its own, and a tool call waits for its answer there at
most the entry's ``timeout_s``. Every call carries the call's idempotency key in ``_meta``
(``dres/idempotency_key``). A write whose request may have reached the server but whose answer
never came (a timeout, a dropped connection, a server that died mid-call) raises
``OutcomeUnknown``: the call stays interrupted. A reused session is pinged before a write, so a
server found gone before the request left is an error result, not an unknown outcome.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import structlog
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp import types as mcp_types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT, RequestParamsMeta

from worker.base.errors import ConfigError, OutcomeUnknown
from worker.base.masking import mask_text
from worker.base.tool_sources import McpServer
from worker.engine.eventloop import loop, run
from worker.engine.tools.context import ToolContext
from worker.engine.tools.sources import ToolCallFailed
from worker.engine.tools.spec import ToolSpec

log = structlog.get_logger("dres.mcp")

#: the key of a call's idempotency key in its request's ``_meta``
META_KEY = "dres/idempotency_key"
#: seconds to connect to a server and initialise its session (also at the worker's start)
CONNECT_S = 10.0
#: seconds a ping before a write on a reused session may take
PING_S = 5.0
#: seconds the calling thread waits beyond a call's own timeout for the SDK to report it
GRACE_S = 2.0
#: MCP error codes that mean the answer never came (the SDK's, not the server's)
NO_ANSWER = frozenset({REQUEST_TIMEOUT, CONNECTION_CLOSED})
#: characters a model provider allows in a tool's name; any other becomes ``_``
UNSAFE = re.compile(r"[^A-Za-z0-9_-]")

T = TypeVar("T")


def transport(server: McpServer) -> AbstractAsyncContextManager[Any]:
    """The SDK's client transport for ``server``: stdio or streamable HTTP."""
    if server.command is not None:
        program, *args = server.command
        params = StdioServerParameters(command=program, args=args, env=dict(server.env) or None)
        return stdio_client(params)
    assert server.url is not None
    http = create_mcp_http_client(headers=dict(server.headers) or None)
    return _http_transport(server.url, http)


@asynccontextmanager
async def _http_transport(url: str, http: Any) -> AsyncIterator[Any]:
    async with http, streamable_http_client(url, http_client=http) as streams:
        yield streams


@asynccontextmanager
async def open_session(server: McpServer) -> AsyncIterator[ClientSession]:
    async with transport(server) as (read, write), ClientSession(read, write) as session:
        await asyncio.wait_for(session.initialize(), CONNECT_S)
        yield session


async def _list(server: McpServer) -> list[mcp_types.Tool]:
    async with open_session(server) as session:
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        while True:
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await asyncio.wait_for(session.list_tools(params=params), CONNECT_S)
            tools += page.tools
            cursor = page.next_cursor
            if not cursor:
                return tools


#: the servers' tools as listed in this process, or in the worker's main process before the
#: pool forked (a child inherits them: the list is fixed for the worker's life)
_listed: dict[tuple[str, str], list[mcp_types.Tool]] = {}


def list_server(name: str, server: McpServer) -> list[mcp_types.Tool]:
    """The server's tools, listed once per worker on a connection of their own."""
    key = (name, server.model_dump_json())
    if key not in _listed:
        try:
            _listed[key] = asyncio.run(asyncio.wait_for(_list(server), CONNECT_S * 2))
            log.info("MCP server listed", server=name, tools=[t.name for t in _listed[key]])
        except Exception as e:
            raise ConfigError(
                f"DRES_MCP_SERVERS: server {name!r} ({server.where}) cannot be listed: {_why(e)}"
            ) from None
    return _listed[key]


def server_tools(name: str, server: McpServer, tools: list[mcp_types.Tool]) -> list[ToolSpec]:
    """The server's tools as ``ToolSpec``s sharing one ``Connection``."""
    listed = {t.name for t in tools}
    unknown = sorted(set(server.read_only + server.writes + server.idempotent) - listed)
    if unknown:
        raise ConfigError(f"DRES_MCP_SERVERS: server {name!r} has no tools {unknown}")
    connection = Connection(name, server)
    specs = []
    for t in tools:
        read_only, idempotent = classify(t, server)
        specs.append(
            ToolSpec(
                name=f"{name}__{UNSAFE.sub('_', t.name)}",
                fn=McpTool(connection, t.name, read_only),
                description=t.description or t.title or t.name,
                json_schema=dict(t.input_schema),
                read_only=read_only,
                idempotent=idempotent,
                source=f"mcp {name}",
            )
        )
    return specs


def classify(t: mcp_types.Tool, server: McpServer) -> tuple[bool, bool]:
    """(read-only, idempotent) by the operator's lists, else the tool's hints (a missing hint
    is the spec's default: not read-only, not idempotent)."""
    hints = t.annotations
    if t.name in server.read_only:
        read_only = True
    elif t.name in server.writes:
        read_only = False
    else:
        read_only = hints is not None and hints.read_only_hint is True
    hinted = hints is not None and hints.idempotent_hint is True
    return read_only, not read_only and (t.name in server.idempotent or hinted)


@dataclass(frozen=True)
class McpTool:
    """One server tool's ``fn``: called as ``fn(input, ctx)``."""

    connection: Connection
    tool: str
    read_only: bool

    def __call__(self, arguments: dict[str, Any], ctx: ToolContext) -> Any:
        return self.connection.call(self.tool, arguments, ctx.idempotency_key, self.read_only)


class Connection:
    """One server's session in this process: opened on first use (after the fork), reopened
    after a failure."""

    def __init__(self, name: str, server: McpServer) -> None:
        self.name = name
        self.server = server
        self._pid = 0
        self._session: ClientSession | None = None
        self._close: asyncio.Event | None = None
        self._lock = threading.Lock()

    def call(self, tool: str, arguments: dict[str, Any], key: str, read_only: bool) -> Any:
        session = self._ready(write=not read_only)
        request = session.call_tool(
            tool,
            arguments,
            read_timeout_seconds=self.server.timeout_s,
            meta=cast(RequestParamsMeta, {META_KEY: key}),
        )
        try:
            result = run(request, self.server.timeout_s + GRACE_S)
        except MCPError as e:
            if e.code not in NO_ANSWER:  # the server answered with an error
                raise ToolCallFailed(f"server {self.name!r}: {e.message}") from None
            self._drop(session, reset=e.code == CONNECTION_CLOSED)
            return self._no_answer(tool, read_only, e.message)
        except Exception as e:
            self._drop(session, reset=True)
            return self._no_answer(tool, read_only, _why(e))
        return _result(self.name, result)

    def _no_answer(self, tool: str, read_only: bool, why: str) -> Any:
        message = f"server {self.name!r}: {tool}: no answer ({why})"
        if read_only:
            raise ToolCallFailed(message)
        raise OutcomeUnknown(message)

    def _ready(self, *, write: bool) -> ClientSession:
        """The open session; a reused one pinged before a write. Any failure here is before
        the call's request left: an error result."""
        with self._lock:
            if self._pid != os.getpid():  # a fork's child: the parent's state is not ours
                self._pid, self._session, self._close = os.getpid(), None, None
            session, fresh = self._session, False
            if session is not None and write:
                try:
                    run(session.send_ping(), PING_S)
                except Exception as e:
                    log.warning("MCP server gone; reconnecting", server=self.name, error=_why(e))
                    self._drop(session, reset=True)
                    session = None
            if session is None:
                session, fresh = self._open(), True
            log.debug("MCP session", server=self.name, fresh=fresh)
            return session

    def _open(self) -> ClientSession:
        ready: asyncio.Future[ClientSession] = loop().create_future()
        close = asyncio.Event()
        asyncio.run_coroutine_threadsafe(self._hold(ready, close), loop())
        try:
            session = run(_wait(ready), CONNECT_S + GRACE_S)
        except Exception as e:
            loop().call_soon_threadsafe(close.set)
            raise ToolCallFailed(f"server {self.name!r} unreachable: {_why(e)}") from None
        self._session, self._close = session, close
        return session

    async def _hold(self, ready: asyncio.Future[ClientSession], close: asyncio.Event) -> None:
        """The session's task: opens it, hands it over, and holds it open until closed (anyio's
        contexts must be left by the task that entered them)."""
        try:
            async with open_session(self.server) as session:
                ready.set_result(session)
                await close.wait()
        except BaseException as e:
            if not ready.done():
                ready.set_exception(ConnectionError(_why(e)))
            elif not isinstance(e, asyncio.CancelledError | GeneratorExit):
                log.info("MCP session ended", server=self.name, error=_why(e))

    def close(self) -> None:
        """Close this process's session (its stdio server exits); a later call opens another."""
        with self._lock:
            if self._session is not None and self._pid == os.getpid():
                self._drop(self._session, reset=True)

    def _drop(self, session: ClientSession, *, reset: bool) -> None:
        """Forget a session that failed (its next call opens another); a timeout alone keeps
        it (the server answers the call late, and the session goes on)."""
        if not reset or self._session is not session:
            return
        close, self._session, self._close = self._close, None, None
        if close is not None:
            loop().call_soon_threadsafe(close.set)


async def _wait(future: asyncio.Future[T]) -> T:
    return await future


def _result(name: str, result: mcp_types.CallToolResult) -> Any:
    """A tool's answer as a JSON value: its structured content, else its content blocks."""
    if result.is_error:
        text = " ".join(b.text for b in result.content if isinstance(b, mcp_types.TextContent))
        raise ToolCallFailed(f"server {name!r}: {text or 'the tool failed'}")
    if result.structured_content is not None:
        return result.structured_content
    blocks = [b.model_dump(mode="json", exclude_none=True) for b in result.content]
    if len(blocks) == 1 and blocks[0].get("type") == "text":
        return blocks[0]["text"]
    return blocks


def _why(error: BaseException) -> str:
    """One line for an error, the innermost of an exception group's; a URL in it masked (httpx's
    status errors name the request's URL, its userinfo and query)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return mask_text(f"{type(error).__name__}: {error}".splitlines()[0])[:300]


def mcp_tools(servers: Mapping[str, McpServer]) -> list[ToolSpec]:
    """DRES_MCP_SERVERS's tools, each server listed now."""
    specs: list[ToolSpec] = []
    for name, server in servers.items():
        specs += server_tools(name, server, list_server(name, server))
    return specs
