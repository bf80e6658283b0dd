"""The streamed-text writes of a process that runs many chunks at once (docs/deploy.md).

A run's recorder buffers streamed text and writes it when its window ends
(``worker.engine.recorder``). A prefork pool process holds one run, whose own flusher thread
writes it. A gevent process holds hundreds, and a round trip per window per run would be most of
what it does (1,000 turns streaming 50 deltas a second in 50 ms windows: ~20,000 appends a
second). There its pool (``worker.lifecycle.pools``) chooses ``SharedFlusher``: one flusher for
every run, which the runtime hands to each run's recorder, and which writes the text of every run
whose window has ended in one round trip (``ledger.appends``).

While it writes a run's text it holds the run's lock, as the run's own flusher would, so the
run's next append waits for it and the events keep their order. An append the pipeline did not
make is made alone (``Ledger.append``, at the same stream id: one that landed unseen is found,
not repeated), those of all such runs at once, each riding out a Redis outage as any append does.
"""

from __future__ import annotations

import heapq
import itertools
import math
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from ledger.appends import append_each
from ledger.events import Event
from ledger.lease import Lease
from ledger.store import Ledger
from worker.base import metrics

log = structlog.get_logger("dres.recorder")

#: a run whose window ends this soon after the earliest one's is written with it: fuller round
#: trips, each run's text at most this much later than its window
SLACK_S = 0.005


@dataclass(frozen=True)
class Pending:
    """A run's buffered text, taken to be written under its lease."""

    event: Event
    lease: Lease
    ledger: Ledger


class Buffered(Protocol):
    """What the flusher asks of a run's recorder."""

    def take_due(self, by: float) -> Pending | None:
        """The run's text when its window ends by ``by``, the run's lock then held until
        ``written``; None when there is nothing due (the run scheduled again if need be)."""

    def written(self, made: str | Exception) -> None:
        """The write's outcome (its stream id, or the error the run meets at its next write);
        the run's lock released."""


class SharedFlusher:
    """One thread (a greenlet under gevent) writing the due text of every run of the process."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._wake = threading.Condition()
        #: (monotonic due time, order, recorder): a recorder may be in it more than once; a
        #: look finds what is really due (``take_due``)
        self._due: list[tuple[float, int, Buffered]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def schedule(self, recorder: Buffered, at: float) -> None:
        """Look at ``recorder`` at monotonic time ``at``."""
        with self._wake:
            earliest = self._due[0][0] if self._due else math.inf
            heapq.heappush(self._due, (at, next(self._order), recorder))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="dres-text-flusher", daemon=True
                )
                self._thread.start()
            if at < earliest:
                self._wake.notify()

    def _loop(self) -> None:
        while True:
            with self._wake:
                if not self._due:
                    self._wake.wait()
                    continue
                wait = self._due[0][0] - time.monotonic()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                by = time.monotonic() + SLACK_S
                due: dict[int, Buffered] = {}
                while self._due and self._due[0][0] <= by:
                    recorder = heapq.heappop(self._due)[2]
                    due[id(recorder)] = recorder
            try:
                self.flush(list(due.values()), by)
            except Exception:  # the process's every run streams through this loop: it goes on
                log.exception("streamed text could not be written")

    def flush(self, recorders: Sequence[Buffered], by: float) -> None:
        """Write the text of each of ``recorders`` whose window ends by ``by``."""
        taken: list[tuple[Buffered, Pending]] = []
        outcomes: dict[int, str | Exception] = {}
        try:
            for recorder in recorders:
                pending = recorder.take_due(by)
                if pending is not None:
                    taken.append((recorder, pending))
            by_ledger: dict[int, list[tuple[Buffered, Pending]]] = {}
            for item in taken:
                by_ledger.setdefault(id(item[1].ledger), []).append(item)
            for group in by_ledger.values():
                outcomes.update(_write(group))
        finally:  # every run taken is released, whatever happened (unknown: an error for it)
            for recorder, _ in taken:
                outcome = outcomes.get(id(recorder))
                recorder.written(outcome if outcome is not None else RuntimeError("not written"))


def _write(group: list[tuple[Buffered, Pending]]) -> dict[int, str | Exception]:
    """One round trip for the group (one ledger); the appends it did not make, alone."""
    began = time.perf_counter()
    made = append_each(group[0][1].ledger, [(p.event, p.lease) for _, p in group])
    metrics.observe_append(time.perf_counter() - began)
    outcomes: dict[int, str | Exception] = {}
    alone: list[tuple[Buffered, Pending]] = []
    for (recorder, pending), outcome in zip(group, made, strict=True):
        if isinstance(outcome, str):
            outcomes[id(recorder)] = outcome
        else:
            alone.append((recorder, pending))
    threads = []
    for recorder, pending in alone:

        def append(key: int = id(recorder), p: Pending = pending) -> None:
            try:
                outcomes[key] = p.ledger.append(p.event, lease=p.lease)
            except Exception as e:  # the run meets it at its next write
                outcomes[key] = e

        threads.append(threading.Thread(target=append, name="dres-text-append", daemon=True))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes
