"""``dres watch``: a turn from its start, then live, until it ends (docs/commands.md,
docs/semantics.md).

By default the turn as a person reads it: the answer's text joined as it streams, one line per
tool call once its state is known (and, for a blocked or refused call, the call it matched),
"Resuming…" where a run picks the turn up again, and a status line. ``--events`` prints every
event instead, one line each with its stream id. Either way a time-limit stop is continued on
its own (``--no-auto-continue`` turns that off), through ``worker.edges.client.follow``, which
also rides out a Redis restart or outage (saying so on stderr) and goes on where it was.

A turn that stays ``queued`` for ``UNCLAIMED_S`` while watched is said on stderr, once per
stretch: no worker has taken it, and with no worker alive (``ledger.presence``, as ``GET
/healthz`` counts them) how to start one; the watch goes on.
"""

from __future__ import annotations

import itertools
import sys
from contextlib import suppress
from typing import Any, TextIO

from ledger import keys
from ledger.codec import Envelope
from ledger.events import (
    ApprovalDecided,
    ApprovalRequested,
    Event,
    RunEnded,
    RunStarted,
    Text,
    ToolBlocked,
    ToolDone,
    ToolStart,
)
from ledger.note import shown
from ledger.presence import Presence
from ledger.turn import TurnMeta
from ledger.usage import UsageFold
from worker.edges.client import FOLLOW_OUTAGE_S, STORE_DOWN, follow
from worker.edges.runtime import Runtime

SPINNER = "|/-\\"
LABELS = {
    "queued": "Queued",
    "running": "Running",
    "resuming": "Resuming",
    "waiting": "Waiting for approval",
    "completed": "Completed",
    "stopped": "Stopped",
}
#: characters of a value shown in an event's or a tool call's line
SHOWN_CHARS = 80
#: why a run picked the turn up, for people
CAUSES = {
    "next_chunk": "next chunk",
    "redelivery": "redelivered",
    "reaper": "after a dead run",
    "auto_continue": "continued automatically",
    "continue": "continued",
    "approval": "a person decided",
    "tool_output": "the client answered",
    "timer": "its timer fell due",
}
#: seconds a watched turn stays queued before ``dres watch`` says no worker has taken it
UNCLAIMED_S = 5.0
#: a tool_blocked event's reason -> the call's state (docs/http-api.md's data-state words)
BLOCKED_STATES = {"completed": "blocked", "reconciled": "completed"}


def result_line(result: Any) -> str:
    """A tool's result in one line; a result naming another turn (``call_agent``'s child) shows
    that turn's id whole, first, so a person can watch it too."""
    if isinstance(result, dict) and isinstance(result.get("turn_id"), str):
        rest = {k: v for k, v in result.items() if k != "turn_id"}
        return f"turn {result['turn_id']} {shown(rest, SHOWN_CHARS)}"
    return shown(result, SHOWN_CHARS)


def describe(event: Event) -> str:
    data: dict[str, Any] = event.model_dump(mode="json")
    for name in ("v", "event_id", "turn_id", "run_id", "chunk", "ts", "type"):
        data.pop(name, None)
    if event.type == "text":
        return repr(data["text"])
    return " ".join(
        f"{k}={shown(v, SHOWN_CHARS)}" for k, v in data.items() if v not in (None, "", [], {})
    )


class RawView:
    """``--events``: every event on its own line."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.mid_line = False

    def show(self, envelope: Envelope) -> None:
        event = envelope.event
        self.out.write(
            f"{envelope.stream_id:>8}  c{event.chunk}  {event.type:<13} {describe(event)}\n"
        )

    def flush_line(self) -> None:
        """Nothing is left mid-line by this view."""


class PersonView:
    """The turn as a person reads it: text as it streams, a line per settled tool call."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.mid_line = False
        #: calls started and not yet settled, by call id (or tool name when a call has none)
        self.open: dict[str, ToolStart] = {}
        self.settled: dict[str, ToolStart | ToolBlocked] = {}

    def line(self, text: str) -> None:
        self.flush_line()
        self.out.write(text + "\n")

    def flush_line(self) -> None:
        if self.mid_line:
            self.out.write("\n")
            self.mid_line = False

    def call_line(self, state: str, call: ToolStart | ToolBlocked, extra: str = "") -> None:
        self.line(f"  [{state}] {call.tool} {shown(call.input, SHOWN_CHARS)}{extra}")

    def show(self, envelope: Envelope) -> None:
        event = envelope.event
        if isinstance(event, Text):
            self.out.write(event.text)
            self.mid_line = not event.text.endswith("\n")
        elif isinstance(event, RunStarted) and event.cause != "first":
            self.line(f"Resuming… ({CAUSES.get(event.cause, event.cause)})")
        elif isinstance(event, ToolStart):
            self.open[event.call_id or event.tool] = event
        elif isinstance(event, ToolDone):
            self._done(event)
        elif isinstance(event, ToolBlocked):
            self._blocked(event)
        elif isinstance(event, ApprovalRequested):
            self.line(
                f"  [waiting] {event.tool} {shown(event.input, SHOWN_CHARS)} needs approval: "
                f"dres approve {event.turn_id} {event.approval_id} (or dres deny …)"
            )
        elif isinstance(event, ApprovalDecided):
            why = f": {event.reason}" if event.reason else ""
            self.line(f"  [{event.decision}] approval {event.approval_id} by {event.by}{why}")
        elif isinstance(event, RunEnded) and event.reason not in ("completed", "waiting"):
            for call in self.open.values():
                self.call_line("interrupted", call, " (outcome unknown)")
            self.open.clear()

    def _done(self, event: ToolDone) -> None:
        call = self.open.pop(event.call_id or event.tool, None)
        if call is None:
            return
        self.settled[call.call_id or call.tool] = call
        state = "error" if event.is_error else "completed"
        self.call_line(state, call, f" -> {result_line(event.result)}")

    def _blocked(self, event: ToolBlocked) -> None:
        state = BLOCKED_STATES.get(event.reason, "refused")
        if event.reason == "denied":  # a person's decision, not a match in the journal
            said = event.result.get("error") if isinstance(event.result, dict) else None
            extra = f" ({said or 'denied by a person'}), not run"
        else:
            matched = self.settled.get(event.matched_call_id or "")
            what = f"{matched.tool} {shown(matched.input, 60)} " if matched else ""
            extra = f" ({event.reason}): matched {what}[{event.matched_call_id or '?'}], not run"
        self.call_line(state, event, extra)
        self.settled[event.call_id or event.tool] = event


