"""Python tools (DRES_TOOLS): each module's ``@tool`` functions."""

from __future__ import annotations

from collections.abc import Iterable

from worker.base.errors import ToolDefinitionError
from worker.base.imports import import_named
from worker.engine.tools.spec import ToolSpec, is_tool, specs_of


def module_tools(modules: Iterable[str]) -> list[ToolSpec]:
    """Import each module and take its ``@tool`` functions; a module that cannot be imported
    or defines none raises ``ToolDefinitionError`` naming it."""
    specs = []
    for module_name in modules:
        module = import_named(module_name, lambda line: ToolDefinitionError(f"DRES_TOOLS: {line}"))
        found = [v for v in vars(module).values() if is_tool(v)]
        if not found:
            raise ToolDefinitionError(f"DRES_TOOLS: module {module_name!r} defines no @tool")
        specs += specs_of(found)
    return specs
