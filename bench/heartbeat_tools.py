"""The heartbeat bench's tool (``DRES_TOOLS=bench.heartbeat_tools``): ``hold(seconds)`` keeps its
run busy without a Redis command of its own, as a slow tool or a model that has not answered yet
does, so that the Redis commands counted meanwhile are the run's bookkeeping alone (its lease
renewals, its looks at the Stop flag) and the reaper's."""

from __future__ import annotations

import time
from typing import Any

from worker.tools import tool


@tool(read_only=True)
def hold(seconds: float) -> dict[str, Any]:
    """Wait ``seconds`` and say so (a read with no effect, for benchmarks)."""
    time.sleep(seconds)
    return {"held_s": seconds}
