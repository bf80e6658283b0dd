"""One run's view of its turn: who it is (``RunContext``) and its fenced writes (``Recorder``).

The recorder fills in the fields every event carries (ids from the injected ``Ids``, time from the
injected ``Clock``), appends under the run's lease epoch, and keeps the turn's events in memory so
the loop rebuilds its prompt without reading Redis again.

Streamed text is coalesced (``stream_text``): the deltas of a window (``flush_s``) or of a size
bound (``flush_chars``) become one ``text`` event. Whatever else the run records writes the
buffered text first, in the same append; a flusher thread of the run's own (or, in a process
of many runs, the process's: ``worker.engine.flushes``) writes it when the window ends while
the model pauses, so a watcher still sees it within the window. A stream that
goes quiet ends its window early: when no delta came for ``QUIET_GAPS`` times the stream's own
pace (its recent gap between deltas; never less than ``1 / QUIET_FLOOR`` of the window), the text
is written then. A steady stream still fills whole windows — its gaps never reach that — while the
last words before a pause (a tool call, the end of the answer) reach a watcher in a few gaps, not
a whole window. Every append of a run goes through one lock, so the events keep their order and
the lease's sequence one writer.

With ``DRES_DURABILITY`` above ``ack`` the recorder also confirms, when asked (``confirm``), that
what the run wrote so far is on a replica or on disk (``ledger.durability``); nothing else it
writes waits for that.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog

from ledger.durability import Confirmation, Confirms
from ledger.errors import StopRequested
from ledger.events import Event, Text
from ledger.journal import Journal, build_journal
from ledger.lease import Lease
from ledger.store import Ledger
from worker.base import metrics
from worker.base.clock import Clock, Ids
from worker.engine import flushes
from worker.engine.flushes import Pending, SharedFlusher
from worker.engine.tools.guard import keep_signals_off_this_thread

E = TypeVar("E", bound=Event)

log = structlog.get_logger("dres.recorder")

#: signals that must reach the run's (main) thread, never the flusher: the soft limit, dres's
#: nudge, shutdown (worker.engine.tools.guard) and Ctrl-C
MAIN_THREAD_SIGNALS = {signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT}

#: a stream is quiet when no delta came for this many of its recent gaps between deltas
QUIET_GAPS = 3.0
#: ... and never sooner than this fraction of the window (a burst's tiny gaps are not a pace)
QUIET_FLOOR = 5.0
#: weight of the newest gap in the stream's pace (an exponential moving average)
PACE_WEIGHT = 0.2


@dataclass(frozen=True)
class RunContext:
    #: the run's hold on the turn (its epoch, chunk, cause and stream sequence)
    lease: Lease
    mode: str = "foreground"
    model: str | None = None
    #: Stop was requested when the run claimed the turn (read with the claim's metadata)
    stop_requested: bool = False
    #: the turn's events as read in the claim's atomic step (None: the run reads them itself)
    snapshot: list[Event] | None = field(default=None, compare=False, repr=False)
    #: the chunk the turn's chunk budget counts from (a Continue grants a fresh budget)
    chunk_base: int = 0
    conversation_id: str = ""
    #: the turn's trace context ("": untraced), which the run's spans join
    trace: str = ""

    @property
    def turn_id(self) -> str:
        return self.lease.turn_id

    @property
    def run_id(self) -> str:
        return self.lease.run_id

    @property
    def chunk(self) -> int:
        return self.lease.chunk

    @property
    def epoch(self) -> int:
        return self.lease.epoch

    @property
    def cause(self) -> str:
        """Why this run exists: first, next_chunk, redelivery, reaper, auto_continue, continue."""
        return self.lease.cause

    @property
    def resumed(self) -> bool:
        """Every run but the first resumes the turn: nudge, note and hard-block apply."""
        return self.cause != "first"


def make_event(
    cls: type[E], clock: Clock, ids: Ids, turn_id: str, run_id: str, chunk: int, **fields: Any
) -> E:
    """The one place an event's header is filled in: a new id, the clock's now, who wrote it."""
    return _made(cls, fields, clock, ids, turn_id, run_id, chunk)


def _made(
    cls: type[E],
    fields: dict[str, Any],
    clock: Clock,
    ids: Ids,
    turn_id: str,
    run_id: str,
    chunk: int,
) -> E:
    """``make_event`` on a keyword dict of the caller's own (each unpacking of it is a copy),
    validated by the model's validator as ``cls(**fields)`` would be, without the constructor's
    wrapper: a tool call makes two events, and these were a third of its own CPU."""
    fields["event_id"] = ids.new("ev")
    fields["ts"] = clock.now()
    fields["turn_id"] = turn_id
    fields["run_id"] = run_id
    fields["chunk"] = chunk
    event: E = cls.__pydantic_validator__.validate_python(fields)
    return event


class Recorder:
    def __init__(
        self,
        ledger: Ledger,
        run: RunContext,
        clock: Clock,
        ids: Ids,
        events: list[Event],
        *,
        flush_s: float = 0.0,
        flush_chars: int = 512,
        guard: AbstractContextManager[object] | None = None,
        durable: Confirms | None = None,
        shared: SharedFlusher | None = None,
    ) -> None:
        self.ledger = ledger
        self.run = run
        self.clock = clock
        self.ids = ids
        #: the turn's events: what was read at the start of the run plus what this run recorded
        self.events = events
        #: the events of the turns a fork inherits the journal of (read, never written): its
        #: journal is theirs and its own (``journal``)
        self.inherited: list[Event] = []
        #: events made by ``hold``, written together with the next one recorded
        self.held: list[Event] = []
        #: seconds streamed text may wait in the buffer (0: each delta written at once)
        self.flush_s = flush_s
        #: characters of buffered text that are written at once
        self.flush_chars = flush_chars
        #: the critical section a write of buffered text runs in (the loop's ``Interrupts``):
        #: an interrupt waits until the text taken from the buffer is in the ledger
        self.guard = guard or nullcontext()
        #: confirms records as DRES_DURABILITY asks; None at ``ack``: nothing to confirm
        self.durable = durable
        # One lock for every append of the run; the flusher waits on its condition.
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._pending: list[str] = []
        self._pending_chars = 0
        #: monotonic seconds when the oldest buffered delta arrived, and the newest
        self._since = 0.0
        self._last = 0.0
        #: the stream's pace: a moving average of its gaps between deltas (None: not known yet);
        #: a gap as long as the window is a pause, not the pace, and is left out
        self._pace: float | None = None
        self._flusher: threading.Thread | None = None
        #: the process's flusher of every run's text (a gevent worker's), else None: our own
        self._shared = shared
        #: the text the shared flusher is writing (``take_due`` .. ``written``)
        self._writing: Text | None = None
        #: monotonic seconds the flusher sleeps until (inf: until text comes)
        self._wake_at = math.inf
        self._closed = False
        #: an append of the flusher that failed: raised in the run's thread at its next write
        self._failed: BaseException | None = None

    def make(self, cls: type[E], **fields: Any) -> E:
        return self._made(cls, fields)

    def record(self, cls: type[E], **fields: Any) -> E:
        event = self._made(cls, fields)
        self.record_many((event,))
        return event

    def record_unless_stopped(self, cls: type[E], **fields: Any) -> E:
        """Record an event only while the turn's Stop flag is unset, in the same atomic step (a
        write's ``tool_start``): ``StopRequested`` when it is set, and nothing of the event
        written (what was buffered before it is)."""
        event = self._made(cls, fields)
        with self._lock:
            if self._failed is not None:
                self._raise_failed()
            with self.guard:
                self._write((event,), unless_stopped=True)
        return event

    def journal(self) -> Journal:
        """The journal of the turn so far: of the turns it inherits (a fork's), then its own."""
        if not self.inherited:
            return build_journal(self.events)
        return build_journal([*self.inherited, *self.events])

    def _made(self, cls: type[E], fields: dict[str, Any]) -> E:
        lease = self.run.lease
        return _made(cls, fields, self.clock, self.ids, lease.turn_id, lease.run_id, lease.chunk)

    def hold(self, cls: type[E], **fields: Any) -> E:
        """Make an event that joins ``events`` now and is written with the next record: one
        round trip for both. Nothing must act on it outside this run before then."""
        event = self.make(cls, **fields)
        with self._lock:
            self.events.append(event)
            self.held.append(event)
        return event

    def take_held(self) -> list[Event]:
        """The held events, no longer held: the caller writes them (first) now."""
        with self._lock:
            held, self.held = self.held, []
            return held

    def take_unwritten(self) -> list[Event]:
        """What the run made but did not write, in order: the held events, then the buffered
        text as one ``text`` event. The caller writes them with the run's end; nothing of the
        run is written after this (the flusher stops)."""
        with self._lock:
            self._closed = True
            self._wake.notify()
            text = self._take_text()
            unwritten = [*self.take_held(), *([text] if text is not None else [])]
            if text is not None:
                self.events.append(text)
            return unwritten

    def record_many(self, events: Sequence[Event]) -> None:
        with self._lock:
            if self._failed is not None:
                self._raise_failed()
            if self._pending:
                # only buffered text needs the deferral: taken from the buffer, it must land
                with self.guard:
                    self._write(events)
            else:
                self._write(events)

    def confirm(self) -> Confirmation:
        """Confirm what this run wrote so far (its newest record and all before it) as
        ``DRES_DURABILITY`` asks: one attempt, whose answer the caller judges."""
        if self.durable is None:
            raise RuntimeError("nothing to confirm at DRES_DURABILITY=ack")
        with self._lock:
            newest = self.run.lease.last[1]
        return self.durable.confirm(self.run.turn_id, newest)

    # -- streamed text ---------------------------------------------------------------------

    def stream_text(self, text: str) -> None:
        """A streamed delta: buffered, written with the next ones of its window (or at once)."""
        if not text:
            return
        with self._lock:
            self._raise_failed()
            if self._closed:
                return  # the run's end is recorded (or being recorded) by its caller
            now = time.monotonic()
            self._keep_pace(now)
            first = not self._pending
            if first:
                self._since = now
            self._pending.append(text)
            self._pending_chars += len(text)
            if self.flush_s <= 0 or self._pending_chars >= self.flush_chars:
                with self.guard:
                    self._write(())
            elif self._shared is not None:
                due = self._due()
                if first or due < self._wake_at:
                    self._wake_at = due
                    self._shared.schedule(self, due)
            elif self._flusher is None:
                self._flusher = threading.Thread(
                    target=self._flush_when_due, name=f"dres-text-{self.run.run_id}", daemon=True
                )
                self._flusher.start()
            elif first or self._due() < self._wake_at:
                # the flusher sleeps until text comes, then until its deadline: woken only when
                # that deadline came sooner (a later one it reads again when it wakes)
                self._wake.notify()

    def flush(self) -> None:
        """Write the buffered text now (an interrupt's way out: before the run's end)."""
        with self._lock, self.guard:
            self._write(())

    @property
    def buffered_chars(self) -> int:
        """Characters streamed and not yet written."""
        return self._pending_chars

    def close(self) -> None:
        """The run is over: the flusher stops; what is still buffered is dropped (an interrupt
        path has flushed it, an ending took it with ``take_unwritten``)."""
        with self._lock:
            self._closed = True
            self._wake.notify()
        metrics.flush_appends()

    # -- the process's shared flusher (``worker.engine.flushes``) ---------------------------

    def take_due(self, by: float) -> Pending | None:
        """The buffered text as one event when its window ends by ``by``, this run's lock then
        held until ``written``; None when nothing is due: the run is writing (which takes the
        text), it ended, or its window ends later (looked at again then)."""
        assert self._shared is not None
        if not self._lock.acquire(blocking=False):
            # The run holds its lock: mostly in a write, which takes the text, perhaps riding
            # out an outage (a look every few ms would spin the process's flusher on every such
            # run). Unscheduled now, so the run's next delta schedules it again; and looked at
            # once more a window later, for text a delta left pending as the lock was taken.
            self._wake_at = math.inf
            self._shared.schedule(self, by + max(self.flush_s, flushes.SLACK_S))
            return None
        if not self._closed and self._pending:
            due = self._due()
            if due <= by:
                self._wake_at = math.inf
                self._writing = self._take_text()
                if self._writing is not None:
                    return Pending(self._writing, self.run.lease, self.ledger)
            else:
                self._wake_at = due
                self._shared.schedule(self, due)
        self._lock.release()
        return None

    def written(self, made: str | Exception) -> None:
        """The shared flusher wrote the text ``take_due`` took (``made``: its stream id), or could
        not (the run meets the error at its next write); the run's lock released."""
        try:
            if isinstance(made, Exception):
                log.warning("streamed text could not be written", error=repr(made))
                self._failed = made
            elif self._writing is not None:
                self.events.append(self._writing)
        finally:
            self._writing = None
            self._lock.release()

    # -- inside the lock -------------------------------------------------------------------

    def _take_text(self) -> Text | None:
        if not self._pending:
            return None
        text = "".join(self._pending)
        self._pending.clear()
        self._pending_chars = 0
        return self.make(Text, text=text)

    def _write(self, events: Sequence[Event], *, unless_stopped: bool = False) -> None:
        """Append the held events, the buffered text and ``events``: one fenced round trip.
        ``unless_stopped``: ``events`` only while the Stop flag is unset (``StopRequested``);
        the rest is written all the same."""
        text = self._take_text() if self._pending else None
        ours = [text, *events] if text is not None else events
        # a lone event with nothing held takes append_many's one-XADD path
        held, self.held = self.held, []
        batch = [*held, *ours] if held else ours
        if not batch:
            return
        began = time.perf_counter()
        try:
            self.ledger.append_many(batch, lease=self.run.lease, unless_stopped=unless_stopped)
        except StopRequested:
            before = [*held, *([text] if text is not None else [])]
            if before:
                self.ledger.append_many(before, lease=self.run.lease)
                self.events.extend([text] if text is not None else [])
            raise
        finally:
            metrics.observe_append(time.perf_counter() - began)
        self.events.extend(ours)

    def _keep_pace(self, now: float) -> None:
        """A delta came at ``now``: fold the gap since the previous one into the pace."""
        previous, self._last = self._last, now
        gap = now - previous
        if not previous or gap >= self.flush_s:  # the stream's first delta, or a pause
            return
        pace = self._pace
        self._pace = gap if pace is None else pace + PACE_WEIGHT * (gap - pace)

    def _due(self) -> float:
        """Monotonic seconds when the buffered text is written: its window's end, or sooner
        when the stream has gone quiet for a few of its gaps."""
        due = self._since + self.flush_s
        if self._pace is not None:
            quiet = max(QUIET_GAPS * self._pace, self.flush_s / QUIET_FLOOR)
            due = min(due, self._last + quiet)
        return due

    def _raise_failed(self) -> None:
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed

    def _flush_when_due(self) -> None:
        """The flusher thread: write the buffer when its oldest delta's window ends."""
        keep_signals_off_this_thread(MAIN_THREAD_SIGNALS)
        with self._lock:
            while not self._closed:
                if not self._pending:
                    self._wake_at = math.inf
                    self._wake.wait()
                    continue
                self._wake_at = self._due()
                due = self._wake_at - time.monotonic()
                if due > 0:
                    self._wake.wait(due)
                    continue
                try:
                    self._write(())
                except Exception as e:  # handed to the run's thread, not lost
                    log.warning("streamed text could not be written", error=repr(e))
                    self._failed = e
                    return
