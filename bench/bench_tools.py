"""A cheap write tool for the Celery benchmarks (``DRES_TOOLS=...,bench.bench_tools``).

``record(n)`` is a write tool (``read_only`` is False, so the executor journals it and would
hard-block a repeat on a resume) whose side effect is nothing but its return value: the figures
then measure dres around the call, not the call.
"""

from __future__ import annotations

from typing import Any

from worker.tools import tool


@tool
def record(n: int) -> dict[str, Any]:
    """Record the number ``n`` (a write with no external effect, for benchmarks)."""
    return {"recorded": n}
