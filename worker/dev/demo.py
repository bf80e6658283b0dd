"""``dres demo``: one turn on a real prefork worker, cut by its soft limit, resumed safely.

The demo turn's model ignores the journal note and re-issues the writes it already made (the
``restart`` script); the first chunk's soft time limit lands while it "thinks". The output is the
turn's ledger timeline as it happens, the journal note the resumed chunk was given, the blocked
duplicates, and the outbox: one email. Everything it starts, it stops. Exit 0 when the turn
completed with exactly one email sent.

With ``DRES_MODEL`` set (``anthropic:MODEL`` with ``ANTHROPIC_API_KEY``; ``openai:MODEL`` with
``OPENAI_API_KEY`` and, for any OpenAI-compatible server, ``OPENAI_BASE_URL``), the same turn
runs on that model instead, with the same short soft limit: what it does is the model's choice,
so the demo then exits 0 when the turn completed without sending an email twice.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ledger.events import Event, Resumed, Text, ToolBlocked, TurnEnded
from ledger.note import shown
from ledger.store import Ledger
from worker.base.settings import load_settings
from worker.demo_tools import outbox
from worker.dev.embedded import embedded_redis
from worker.dev.worker_process import WorkerProcess
from worker.edges.runtime import Runtime

MESSAGE = "Email Ada the launch notes, then track the launch in a ticket."
#: seconds: the demo's foreground soft / hard limits (the script's third step thinks for 5 s)
SOFT_LIMIT_S = 1.5
HARD_LIMIT_S = 10.0
#: seconds the demo waits for the turn before it gives up
DEADLINE_S = 45.0
#: characters of a value shown in a line of the timeline
SHOWN_CHARS = 70


def _env(url: str) -> dict[str, str]:
    limits = {
        "SOFT_LIMIT_S": SOFT_LIMIT_S,
        "HARD_LIMIT_S": HARD_LIMIT_S,
        "BG_SOFT_LIMIT_S": SOFT_LIMIT_S,
        "BG_HARD_LIMIT_S": HARD_LIMIT_S,
    }
    env = {f"DRES_{name}": str(value) for name, value in limits.items()}
    env.update(DRES_REDIS_URL=url, DRES_VISIBILITY_TIMEOUT_S="60", DRES_REAPER_INTERVAL_S="1")
    return env


def run_demo() -> int:
    started = time.monotonic()
    with embedded_redis() as redis_info, tempfile.TemporaryDirectory(prefix="dres-demo-") as tmp:
        env = _env(redis_info.url)
        os.environ.update(env)
        settings = load_settings()
        print("dres demo: an agent turn cut off by its soft time limit, resumed without repeats")
        print(f"  redis:  {redis_info.description}")
        if not redis_info.durable:
            print("  WARNING: no redis-server found; fakeredis keeps nothing on disk")
        worker = WorkerProcess.start({**os.environ, **env}, Path(tmp) / "worker.log")
        try:
            runtime = Runtime.from_settings(settings)
            print(f"  worker: prefork, 1 process, soft limit {SOFT_LIMIT_S} s (pid {worker.pid})")
            print(f"  model:  {settings.model or 'the scripted demo model (DRES_MODEL unset)'}")
            turn = runtime.lifecycle.enqueue(MESSAGE)
            print(f"  turn:   {turn.turn_id}\n")
            events = _follow(runtime.ledger, turn.turn_id)
            ok = _report(events, runtime, turn.turn_id, scripted=not settings.model)
        finally:
            worker.stop()
    print(f"\ndone in {time.monotonic() - started:.1f} s")
    return 0 if ok else 1


def _follow(ledger: Ledger, turn_id: str) -> list[Event]:
    """Print the timeline as the worker writes it, until the turn ends."""
    print(f"  {'stream id':<10}{'chunk':<7}event")
    events: list[Event] = []
    text: list[str] = []
    deadline = time.monotonic() + DEADLINE_S
    for batch in ledger.tail(turn_id, block_ms=200):
        for envelope in batch:
            event = envelope.event
            events.append(event)
            if isinstance(event, Text):
                text.append(event.text)
                continue
            if text:
                print(f"  {'':<10}{'':<7}{'text':<14}{''.join(text)!r}")
                text = []
            print(f"  {envelope.stream_id:<10}{event.chunk:<7}{_describe(event)}")
        if any(isinstance(e, TurnEnded) for e in events):
            return events
        if time.monotonic() > deadline:
            print(f"  ... the turn did not end within {DEADLINE_S:.0f} s")
            return events
    return events


def _describe(event: Event) -> str:
    data: dict[str, Any] = event.model_dump(mode="json")
    kind = event.type
    describe: dict[str, Callable[[], str]] = {
        "turn_started": lambda: repr(data["message"]),
        "run_started": lambda: f"cause={data['cause']} epoch={data['epoch']}",
        "resumed": lambda: f"cause={data['cause']} (the prompt gets the nudge and the note)",
        "tool_start": lambda: f"{data['tool']} {shown(data['input'], SHOWN_CHARS)}",
        "tool_done": lambda: f"{data['tool']} -> {shown(data['result'], SHOWN_CHARS)}",
        "tool_blocked": lambda: (
            f"{data['tool']} NOT RUN ({data['reason']}): journaled result returned"
        ),
        "run_ended": lambda: (
            f"{data['reason']}"
            + (
                "   <- the soft time limit cut the chunk mid-turn"
                if data["reason"] == "soft_limit"
                else ""
            )
        ),
        "turn_ended": lambda: str(data["status"]),
    }
    detail = describe.get(kind, lambda: "")()
    return f"{kind:<14}{detail}"


def _report(events: list[Event], runtime: Runtime, turn_id: str, *, scripted: bool) -> bool:
    notes = [e.note for e in events if isinstance(e, Resumed) and e.note]
    print("\nThe journal note the resumed chunk gave the model:")
    for line in (notes[0] if notes else "(none)").splitlines():
        print(f"  | {line}")
    blocked = [e for e in events if isinstance(e, ToolBlocked)]
    print(f"\nDuplicates the executor refused to run again: {len(blocked)}")
    for event in blocked:
        print(
            f"  - {event.tool} {shown(event.input, SHOWN_CHARS)} -> matched {event.matched_call_id}"
        )
    sent = [m for m in outbox(runtime.redis) if m.get("turn_id") == turn_id]
    print(f"\nOutbox: {len(sent)} email(s) sent by this turn")
    for message in sent:
        print(f"  - to {message['to']}: {message['subject']!r}")
    ended = [e for e in events if isinstance(e, TurnEnded)]
    status = ended[-1].status if ended else "not ended"
    print(f"Turn status: {status}")
    # The scripted model sends one email; a real model decides for itself, but never twice.
    return status == "completed" and (len(sent) == 1 if scripted else len(sent) <= 1)
