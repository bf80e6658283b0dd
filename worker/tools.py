"""The public face of tools (docs/tools.md): ``from worker.tools import tool, ToolContext``."""

from worker.engine.tools import Reconciliation, ToolContext, tool

__all__ = ["Reconciliation", "ToolContext", "tool"]
