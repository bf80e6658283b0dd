"""Tools: the ``@tool`` decorator and ``ToolSpec`` (``spec``), the registry, its sources
(``sources``), and the executor with both resume layers."""

from worker.engine.tools.context import Reconciliation, ToolContext
from worker.engine.tools.registry import Registry
from worker.engine.tools.spec import ToolSpec, tool

__all__ = ["Reconciliation", "Registry", "ToolContext", "ToolSpec", "tool"]
