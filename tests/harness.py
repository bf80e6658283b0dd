"""Run turns in-process through the real loop, ledger and lifecycle steps (no Celery).

``Harness.run_next()`` runs the chunk task's own path, ``Lifecycle.run_chunk``: claim the pending
run, run the loop, record how it ended, or on the (simulated) soft limit hand the turn over to the
next chunk, whose "message" the harness keeps instead of sending it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from sample_tools import SimulatedSoftLimit

from ledger.cache import EventCache
from ledger.events import ApprovalRequested, Event, TurnEnded
from ledger.store import Ledger
from ledger.turns import Outgoing
from rigs import write_script
from worker.base.settings import Settings, load_settings
from worker.edges.webhook import approval_webhook
from worker.engine.flushes import SharedFlusher
from worker.engine.loop import AgentLoop
from worker.engine.models import make_model
from worker.engine.models.base import ChatModel, ModelEvent, ModelRequest
from worker.engine.tools import Registry
from worker.engine.tools.sources.python import module_tools
from worker.lifecycle import Decided, Lifecycle, NewTurn

TOOL_MODULES = ["worker.demo_tools", "sample_tools"]


class FakeClock:
    """Time stands still unless slept; a sleep past ``limit_at`` raises the simulated soft limit."""

    def __init__(self) -> None:
        self.t = 1_700_000_000.0
        self.limit_at: float | None = None

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        if self.limit_at is not None and self.t + seconds >= self.limit_at:
            self.t = self.limit_at
            self.limit_at = None
            raise SimulatedSoftLimit("soft time limit (simulated)")
        self.t += seconds


class SeqIds:
    def __init__(self, namespace: str = "") -> None:
        self.n = itertools.count(1)
        self.namespace = namespace

    def new(self, prefix: str) -> str:
        return f"{prefix}_{self.namespace}{next(self.n)}"


class Recording:
    """Wraps a model and keeps every request it was sent."""

    def __init__(self, inner: ChatModel, requests: list[ModelRequest]) -> None:
        self.inner = inner
        self.name = inner.name
        self.requests = requests

    def stream(self, request: ModelRequest) -> Any:
        self.requests.append(request)
        items: list[ModelEvent] = list(self.inner.stream(request))
        return iter(items)


class KeptMessages:
    """A dispatcher that keeps each message (turn id, run id, mode) instead of sending it."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []
        self.revoked: list[str] = []

    def dispatch(self, turn_id: str, run_id: str, mode: str) -> None:
        self.sent.append((turn_id, run_id, mode))

    def prepare(self, turn_id: str, run_id: str, mode: str) -> Outgoing | None:
        return None  # sent after the step, where this dispatcher keeps it

    def prepare_all(self, runs: Sequence[tuple[str, str, str]]) -> list[Outgoing | None]:
        return [self.prepare(*run) for run in runs]

    def revoke(self, turn_id: str, run_id: str) -> None:
        self.revoked.append(run_id)

    def marked(self, turn_id: str, run_id: str) -> bool:
        return False  # no marks: the reaper asks queued_runs

    def queued_runs(self) -> set[str] | None:
        return {run_id for _, run_id, _ in self.sent}

    def backlog(self) -> int | None:
        # every message is kept, run or not: how many wait cannot be told (so tenant admission
        # lets new turns through without a bound on the room ahead of the workers)
        return None

    def queue_keys(self) -> tuple[str, ...] | None:
        return None


