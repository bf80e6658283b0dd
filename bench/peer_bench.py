"""Row 6 of ``make bench``: a peer's figures (``make bench-peers``'s ``bench/peers/dbos.json``,
DBOS Transact on SQLite) beside this run's dres figures of rows 2 and 3. Nothing is measured here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness import HERE, Row
from bench.rebuild_bench import CALLS_1000

#: where ``make bench-peers`` writes the peer's figures
DEFAULT_PEERS = HERE / "peers" / "dbos.json"


def peer_rows(rows: Sequence[Row], path: Path) -> tuple[list[Row], dict[str, Any] | None]:
    """Row 6 from the peer's JSON beside this run's dres figures (none without the JSON)."""
    if not path.exists():
        return [], None
    peer = json.loads(path.read_text())
    by_name = {row.name: row for row in rows}
    tool = by_name.get("tool call p50")
    rebuild = next((r for r in rows if r.extra.get("entries") == CALLS_1000), None)
    steps = int(peer["steps"])
    label = f"{peer['peer']} {peer['versions']['dbos']} (SQLite), measured {peer['date']}"
    extra = {"unpaired": True, "peer_file": str(path), "peer_date": peer["date"]}
    out = []
    if tool is not None:
        out.append(
            Row(
                f"per step: DBOS {steps} no-op steps vs dres tool call", "ms",
                [us / 1000 for us in tool.dres], peer["per_step_ms_samples"], None,
                {**extra, "dres_from": "row 2 (tool call p50)"},
                number="6", baseline=f"{label}: per-step overhead",
            )
        )  # fmt: skip
    if rebuild is not None:
        calls = rebuild.extra["tool_calls"]
        out.append(
            Row(
                f"recovery: DBOS {steps} steps vs dres rebuild {calls} calls", "ms",
                rebuild.dres, peer["recovery_replay_ms_samples"], None,
                {**extra, "dres_from": f"row 3 (rebuild of {calls} tool calls)"},
                number="6", baseline=f"{label}: replay of recorded steps on recovery",
            )
        )  # fmt: skip
    return out, peer
