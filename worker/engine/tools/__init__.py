"""Tools: the ``@tool`` decorator and ``ToolSpec`` (``spec``), the registry, its sources
(``sources``), and the executor with both resume layers."""

from worker.engine.tools.context import Reconciliation, ToolContext
from worker.engine.tools.registry import Registry
from worker.engine.tools.spec import ToolSpec, tool
from worker.engine.tools.timers import WaitUntil, wait_until

__all__ = [
    "Reconciliation",
    "Registry",
    "ToolContext",
    "ToolSpec",
    "WaitUntil",
    "tool",
    "wait_until",
]
