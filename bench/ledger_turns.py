"""Turns and events written straight to the ledger by the in-process rows (1-3, C1-C3, D1-D4):
tool events of a fixed JSON size, and a turn created and claimed so that its appends are fenced.
"""

from __future__ import annotations

import time
from typing import Any

from ledger import keys
from ledger.codec import encode
from ledger.events import Event, ToolDone, ToolStart, TurnStarted
from ledger.lease import Lease
from ledger.signature import input_signature
from ledger.store import Ledger
from ledger.turns import TurnStore

#: size of the JSON of each tool event, as stored in the entry's ``e`` field
PAYLOAD_BYTES = 500
BASE_TS = 1_700_000_000.0
RUN_ID = "r1"
FILLER = "grep: src/ledger/store.py:42: the quick brown fox jumps over the lazy dog; "


def filler(length: int) -> str:
    return (FILLER * (length // len(FILLER) + 1))[:length]


def _tool_event(turn_id: str, n: int, pad: int) -> Event:
    """Event ``n`` of a turn: tool_start for even n, the matching tool_done for odd n."""
    call = n // 2
    common: dict[str, Any] = {
        "event_id": f"{turn_id}:ev{n:09d}",
        "turn_id": turn_id,
        "run_id": RUN_ID,
        "chunk": 0,
        "ts": BASE_TS + n,
    }
    if n % 2 == 0:
        tool_input = {"path": f"src/module_{call:09d}.py", "pattern": filler(pad)}
        return ToolStart(
            **common,
            call_id=f"call{call:09d}",
            tool="grep",
            input=tool_input,
            signature=input_signature(tool_input),
        )
    result = {"matches": 3, "output": filler(pad)}
    return ToolDone(**common, call_id=f"call{call:09d}", tool="grep", result=result)


#: filler length by (event kind, length of the turn id)
_PADS: dict[tuple[int, int], int] = {}


def tool_event(turn_id: str, n: int) -> Event:
    """A tool event whose JSON is ``PAYLOAD_BYTES`` long."""
    shape = (n % 2, len(turn_id))
    if shape not in _PADS:
        bare = len(encode(_tool_event(turn_id, shape[0], 0)))
        _PADS[shape] = max(0, PAYLOAD_BYTES - bare)
    return _tool_event(turn_id, n, _PADS[shape])


def turn_started(turn_id: str) -> TurnStarted:
    return TurnStarted(
        event_id=f"{turn_id}:start",
        turn_id=turn_id,
        run_id=RUN_ID,
        chunk=0,
        ts=BASE_TS,
        conversation_id="bench-conversation",
        message="benchmark turn",
    )


def open_turn(ledger: Ledger, turn_id: str) -> Lease:
    """Create the turn with its first run and claim it; returns the run's lease."""
    ledger.client.delete(*keys.turn_keys(turn_id))
    turns = TurnStore(ledger)
    lease_until_ms = int(time.time() * 1000) + 3_600_000
    if not turns.create(
        turn_started(turn_id), first_run=RUN_ID, look_at_ms=lease_until_ms, fields={}
    ):
        raise RuntimeError(f"turn {turn_id} already exists")
    claim = turns.claim(
        turn_id, RUN_ID, lease_until_ms=lease_until_ms, event_id=f"{turn_id}-claim", ts=time.time()
    )
    if claim.lease is None:
        raise RuntimeError(f"could not claim {turn_id}: {claim}")
    return claim.lease