@dataclass
class Harness:
    client: redis.Redis
    tmp: Path
    settings: Settings = field(default_factory=lambda: load_settings(journal_read_backoff_s=0))
    clock: FakeClock = field(default_factory=FakeClock)
    ids: SeqIds = field(default_factory=SeqIds)
    requests: list[ModelRequest] = field(default_factory=list)
    results: list[TurnEnded] = field(default_factory=list)
    #: confirms a write's records (``ledger.durability.Confirms``): DRES_DURABILITY above ack
    durable: Any = None

    def __post_init__(self) -> None:
        self.ledger = Ledger(self.client)
        #: as in a worker process: each chunk reads only what is new since the previous one
        self.cache = EventCache(self.ledger)
        self.registry = Registry().add_specs(*module_tools(TOOL_MODULES))
        self.pending: str | None = None
        self.turn_id = ""
        self.messages = KeptMessages()
        self.lifecycle = self.lifecycle_for(self.ledger, self.cache)
        #: the process's shared flusher of streamed text its loops' runs get (a gevent worker's);
        #: None: each run's own, as on prefork
        self.flusher: SharedFlusher | None = None

    def lifecycle_for(self, ledger: Ledger, cache: EventCache | None) -> Lifecycle:
        return Lifecycle(
            ledger,
            self.settings,
            self.clock,
            self.ids,
            self.messages,
            cache=cache,
            notify=approval_webhook(self.settings),  # as a worker's runtime wires it
        )

    def loop(self, ledger: Ledger | None = None) -> AgentLoop:
        return AgentLoop(
            ledger=ledger or self.ledger,
            cache=self.cache if ledger is None else EventCache(ledger),
            registry=self.registry,
            make_model=lambda spec: Recording(make_model(spec, self.clock), self.requests),
            settings=self.settings,
            clock=self.clock,
            ids=self.ids,
            interrupts=(SimulatedSoftLimit,),
            tool_redis=self.client,
            durable=self.durable,
            flusher=self.flusher,
        )

    def script(self, steps: list[dict[str, Any]], on_resume: str = "continue") -> str:
        return write_script(self.tmp / f"script-{next(self.ids.n)}.json", steps, on_resume)

    def start(self, steps: list[dict[str, Any]], on_resume: str = "continue", **kw: Any) -> str:
        turn = self.lifecycle.create(
            kw.pop("message", "do the task"), model=self.script(steps, on_resume), **kw
        )
        self.turn_id, self.pending = turn.turn_id, turn.run_id
        return turn.turn_id

    def enqueue(
        self,
        steps: list[dict[str, Any]],
        message: str = "do the task",
        *,
        conversation_id: str = "conv-1",
        on_resume: str = "continue",
        **kw: Any,
    ) -> NewTurn:
        """A message to a conversation through ``Lifecycle.enqueue`` (its line, its double-text
        rule); ``follow`` makes the turn the one ``run_next`` runs once it is let through."""
        model = self.script(steps, on_resume)
        return self.lifecycle.enqueue(message, conversation_id=conversation_id, model=model, **kw)

    def follow(self, turn_id: str) -> None:
        """Make ``turn_id`` the harness's turn and its pending run the next ``run_next`` runs."""
        meta = self.lifecycle.store.meta(turn_id)
        assert meta.next_run, f"turn {turn_id} has no run pending ({meta.status}, held {meta.held})"
        self.turn_id, self.pending = turn_id, meta.next_run

    def run_next(
        self, *, soft_limit_after: float | None = None, ledger: Ledger | None = None
    ) -> TurnEnded | None:
        """One chunk through ``Lifecycle.run_chunk``; the turn's ending, or None when the chunk
        was handed over at its soft limit (the successor is then the pending run)."""
        assert self.pending, "no pending run"
        lifecycle = self.lifecycle if ledger is None else self.lifecycle_for(self.ledger, None)
        sent = len(self.messages.sent)
        if soft_limit_after is not None:
            self.clock.limit_at = self.clock.t + soft_limit_after
        what = lifecycle.run_chunk(
            self.turn_id, self.pending, self.loop(ledger), interrupts=(SimulatedSoftLimit,)
        )
        self.clock.limit_at = None
        assert what not in ("not-claimed", "holder alive"), "the pending run could not be claimed"
        self.pending = None
        if what == "chained":
            self.pending = self.messages.sent[sent][1]
            return None
        if what == "waiting":
            return None  # for a person's decision (``decide``)
        ended = self.events("turn_ended")
        assert ended, f"the chunk ended ({what}) without a turn_ended"
        result = ended[-1]
        assert isinstance(result, TurnEnded)
        self.results.append(result)
        return result

    def decide(
        self, approval_id: str | None = None, decision: str = "approve", **kw: Any
    ) -> Decided:
        """A person's decision on the turn's (newest) open approval request, with its signature
        unless ``signature`` is given; the run it resumes becomes the pending one."""
        requests = [
            e for e in self.events("approval_requested") if isinstance(e, ApprovalRequested)
        ]
        request = next(r for r in reversed(requests) if approval_id in (None, r.approval_id))
        kw.setdefault("signature", request.signature)
        decided = self.lifecycle.decide(self.turn_id, request.approval_id, decision, **kw)
        if decided.run_id is not None:
            self.pending = decided.run_id
        return decided

    def run_to_end(self, max_chunks: int = 10) -> TurnEnded:
        for _ in range(max_chunks):
            result = self.run_next()
            if result is not None:
                return result
        raise AssertionError(f"turn did not end within {max_chunks} chunks")

    def events(self, *types: str) -> list[Event]:
        return [e for e in self.ledger.events(self.turn_id) if not types or e.type in types]
