"""Run turns in-process through the real loop, ledger and lifecycle steps (no Celery).

``Harness.run_next()`` does what a chunk task does: claim the pending run, run the loop, and on
the (simulated) soft limit hand the turn over to the next chunk.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from sample_tools import SimulatedSoftLimit

from ledger.cache import EventCache
from ledger.events import Event
from ledger.store import Ledger
from worker.loop import AgentLoop, RunResult
from worker.models import make_model
from worker.models.base import ChatModel, ModelEvent, ModelRequest
from worker.settings import Settings, load_settings
from worker.tools import Registry
from worker.turns import claim_run, create_turn, hand_over

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


@dataclass
class Harness:
    client: redis.Redis
    tmp: Path
    settings: Settings = field(default_factory=lambda: load_settings(journal_read_backoff_s=0))
    clock: FakeClock = field(default_factory=FakeClock)
    ids: SeqIds = field(default_factory=SeqIds)
    requests: list[ModelRequest] = field(default_factory=list)
    results: list[RunResult] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ledger = Ledger(self.client)
        #: as in a worker process: each chunk reads only what is new since the previous one
        self.cache = EventCache(self.ledger)
        self.registry = Registry.from_modules(TOOL_MODULES)
        self.pending: str | None = None
        self.turn_id = ""

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
        )

    def script(self, steps: list[dict[str, Any]], on_resume: str = "continue") -> str:
        path = self.tmp / f"script-{next(self.ids.n)}.json"
        path.write_text(json.dumps({"steps": steps, "on_resume": on_resume}))
        return f"scripted:{path}"

    def start(self, steps: list[dict[str, Any]], on_resume: str = "continue", **kw: Any) -> str:
        turn = create_turn(
            self.ledger,
            kw.pop("message", "do the task"),
            clock=self.clock,
            ids=self.ids,
            model=self.script(steps, on_resume),
            **kw,
        )
        self.turn_id, self.pending = turn.turn_id, turn.run_id
        return turn.turn_id

    def run_next(
        self, *, soft_limit_after: float | None = None, ledger: Ledger | None = None
    ) -> RunResult | None:
        """One chunk: claim, run; on the soft limit hand over and return None."""
        assert self.pending, "no pending run"
        run = claim_run(
            self.ledger,
            self.turn_id,
            self.pending,
            clock=self.clock,
            ids=self.ids,
            settings=self.settings,
            cache=self.cache if ledger is None else None,
        )
        assert run is not None, "the pending run could not be claimed"
        self.pending = None
        if soft_limit_after is not None:
            self.clock.limit_at = self.clock.t + soft_limit_after
        try:
            result = self.loop(ledger).run(run)
        except SimulatedSoftLimit:
            self.clock.limit_at = None
            self.pending = hand_over(self.ledger, run, clock=self.clock, ids=self.ids)
            return None
        self.results.append(result)
        return result

    def run_to_end(self, max_chunks: int = 10) -> RunResult:
        for _ in range(max_chunks):
            result = self.run_next()
            if result is not None:
                return result
        raise AssertionError(f"turn did not end within {max_chunks} chunks")

    def events(self, *types: str) -> list[Event]:
        return [e for e in self.ledger.events(self.turn_id) if not types or e.type in types]
