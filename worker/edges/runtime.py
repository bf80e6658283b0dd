"""What a worker process needs, built once from the settings: Redis, ledger, tools, Celery.

Built lazily per process: a prefork child builds its own on its first task (redis-py also
reopens connections after a fork by itself). A runtime's pool (``worker.lifecycle.pools``: prefork's
unless a ``dres worker`` names another, ``for_chunks``) is handed to what runs the chunks: a run's
guard to its loop, the process's heartbeat to each run's, its shared flusher to each recorder.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from celery import Celery

from ledger.cache import EventCache
from ledger.durability import Confirmer
from ledger.store import Client, Ledger
from worker.base import metrics
from worker.base.clock import Clock, Ids, RandomIds, SystemClock
from worker.base.errors import TurnCancelled
from worker.base.failpoints import OFF, Failpoints
from worker.base.settings import Settings
from worker.base.tracing import Tracer
from worker.edges import tracing
from worker.edges.celery.app import create_app
from worker.edges.celery.dispatch import CeleryDispatcher
from worker.edges.redis.clients import API_STORE_OUTAGE_S, API_STORE_TIMEOUT_S, ledger_client
from worker.edges.webhook import approval_webhook
from worker.engine.flushes import SharedFlusher
from worker.engine.frameworks.loops import LoopSpec, adapter_for
from worker.engine.loop import AgentLoop
from worker.engine.models import Models
from worker.engine.recorder import RunContext
from worker.engine.tools import Registry
from worker.lifecycle import Lifecycle
from worker.lifecycle.heartbeat import Beats, Heartbeat
from worker.lifecycle.pools import PREFORK, Pool
from worker.lifecycle.reaper import Reaper

#: the pool this process's chunks run on (``Runtime.for_chunks``): ``dres worker`` names it once,
#: before its pool starts (a forked pool child inherits it); any other process runs prefork's ways
_chunks_pool: Pool = PREFORK


def run_chunks_on(pool: Pool) -> None:
    """Name the pool this process's chunks run on, once, at the worker's start."""
    global _chunks_pool
    _chunks_pool = pool


class CancellableClock:
    """A clock whose sleeps end early, raising ``TurnCancelled``, once Stop is requested."""

    def __init__(self, inner: Clock, cancelled: Callable[[], bool], poll_s: float) -> None:
        self.inner = inner
        self.cancelled = cancelled
        self.poll_s = poll_s

    def now(self) -> float:
        return self.inner.now()

    def sleep(self, seconds: float) -> None:
        end = self.inner.now() + seconds
        while (left := end - self.inner.now()) > 0:
            if self.cancelled():
                raise TurnCancelled("Stop requested")
            self.inner.sleep(min(left, self.poll_s))


@dataclass
class Runtime:
    settings: Settings
    clock: Clock
    ids: Ids
    #: the Celery app to dispatch with (a worker's own); None: one built from the settings
    celery: Celery | None = None
    #: seconds the ledger rides out an unreachable Redis; None: ``DRES_STORE_OUTAGE_S`` (a
    #: worker's runs). The API passes a short one: it answers 503 instead of waiting.
    store_outage_s: float | None = None
    #: seconds a Redis command (ledger or broker) may take before the store counts as
    #: unreachable, failing fast (the API's); None: a worker's patience
    store_timeout_s: float | None = None
    #: the pool that runs this process's chunks: how a run is interrupted, the heartbeat, the
    #: flusher of streamed text
    pool: Pool = PREFORK
    _beats: Beats | None = field(default=None, init=False, repr=False)
    _flusher: SharedFlusher | None = field(default=None, init=False, repr=False)
    _own: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        celery: Celery | None = None,
        *,
        store_outage_s: float | None = None,
        pool: Pool = PREFORK,
    ) -> Runtime:
        return cls(settings, SystemClock(), RandomIds(), celery, store_outage_s, pool=pool)

    @classmethod
    def for_chunks(cls, settings: Settings, celery: Celery) -> Runtime:
        """The runtime of a worker process's chunk tasks, on the pool the worker named
        (``run_chunks_on``)."""
        return cls.from_settings(settings, celery, pool=_chunks_pool)

    @classmethod
    def for_api(cls, settings: Settings) -> Runtime:
        """The API's: its Redis commands and chunk messages fail within about a second while
        the store is unreachable, and the API answers 503 (docs/faults.md)."""
        return cls(
            settings,
            SystemClock(),
            RandomIds(),
            store_outage_s=API_STORE_OUTAGE_S,
            store_timeout_s=API_STORE_TIMEOUT_S,
        )

    @cached_property
    def redis(self) -> Client:
        if self.store_timeout_s is None:
            return ledger_client(self.settings)
        return ledger_client(self.settings, self.store_timeout_s, fail_fast=True)

    @cached_property
    def ledger(self) -> Ledger:
        outage_s = self.store_outage_s
        return Ledger(
            self.redis,
            finished_ttl_s=self.settings.finished_ttl_s,
            outage_s=self.settings.store_outage_s if outage_s is None else outage_s,
            listener=metrics.StoreMetrics(),
        )

    @cached_property
    def confirmer(self) -> Confirmer | None:
        """Confirms a write's records as ``DRES_DURABILITY`` asks; None at ``ack``."""
        durability = self.settings.write_durability
        return Confirmer(self.ledger, durability) if durability.waits else None

    @cached_property
    def loops(self) -> tuple[LoopSpec, ...]:
        """DRES_LOOP's entries, parsed once for the process (every run asks its turn's)."""
        return self.settings.loops

    @cached_property
    def events(self) -> EventCache:
        """The turns this process read lately: a turn's next chunk here reads only what is new."""
        return EventCache(self.ledger)

    @cached_property
    def registry(self) -> Registry:
        return Registry.from_settings(self.settings)

    @cached_property
    def app(self) -> Celery:
        return self.celery or create_app(self.settings, publish_timeout_s=self.store_timeout_s)

    @cached_property
    def lifecycle(self) -> Lifecycle:
        dispatcher = CeleryDispatcher(self.app, self.settings)
        return Lifecycle(
            self.ledger,
            self.settings,
            self.clock,
            self.ids,
            dispatcher,
            cache=self.events,
            heartbeat=self.heartbeat,
            failpoints=self.failpoints,
            notify=approval_webhook(self.settings),
            tracer=self.tracer,
        )

    @cached_property
    def tracer(self) -> Tracer:
        """This process's traces (docs/tracing.md): OpenTelemetry's when ``OTEL_*`` names an
        endpoint, else nothing."""
        return tracing.from_environment()

    def beats(self) -> Beats:
        """The process's heartbeat thread, of its pool's kind, which every run's heartbeat joins
        (a forked process starts its own)."""
        with self._own:
            if self._beats is None or self._beats.pid != os.getpid():
                self._beats = self.pool.heartbeats()
            return self._beats

    def flusher(self) -> SharedFlusher | None:
        """The process's flusher of every run's streamed text when its pool's chunks share the
        process (a forked process makes its own); None: each run writes its own."""
        if not self.pool.chunks_share_a_process:
            return None
        with self._own:
            if self._flusher is None or self._flusher.pid != os.getpid():
                self._flusher = SharedFlusher()
            return self._flusher

    def heartbeat(self, run: RunContext, on_stop: Callable[[], None]) -> Heartbeat:
        return Heartbeat(
            self.lifecycle.store,
            run,
            self.clock,
            beats=self.beats(),
            lease_s=self.settings.lease_s,
            interval_s=self.settings.heartbeat_s,
            poll_s=self.settings.cancel_poll_s,
            on_stop=on_stop,
        )

    @cached_property
    def failpoints(self) -> Failpoints:
        return Failpoints(self.redis) if self.settings.failpoints else OFF

    @cached_property
    def models(self) -> Models:
        return Models()

    def reaper(self) -> Reaper:
        return Reaper(self.lifecycle)

    def loop(self, turn_id: str, interrupts: tuple[type[BaseException], ...]) -> AgentLoop:
        beats = self.beats()

        def polled(turn_id: str) -> bool:
            return self.lifecycle.stop_polled(turn_id, beats)

        clock = CancellableClock(self.clock, lambda: polled(turn_id), self.settings.cancel_poll_s)
        return AgentLoop(
            ledger=self.ledger,
            registry=self.registry,
            make_model=lambda spec: self.models.get(spec or self.settings.model, clock),
            settings=self.settings,
            clock=clock,
            ids=self.ids,
            interrupts=interrupts,
            is_cancelled=self.lifecycle.is_cancelled,
            stop_polled=polled,
            guard=self.pool.interrupts(),
            flusher=self.flusher(),
            tool_redis=self.redis,
            failpoints=self.failpoints,
            cache=self.events,
            durable=self.confirmer,
            tracer=self.tracer,
            # a turn's recorded loop -> its framework's agent (docs/loops.md), loaded at start
            frameworks=lambda loop: adapter_for(self.loops, loop),
        )
