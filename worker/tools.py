"""The public face of tools (CONTRACT §4): ``from worker.tools import tool, ToolContext``."""

from worker.engine.tools import Reconciliation, ToolContext, tool

__all__ = ["Reconciliation", "ToolContext", "tool"]
