"""Real MCP servers for the tests (the official SDK's ``MCPServer``, once ``FastMCP``), run as
subprocesses: over stdio (the worker starts it from ``DRES_MCP_SERVERS``'s ``command``) or over
streamable HTTP on a free loopback port (``McpHttpServer``).

Every call the server receives is appended to a JSON-lines log (``DRES_TEST_MCP_LOG``): the tool,
its arguments, the ``dres/idempotency_key`` of the request's ``_meta``, and the server's pid, so
a test sees what the server saw (and can kill the server mid-call).

Tools: ``lookup`` (``readOnlyHint: true``), ``send`` (a write with no hints), ``charge``
(``idempotentHint: true``: dedupes on the key), ``charge_slowly`` (idempotent: its first request
per key answers far too late), ``send_slowly`` (a write that does its effect,
then never answers: a timeout, or a kill mid-call).

``python -m rigs.mcp_servers stdio`` or ``... http PORT``.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

from rigs.hangs import HANG_S, hang_if_asked
from rigs.processes import ROOT
from rigs.waiting import wait_until
from worker.dev.redis_server import free_port

#: the environment variable naming the server's call log
LOG_VAR = "DRES_TEST_MCP_LOG"
#: the environment variable naming a flag file: while it exists, the next write hangs
HANG_VAR = "DRES_TEST_MCP_HANG"
MODULE = "rigs.mcp_servers"


def stdio_entry(log: Path, **options: Any) -> dict[str, Any]:
    """A ``DRES_MCP_SERVERS`` entry starting this module's server over stdio."""
    return {
        "command": [sys.executable, "-m", MODULE, "stdio"],
        "env": {LOG_VAR: str(log), "PYTHONPATH": str(ROOT)},
        **options,
    }


def calls(log: Path, tool: str | None = None) -> list[dict[str, Any]]:
    """What the server saw, in order (the calls to ``tool`` only, when given)."""
    if not log.exists():
        return []
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [r for r in rows if tool is None or r["tool"] == tool]


@dataclass
class McpHttpServer:
    """The server over streamable HTTP, a subprocess on a free loopback port."""

    log: Path
    port: int = field(default_factory=free_port)
    process: Any = None
    #: a flag file: while it exists, the server's next write hangs after its work
    hang: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def entry(self, **options: Any) -> dict[str, Any]:
        return {"url": self.url, **options}

    def start(self) -> McpHttpServer:
        import subprocess

        env = {**os.environ, LOG_VAR: str(self.log), "PYTHONPATH": str(ROOT)}
        if self.hang is not None:
            env[HANG_VAR] = str(self.hang)
        self.process = subprocess.Popen(
            [sys.executable, "-m", MODULE, "http", str(self.port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_until(self._answers, timeout=20, what=f"the MCP server on port {self.port}")
        return self

    def _answers(self) -> bool:
        try:
            httpx.get(self.url, timeout=0.5)
        except httpx.TransportError:
            if self.process.poll() is not None:
                raise AssertionError("the MCP server exited at start") from None
            return False
        return True

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def build_server() -> MCPServer:
    server: MCPServer = MCPServer("dres-test")
    log = Path(os.environ[LOG_VAR])
    charged: dict[str, dict[str, Any]] = {}

    def record(tool: str, arguments: dict[str, Any], ctx: Context) -> str | None:
        meta = ctx.request_context.meta or {}
        found = meta.get("dres/idempotency_key") if isinstance(meta, dict) else None
        key = found if isinstance(found, str) else None
        row = {"tool": tool, "arguments": arguments, "key": key, "pid": os.getpid()}
        with log.open("a") as f:
            f.write(json.dumps(row) + "\n")
        return key

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def lookup(key: str, ctx: Context) -> dict[str, Any]:
        """Look a key up (read-only)."""
        record("lookup", {"key": key}, ctx)
        return {"key": key, "value": f"value-of-{key}"}

    @server.tool()
    async def send(to: str, text: str, ctx: Context) -> dict[str, Any]:
        """Send a message (a write; no hints)."""
        record("send", {"to": to, "text": text}, ctx)
        await hang_if_asked(HANG_VAR)
        return {"sent": True, "to": to}

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True))
    async def charge(amount: int, ctx: Context) -> dict[str, Any]:
        """Charge an amount; the same idempotency key charges once."""
        key = record("charge", {"amount": amount}, ctx) or ""
        first = charged.setdefault(key, {"charge_id": f"ch_{len(charged) + 1}", "amount": amount})
        await hang_if_asked(HANG_VAR)
        return first

    @server.tool(annotations=ToolAnnotations(idempotent_hint=True))
    async def charge_slowly(amount: int, ctx: Context) -> dict[str, Any]:
        """Charge once per key; the first request for a key answers far too late."""
        key = record("charge_slowly", {"amount": amount}, ctx) or ""
        if key not in charged:
            charged[key] = {"charge_id": f"ch_{len(charged) + 1}", "amount": amount}
            await anyio.sleep(HANG_S)
        return charged[key]

    @server.tool()
    async def send_slowly(to: str, ctx: Context) -> dict[str, Any]:
        """Send, then take very long to answer (a write; no hints)."""
        record("send_slowly", {"to": to}, ctx)
        await anyio.sleep(HANG_S)
        return {"sent": True}

    return server


def main(argv: list[str]) -> None:
    server = build_server()
    if argv[0] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(argv[1]))


if __name__ == "__main__":
    main(sys.argv[1:])
