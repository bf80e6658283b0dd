"""Tool sources (docs/tools.md): where the registry's tools come from, every kind behind one seam.

A source reads its own setting and turns what it names into ``ToolSpec``s: the Python modules of
``DRES_TOOLS``, the ``call_agent`` built-in for ``DRES_AGENTS``'s apps, an MCP server's tools
(``DRES_MCP_SERVERS``) and an OpenAPI document's operations (``DRES_OPENAPI``). ``SOURCES`` lists
them; the registry asks each in turn and names none, so a new source is its adapter's module and
one entry here (its setting, like every setting, is a field of ``Settings``, with its parser in
``worker.base.tool_sources``: read and checked when the settings are, so a bad value stops the
process at start with one line naming the variable, never a task). Nothing below the registry
(executor, both layers, the guard, the note, approvals, metrics, the page) asks where a tool came
from.

A source's call raises ``ToolCallFailed`` for an answer that is an error, or for a request that
never left (an error result: nothing happened), and ``OutcomeUnknown`` for a write sent whose
answer never came (the call stays interrupted).

May import: ``worker.base``, ``worker.engine.tools``; the ``mcp`` SDK and ``httpx``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sized
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from worker.base.errors import DresError
from worker.base.settings import Settings
from worker.base.tool_sources import parse_agents, parse_mcp_servers, parse_modules, parse_openapi
from worker.engine.tools.spec import ToolSpec

C = TypeVar("C", bound=Sized)


class ToolCallFailed(DresError):
    """A tool from elsewhere answered with an error, or could not be reached before anything
    was sent: the call gets an error result."""


class ToolSource(Protocol[C]):
    """One kind of tool source."""

    def parse(self, settings: Settings) -> C:
        """What the settings name of this kind (checked when the settings were read)."""
        ...

    def tools(self, parsed: C) -> list[ToolSpec]:
        """The tools of what ``parse`` found; one that cannot be reached or read raises
        ``ConfigError`` (or ``ToolDefinitionError``) naming it."""
        ...


@dataclass(frozen=True)
class Lazy(Generic[C]):
    """A source whose adapter module is imported only when its setting names something: an
    SDK's import is a cost of every worker's and API's start (the MCP SDK's alone 0.85 s) that
    the deployments listing none of its kind need not pay."""

    #: the ``Settings`` field it reads
    setting: str
    #: that field's parser (the one the settings check it with at start)
    parser: Callable[[str], C]
    #: ``module:function``, the function turning the parsed setting into ``ToolSpec``s
    adapter: str

    def parse(self, settings: Settings) -> C:
        return self.parser(getattr(settings, self.setting))

    def tools(self, parsed: C) -> list[ToolSpec]:
        if not parsed:
            return []
        module, _, name = self.adapter.partition(":")
        build: Callable[[C], list[ToolSpec]] = getattr(importlib.import_module(module), name)
        return build(parsed)


#: every tool source, in the order their tools are registered (a name taken twice is an error
#: naming both sources)
SOURCES: list[ToolSource[Any]] = [
    Lazy("agents", parse_agents, "worker.engine.tools.sources.agents:agent_tools"),
    Lazy("tools", parse_modules, "worker.engine.tools.sources.python:module_tools"),
    Lazy("mcp_servers", parse_mcp_servers, "worker.engine.tools.sources.mcp:mcp_tools"),
    Lazy("openapi", parse_openapi, "worker.engine.tools.sources.openapi:openapi_tools"),
]
