"""Tools: the ``@tool`` decorator, the registry, and the executor with both resume layers."""

from worker.engine.tools.context import Reconciliation, ToolContext
from worker.engine.tools.registry import Registry, ToolSpec, tool

__all__ = ["Reconciliation", "Registry", "ToolContext", "ToolSpec", "tool"]