def spent(usage: UsageFold) -> str:
    """The tokens the turn spent so far, for its status line ("" while none were reported)."""
    if not usage.input_tokens and not usage.output_tokens:
        return ""
    return f" · {usage.input_tokens:,} tokens in, {usage.output_tokens:,} out"


def unclaimed(runtime: Runtime, waited_s: float, meta: TurnMeta | None = None) -> str:
    """The line for a turn no worker has taken for ``waited_s``: one held (no run sent yet)
    waits for its conversation's live turn or its tenant (docs/semantics.md); else, with no
    worker alive, how to start one, or how many are (busy, or consuming other queues)."""
    if meta is not None and meta.held:
        try:
            line = runtime.redis.get(keys.conversation_line(meta.conversation_id))
            if line not in (meta.turn_id, meta.turn_id.encode()):
                return f"The turn waits for its conversation's live turn after {waited_s:g} s"
            view = runtime.lifecycle.tenant_view(meta.tenant)
        except STORE_DOWN:
            return f"The turn waits to start after {waited_s:g} s; still watching"
        return (
            f"The turn waits for its tenant {meta.tenant!r} after {waited_s:g} s "
            f"({view['running']} running, {view['queued']} queued); still watching"
        )
    said = f"No worker has taken the turn after {waited_s:g} s"
    try:
        workers = Presence(runtime.redis).count(int(runtime.clock.now() * 1000))
    except STORE_DOWN:
        return f"{said}; still watching"
    if not workers:
        return f"{said}: no worker is running — start one with `dres worker`; still watching"
    alive = "1 worker is" if workers == 1 else f"{workers} workers are"
    return f"{said} ({alive} running: busy, or not consuming its queue); still watching"


class Unclaimed:
    """When to say that the turn is still ``queued``: once per stretch, ``UNCLAIMED_S`` after
    it was first seen so (``due``: asked with the turn's status at each batch)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.since: float | None = None
        self.said = False

    def due(self, status: str) -> bool:
        if status != "queued":
            self.since, self.said = None, False
            return False
        now = self.runtime.clock.now()
        if self.since is None:
            self.since = now
        if self.said or now - self.since < UNCLAIMED_S:
            return False
        self.said = True
        return True


def watch(
    runtime: Runtime,
    turn_id: str,
    *,
    events: bool = False,
    auto_continue: bool = True,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> str:
    """Show the turn (replay, then live) until it ends; return its final status."""
    view: RawView | PersonView = RawView(out) if events else PersonView(out)
    live = out.isatty()
    spin = itertools.cycle(SPINNER)
    spinning = False  # a status line is on screen (a terminal only), to be wiped before output
    meta: TurnMeta | None = None
    usage = UsageFold()
    waiting = Unclaimed(runtime)

    def outage(error: Exception) -> None:
        err.write(f"Redis is unreachable ({error}); trying again for up to {FOLLOW_OUTAGE_S:g} s\n")
        err.flush()

    for batch in follow(runtime, turn_id, auto_continue=auto_continue, on_outage=outage):
        if spinning and (batch or not live):
            out.write("\r\x1b[K")
            spinning = False
        for envelope in batch:
            view.show(envelope)
        usage.feed(envelope.event for envelope in batch)
        with suppress(*STORE_DOWN):  # the status line waits; ``follow`` rides the outage out
            meta = runtime.ledger.meta(turn_id)
        if meta is not None and waiting.due(meta.status):
            if spinning:  # wiped first: the spinner is drawn again below the line
                out.write("\r\x1b[K")
                out.flush()
                spinning = False
            err.write(unclaimed(runtime, UNCLAIMED_S, meta) + "\n")
            err.flush()
        if live and meta is not None and not meta.ended and not view.mid_line:
            label = LABELS.get(meta.status, meta.status)
            out.write(f"\r\x1b[K{next(spin)} {label}…{spent(usage)}")
            spinning = True
        out.flush()
    if spinning:
        out.write("\r\x1b[K")
    meta = runtime.ledger.meta(turn_id)  # as ``follow`` saw it end
    view.flush_line()
    why = f" ({meta.code})" if meta.code else ""
    auto = f", continued automatically {meta.auto_continues}x" if meta.auto_continues else ""
    out.write(f"{LABELS.get(meta.status, meta.status)}{why}{auto}{spent(usage)}\n")
    out.flush()
    return str(meta.status)
