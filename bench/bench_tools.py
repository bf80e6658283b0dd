"""Cheap tools for the Celery benchmarks (``DRES_TOOLS=...,bench.bench_tools``).

``record(n)`` is a write tool (``read_only`` is False, so the executor journals it and would
hard-block a repeat on a resume) whose side effect is nothing but its return value: the figures
then measure dres around the call, not the call.

``worker_pid()`` (read-only) answers with the PIDs of the pool process running the call and of its
parent, the worker's main process; its ``tool_done`` tells row 7 (crash pickup) which worker,
and which of its processes, runs a turn, and so which one to kill.
"""

from __future__ import annotations

import os
from typing import Any

from worker.tools import tool


@tool
def record(n: int) -> dict[str, Any]:
    """Record the number ``n`` (a write with no external effect, for benchmarks)."""
    return {"recorded": n}


@tool(read_only=True)
def worker_pid() -> dict[str, int]:
    """The PIDs of the process running this call (pid) and of its worker (ppid)."""
    return {"pid": os.getpid(), "ppid": os.getppid()}
