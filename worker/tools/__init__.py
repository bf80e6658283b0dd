"""Tools: the ``@tool`` decorator, the registry, and the executor with both resume layers."""

from worker.tools.context import Reconciliation, ToolContext
from worker.tools.registry import Registry, ToolSpec, tool

__all__ = ["Reconciliation", "Registry", "ToolContext", "ToolSpec", "tool"]
