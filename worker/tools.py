"""The public face of tools (docs/tools.md): ``from worker.tools import tool, ToolContext``;
``read_only`` marks a framework agent's tool read-only (docs/loops.md)."""

from worker.engine.frameworks.base import read_only
from worker.engine.tools import Reconciliation, ToolContext, tool

__all__ = ["Reconciliation", "ToolContext", "read_only", "tool"]
