"""Tools from elsewhere (CONTRACT §4): adapters that turn an MCP server's tools
(``DRES_MCP_SERVERS``) and an OpenAPI document's operations (``DRES_OPENAPI``) into ``ToolSpec``s
the registry holds beside the Python tools. Nothing below the registry (executor, both layers,
the guard, the note, approvals, metrics, the page) asks where a tool came from.

A source's call raises ``ToolCallFailed`` for an answer that is an error, or for a request that
never left (an error result: nothing happened), and ``OutcomeUnknown`` for a write sent whose
answer never came (the call stays interrupted).

May import: ``worker.base``, ``worker.engine.tools``; the ``mcp`` SDK and ``httpx``.
"""

from __future__ import annotations

from worker.base.errors import DresError


class ToolCallFailed(DresError):
    """A tool from elsewhere answered with an error, or could not be reached before anything
    was sent: the call gets an error result."""
