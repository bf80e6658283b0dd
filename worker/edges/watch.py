"""``dres watch``: a turn's events from the start, then live, with a status line, until it ends."""

from __future__ import annotations

import itertools
import sys
from typing import Any, TextIO

from ledger.events import Event
from ledger.note import shown
from ledger.store import Ledger

SPINNER = "|/-\\"
LABELS = {
    "queued": "Queued",
    "running": "Running",
    "resuming": "Resuming",
    "completed": "Completed",
    "stopped": "Stopped",
}
#: values an event's line leaves out
EMPTY: tuple[object, ...] = (None, "", [], {})
#: characters of a value shown in an event's line
SHOWN_CHARS = 80
#: milliseconds each live read waits before the status line is refreshed
POLL_MS = 250


def describe(event: Event) -> str:
    data: dict[str, Any] = event.model_dump(mode="json")
    for name in ("v", "event_id", "turn_id", "run_id", "chunk", "ts", "type"):
        data.pop(name, None)
    if event.type == "text":
        return repr(data["text"])
    return " ".join(
        f"{k}={shown(v, SHOWN_CHARS)}" for k, v in data.items() if v not in (None, "", [], {})
    )


def watch(ledger: Ledger, turn_id: str, out: TextIO = sys.stdout) -> str:
    """Print every event (replay, then live); return the turn's final status."""
    ledger.meta(turn_id)  # an unknown turn is an error before anything is printed
    live = out.isatty()
    spin = itertools.cycle(SPINNER)
    for batch in ledger.tail(turn_id, block_ms=POLL_MS):
        if live:
            out.write("\r\x1b[K")
        for envelope in batch:
            event = envelope.event
            out.write(
                f"{envelope.stream_id:>8}  c{event.chunk}  {event.type:<13} {describe(event)}\n"
            )
        meta = ledger.meta(turn_id)
        status = meta.status
        # A turn_ended is final only if nothing follows it: after a Continue the turn goes on.
        caught_up = not batch or ledger.last_id(turn_id) == batch[-1].stream_id
        if _ended(status) and caught_up:
            why = f" ({meta.code})" if meta.code else ""
            out.write(f"{LABELS.get(status, status)}{why}\n")
            out.flush()
            return status
        if live:
            out.write(f"{next(spin)} {LABELS.get(status, status)}…")
        out.flush()
    return "unknown"  # pragma: no cover - tail never ends by itself


def _ended(status: str) -> bool:
    return status in {"completed", "stopped"}
