"""The public face of tools (docs/tools.md): ``from worker.tools import tool, ToolContext``;
``read_only`` marks a framework agent's tool read-only (docs/loops.md); a tool returns
``wait_until(when, result=…)`` to make its turn wait, held by no worker (docs/semantics.md)."""

from worker.engine.frameworks.base import read_only
from worker.engine.tools import Reconciliation, ToolContext, WaitUntil, tool, wait_until

__all__ = ["Reconciliation", "ToolContext", "WaitUntil", "read_only", "tool", "wait_until"]
