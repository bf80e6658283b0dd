"""A turn's lifecycle end to end (docs/semantics.md): Continue after every stop, bounded takeovers,
redeliveries under a live lease, the reaper, and a soft limit that lands after the turn's end.

Chunks run in-process through ``Lifecycle.run_chunk`` (``tests/harness.py``) on fakeredis and on a
real redis-server; time is the harness's ``FakeClock``, moved by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from harness import Harness, KeptMessages
from sample_tools import SimulatedSoftLimit
from structlog.testing import capture_logs

from ledger import keys
from ledger.events import Event, Resumed, RunStarted, ToolBlocked, ToolDone, ToolStart, TurnEnded
from ledger.signature import input_signature
from ledger.turn import Step, TurnMeta, TurnStatus
from rigs import DONE
from worker.base.settings import load_settings
from worker.demo_tools import outbox
from worker.dev.redis_server import RedisServer
from worker.engine.loop import AgentLoop
from worker.engine.models.base import ChatModel, ModelEvent, ModelRequest
from worker.engine.recorder import Recorder, RunContext
from worker.lifecycle.reaper import RECONNECT_S, Reaper

EMAIL = {"to": "ada@example.com", "subject": "Launch", "body": "Friday at 10."}
SEND = {"text": "Sending.", "tool_calls": [{"name": "send_email", "input": EMAIL}]}
LOOKUP = {"tool_calls": [{"name": "async_lookup", "input": {"key": "status"}}]}
#: a step whose model call takes 10 s: a chunk run with ``soft_limit_after=5`` is cut inside it
PAUSE = {"delay_s": 10, **LOOKUP}


@pytest.fixture
def h(client: redis.Redis, tmp_path: Path) -> Harness:
    return Harness(client, tmp_path)


def with_dispatcher(h: Harness, messages: KeptMessages) -> Harness:
    """``h`` with another broker stand-in under its lifecycle."""
    h.messages = messages
    h.lifecycle = h.lifecycle_for(h.ledger, h.cache)
    return h


def meta(h: Harness) -> TurnMeta:
    return h.lifecycle.store.meta(h.turn_id)


def turn_ended(h: Harness) -> TurnEnded:
    ended = [e for e in h.events("turn_ended") if isinstance(e, TurnEnded)]
    assert len(ended) >= 1, "the turn has no turn_ended"
    return ended[-1]


def ending(h: Harness) -> tuple[str, str, bool]:
    ended = turn_ended(h)
    return ended.status, ended.code, ended.can_continue


def of_run(h: Harness, run_id: str, kind: type[Event]) -> list[Any]:
    return [e for e in h.events() if isinstance(e, kind) and e.run_id == run_id]


def due_at(client: redis.Redis, turn_id: str) -> float | None:
    """When the reaper looks at the turn next (ms), None when it is not in the index."""
    return client.zscore(keys.active_turns(), turn_id)  # type: ignore[return-value]


# -- models that do something at the n-th call of a test ----------------------------------------


class Hooked:
    """The turn's model, with ``act`` run just before the ``at``-th model call of the test."""

    def __init__(self, inner: ChatModel, hook: OnCall) -> None:
        self.inner = inner
        self.name = inner.name
        self.hook = hook

    def stream(self, request: ModelRequest) -> Iterator[ModelEvent]:
        self.hook.calls += 1
        if self.hook.calls == self.hook.at:
            self.hook.act()
        return self.inner.stream(request)


@dataclass
class OnCall:
    at: int
    act: Callable[[], object]
    calls: int = 0

    def install(self, h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
        """Every loop of ``h`` gets the hooked model and checks the Stop flag, as a worker's."""
        make_loop = h.loop

        def loop(ledger: Any = None) -> AgentLoop:
            built = make_loop(ledger)
            make_model = built.make_model
            built.make_model = lambda spec: Hooked(make_model(spec), self)
            built.is_cancelled = h.lifecycle.is_cancelled
            return built

        monkeypatch.setattr(h, "loop", loop)


def bug() -> None:
    raise RuntimeError("a bug outside tool code")


# -- the stops: each completes send_email first, then stops the turn -------------------------------


def rate_limit(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    h.start([SEND, {"fail": "rate_limit", **DONE}], on_resume="restart")
    h.run_to_end()


def auth(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    h.start([SEND, {"fail": "auth", **DONE}], on_resume="restart")
    h.run_to_end()


def internal_error(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    OnCall(at=2, act=bug).install(h, monkeypatch)
    h.start([SEND, DONE], on_resume="restart")
    h.run_to_end()


def stop_while_running(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    def press_stop() -> None:
        assert h.lifecycle.stop(h.turn_id).reason == "stopping at the next safe point"

    OnCall(at=2, act=press_stop).install(h, monkeypatch)
    h.start([SEND, LOOKUP, DONE], on_resume="restart")
    h.run_to_end()


def stop_before_the_next_chunk(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    h.start([SEND, PAUSE, DONE], on_resume="restart")
    assert h.run_next(soft_limit_after=5) is None
    pending = h.pending
    assert h.lifecycle.stop(h.turn_id).reason == "cancelled before the next chunk ran"
    assert h.messages.revoked == [pending]


def stop_read_by_the_claim(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Stop whose own step lost the race to the claim: the claim reads the flag."""
    h.start([SEND, PAUSE, DONE], on_resume="restart")
    assert h.run_next(soft_limit_after=5) is None
    h.lifecycle.store.request_stop(h.turn_id)
    h.run_next()


def chunk_limit(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    # chunk 0: send_email, cut in the pause; chunk 1 (restarted: send_email blocked, the first
    # pause already attempted) is cut in the second pause, its budget's last chunk
    h.start([SEND, PAUSE, PAUSE, DONE], on_resume="restart")
    assert h.run_next(soft_limit_after=5) is None
    h.run_next(soft_limit_after=5)


@dataclass(frozen=True)
class Stop:
    code: str
    drive: Callable[[Harness, pytest.MonkeyPatch], None]
    settings: dict[str, Any] = field(default_factory=dict)
    auto: bool = False

    def harness(self, client: redis.Redis, tmp_path: Path) -> Harness:
        settings = load_settings(journal_read_backoff_s=0, **self.settings)
        return Harness(client, tmp_path, settings=settings)


STOPS = {
    "rate_limit": Stop("rate_limit", rate_limit),
    "auth": Stop("auth", auth),
    "internal_error": Stop("internal_error", internal_error),
    "stop_while_running": Stop("cancelled", stop_while_running),
    "stop_before_the_next_chunk": Stop("cancelled", stop_before_the_next_chunk),
    "stop_read_by_the_claim": Stop("cancelled", stop_read_by_the_claim),
    "chunk_limit": Stop("max_chunks", chunk_limit, {"max_chunks": 2}, auto=True),
}
every_stop = pytest.mark.parametrize("stop", STOPS.values(), ids=STOPS.keys())


@every_stop
def test_continue_after_every_kind_of_stop_resumes_with_the_note_and_never_repeats_the_write(
    stop: Stop, client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = stop.harness(client, tmp_path)
    stop.drive(h, monkeypatch)
    assert ending(h) == ("stopped", stop.code, True)
    assert (meta(h).status, meta(h).code) == (TurnStatus.STOPPED, stop.code)
    assert len(outbox(h.client)) == 1

    outcome = h.lifecycle.continue_turn(h.turn_id, auto=False)
    assert outcome.ok, outcome.reason
    assert outcome.run_id and h.messages.sent[-1] == (h.turn_id, outcome.run_id, "foreground")
    h.pending = outcome.run_id
    assert h.run_to_end().status == "completed"

    [resumed] = of_run(h, outcome.run_id, Resumed)
    assert resumed.cause == "continue"
    assert resumed.note and "send_email" in resumed.note  # layer 1
    blocked = of_run(h, outcome.run_id, ToolBlocked)
    assert [(b.tool, b.reason) for b in blocked] == [("send_email", "completed")]  # layer 2
    assert len(outbox(h.client)) == 1


@every_stop
def test_automatic_continue_is_allowed_only_after_the_chunk_limit_of_these_stops(
    stop: Stop, client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = stop.harness(client, tmp_path)
    stop.drive(h, monkeypatch)
    sent = len(h.messages.sent)

    outcome = h.lifecycle.continue_turn(h.turn_id, auto=True)

    assert outcome.ok is stop.auto, outcome.reason
    if stop.auto:
        assert (meta(h).status, meta(h).next_cause, meta(h).auto_continues) == (
            TurnStatus.QUEUED,
            "auto_continue",
            1,
        )
        assert h.messages.sent[sent:] == [(h.turn_id, outcome.run_id, "foreground")]
    else:
        assert outcome.reason == f"no automatic continuation after {stop.code}"
        assert (meta(h).status, meta(h).auto_continues) == (TurnStatus.STOPPED, 0)
        assert len(h.messages.sent) == sent
        assert h.lifecycle.continue_turn(h.turn_id, auto=False).ok


def test_continue_after_the_chunk_limit_grants_a_fresh_chunk_budget(
    client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop = STOPS["chunk_limit"]
    h = stop.harness(client, tmp_path)
    # two more pauses, each first attempted by one chunk of the continued turn
    h.start([SEND, PAUSE, PAUSE, PAUSE, PAUSE, DONE], on_resume="restart")
    assert h.run_next(soft_limit_after=5) is None
    h.run_next(soft_limit_after=5)
    assert ending(h) == ("stopped", "max_chunks", True)
    assert meta(h).chunk == 1

    outcome = h.lifecycle.continue_turn(h.turn_id, auto=False)
    assert outcome.ok and outcome.run_id
    h.pending = outcome.run_id
    assert h.run_next(soft_limit_after=5) is None, "the continued turn's first chunk had no budget"
    result = h.run_next(soft_limit_after=5)

    assert result is not None and (result.status, result.code) == ("stopped", "max_chunks")
    assert len(outbox(h.client)) == 1
    # the continued turn goes on with the next chunk: chunks 2 and 3 are its fresh budget
    [started] = of_run(h, outcome.run_id, RunStarted)
    assert (started.chunk, result.chunk) == (2, 3)


# -- bounded takeovers --------------------------------------------------------------------------


def record_completed_call(h: Harness, run: RunContext) -> None:
    """The run completes a write under its own lease."""
    recorder = Recorder(h.ledger, run, h.clock, h.ids, [])
    signature = input_signature(EMAIL)
    recorder.record(
        ToolStart, call_id="c-progress", tool="send_email", input=EMAIL, signature=signature
    )
    recorder.record(ToolDone, call_id="c-progress", tool="send_email", result={"sent": True})


def die(h: Harness, *, progress: bool = False) -> str:
    """The pending run claims the turn, (optionally completes a tool call,) and its worker dies;
    the reaper finds the lease run out. Returns what the reaper did."""
    assert h.pending
    run = h.lifecycle.claim(h.turn_id, h.pending)
    assert run is not None, "the pending run could not claim the turn"
    if progress:
        record_completed_call(h, run)
    h.clock.t += h.settings.lease_s + 1
    actions = Reaper(h.lifecycle).sweep()
    assert set(actions) == {h.turn_id}
    h.pending = meta(h).next_run or None
    return actions[h.turn_id]


def test_runs_that_keep_dying_without_progress_stop_the_turn_after_max_takeovers(
    h: Harness,
) -> None:
    h.start([SEND, DONE], mode="background")
    limit = h.settings.max_takeovers
    for n in range(1, limit + 1):
        assert die(h) == "resumed"
        assert (meta(h).status, meta(h).takeovers) == (TurnStatus.RESUMING, n)

    assert die(h) == "stopped: no_progress"

    assert ending(h) == ("stopped", "no_progress", True)
    assert (meta(h).status, meta(h).code) == (TurnStatus.STOPPED, "no_progress")
    assert due_at(h.client, h.turn_id) is None
    outcome = h.lifecycle.continue_turn(h.turn_id, auto=False)
    assert outcome.ok and meta(h).takeovers == 0
    h.pending = outcome.run_id
    assert h.run_to_end().status == "completed"


def test_a_dead_run_that_completed_a_tool_call_resets_the_takeover_count(h: Harness) -> None:
    h.start([SEND, DONE], mode="background")
    limit = h.settings.max_takeovers
    for _ in range(limit - 1):
        assert die(h) == "resumed"
    assert meta(h).takeovers == limit - 1

    assert die(h, progress=True) == "resumed"
    assert meta(h).takeovers == 0

    for n in range(1, limit + 1):  # a whole new allowance of deaths without progress
        assert die(h) == "resumed"
        assert meta(h).takeovers == n
    assert die(h) == "stopped: no_progress"


# -- a redelivered message under a live lease ---------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "after"),
    [("background", "took over: resumed"), ("foreground", "took over: stopped: crashed")],
)
def test_a_redelivered_message_takes_over_only_once_its_runs_lease_ran_out(
    h: Harness, mode: str, after: str
) -> None:
    h.start([SEND, DONE], mode=mode)
    run_id = h.pending
    assert run_id
    run = h.lifecycle.claim(h.turn_id, run_id)
    assert run is not None
    held = meta(h)
    events = len(h.events())

    h.clock.t += h.settings.lease_s - 1  # the run's heartbeat is late, not yet gone
    assert h.lifecycle.not_claimed(h.turn_id, run_id, redelivered=True) == "holder alive"
    assert (meta(h).status, meta(h).epoch) == (TurnStatus.RUNNING, run.epoch)
    assert meta(h).run_id == run_id
    assert len(h.events()) == events
    assert due_at(h.client, h.turn_id) == held.lease_until

    h.clock.t = held.lease_until / 1000 + 1
    # the reaper judges a lease that ran out (it watches Redis for outages, which make live runs
    # late): the turn is due at once, and, no outage seen, taken over
    late = h.lifecycle.not_claimed(h.turn_id, run_id, redelivered=True)
    assert late == "holder late: left to the reaper"
    assert (meta(h).epoch, due_at(h.client, h.turn_id)) == (run.epoch, h.lifecycle.ms())
    assert Reaper(h.lifecycle).sweep() == {h.turn_id: after.removeprefix("took over: ")}

    now = meta(h)
    assert now.epoch > run.epoch
    if mode == "background":
        assert now.status == TurnStatus.RESUMING and now.next_run not in ("", run_id)
        assert h.messages.sent[-1] == (h.turn_id, now.next_run, "background")
    else:
        assert (now.status, now.code, now.next_run) == (TurnStatus.STOPPED, "crashed", "")
        assert ending(h) == ("stopped", "crashed", True)


# -- the reaper ---------------------------------------------------------------------------------


class NothingQueued(KeptMessages):
    """A broker holding none of the messages sent: each is lost."""

    def queued_runs(self) -> set[str] | None:
        return set()


class BrokerUnreadable(KeptMessages):
    def queued_runs(self) -> set[str] | None:
        return None


class BrokerDown(KeptMessages):
    def queued_runs(self) -> set[str] | None:
        raise redis.ConnectionError("broker unreachable")


def launch_first_run(h: Harness) -> str:
    h.start([SEND, DONE])
    assert h.pending
    h.lifecycle.launch(h.turn_id, h.pending, "foreground")
    return h.pending


def test_a_pending_run_whose_message_waits_in_the_broker_is_never_resent_nor_stopped(
    h: Harness,
) -> None:
    run_id = launch_first_run(h)
    reaper = Reaper(h.lifecycle)
    for _ in range(20):
        h.clock.t += 3 * h.settings.handoff_grace_s
        assert reaper.sweep() == {h.turn_id: "queued"}
    assert h.messages.sent == [(h.turn_id, run_id, "foreground")]
    assert (meta(h).status, meta(h).next_run, meta(h).redispatches) == (
        TurnStatus.QUEUED,
        run_id,
        0,
    )
    assert h.run_to_end().status == "completed"  # the backlog only delayed it


def test_a_lost_message_is_resent_up_to_max_redispatches_then_the_turn_stops_handoff_lost(
    client: redis.Redis, tmp_path: Path
) -> None:
    h = with_dispatcher(Harness(client, tmp_path), NothingQueued())
    run_id = launch_first_run(h)
    reaper = Reaper(h.lifecycle)
    limit = h.settings.max_redispatches
    for n in range(1, limit + 1):
        h.clock.t += h.settings.handoff_grace_s + 1
        assert reaper.sweep() == {h.turn_id: "redispatched"}
        assert meta(h).redispatches == n
        assert h.messages.sent == [(h.turn_id, run_id, "foreground")] * (n + 1)

    h.clock.t += h.settings.handoff_grace_s + 1
    assert reaper.sweep() == {h.turn_id: "stopped: handoff_lost"}

    assert len(h.messages.sent) == limit + 1
    assert ending(h) == ("stopped", "handoff_lost", True)
    assert (meta(h).status, meta(h).code, meta(h).next_run) == (
        TurnStatus.STOPPED,
        "handoff_lost",
        "",
    )
    assert h.lifecycle.continue_turn(h.turn_id, auto=False).ok


@pytest.mark.parametrize("broker", [BrokerUnreadable, BrokerDown])
def test_a_broker_that_cannot_be_looked_into_never_gets_a_turn_stopped(
    client: redis.Redis, tmp_path: Path, broker: type[KeptMessages]
) -> None:
    h = with_dispatcher(Harness(client, tmp_path), broker())
    launch_first_run(h)
    reaper = Reaper(h.lifecycle)
    for _ in range(3 * (h.settings.max_redispatches + 1)):
        h.clock.t += 3 * h.settings.handoff_grace_s
        assert reaper.sweep() == {h.turn_id: "queued"}
    assert len(h.messages.sent) == 1
    assert (meta(h).status, meta(h).redispatches) == (TurnStatus.QUEUED, 0)


def test_a_turn_created_but_not_listed_in_its_conversation_is_listed_by_the_reaper(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash right after the turn's create, before its conversation's list got it."""

    def crash(turn_id: str, conversation_id: str) -> None:
        raise RuntimeError("the process died after the create")

    monkeypatch.setattr(h.lifecycle.store, "list_in_conversation", crash)
    with pytest.raises(RuntimeError):
        h.lifecycle.create("do the task", conversation_id="conv-1", turn_id="t-unlisted")
    monkeypatch.undo()
    h.turn_id = "t-unlisted"
    conversation = keys.conversation_turns("conv-1")
    assert h.client.lrange(conversation, 0, -1) == [] and not meta(h).listed

    h.clock.t += h.settings.handoff_grace_s + 1
    Reaper(h.lifecycle).sweep()

    assert h.client.lrange(conversation, 0, -1) == [b"t-unlisted"]
    assert meta(h).listed
    assert h.client.zscore(keys.conversations(), "conv-1") is not None, "and in the listing"


def test_an_index_entry_of_a_turn_never_created_is_dropped_and_creates_nothing(
    h: Harness,
) -> None:
    h.lifecycle.store.watch("ghost", 0)

    assert Reaper(h.lifecycle).sweep() == {"ghost": "gone"}

    assert due_at(h.client, "ghost") is None
    assert h.client.exists(keys.turn_meta("ghost"), keys.turn_events("ghost")) == 0


def test_a_running_turn_whose_renewed_lease_holds_is_alive_and_looked_at_again_when_it_ends(
    h: Harness,
) -> None:
    h.start([SEND, DONE])
    assert h.pending
    run = h.lifecycle.claim(h.turn_id, h.pending)
    assert run is not None
    first_deadline = meta(h).lease_until
    h.clock.t += h.settings.heartbeat_s
    renewed = h.lifecycle.ms(h.settings.lease_s)
    assert h.lifecycle.store.renew(run.lease, renewed)  # the heartbeat

    h.clock.t = first_deadline / 1000 + 0.5
    assert Reaper(h.lifecycle).sweep() == {h.turn_id: "alive"}

    assert due_at(h.client, h.turn_id) == renewed
    assert (meta(h).status, meta(h).epoch, meta(h).run_id) == (
        TurnStatus.RUNNING,
        run.epoch,
        run.run_id,
    )


# -- a soft limit right after the turn's end ----------------------------------------------------


def soft_limit_inside_the_end(h: Harness, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The interrupt fires as the step that ended the turn returns (before anything else)."""
    fired: list[bool] = []
    transition = h.lifecycle.store.transition

    def cut(turn_id: str, step: Step, **kw: Any) -> int:
        epoch = transition(turn_id, step, **kw)
        if step in (Step.COMPLETE, Step.STOP) and not fired:
            fired.append(True)
            raise SimulatedSoftLimit("soft limit right after the end")
        return epoch

    monkeypatch.setattr(h.lifecycle.store, "transition", cut)
    return fired


def soft_limit_after_finish(h: Harness, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The interrupt fires at the ``turn.ended`` failpoint, once the end is recorded."""
    fired: list[bool] = []

    class SoftLimitThere:
        def armed(self, point: str) -> bool:
            return False

        def hit(self, point: str) -> str | None:
            if point == "turn.ended" and not fired:
                fired.append(True)
                raise SimulatedSoftLimit("soft limit right after the end")
            return None

    monkeypatch.setattr(h.lifecycle, "failpoints", SoftLimitThere())
    return fired


@pytest.mark.parametrize("landing", [soft_limit_inside_the_end, soft_limit_after_finish])
@pytest.mark.parametrize(
    ("steps", "status", "code"),
    [([DONE], "completed", ""), ([{"fail": "auth"}], "stopped", "auth")],
    ids=["completed", "stopped"],
)
def test_a_soft_limit_landing_right_after_the_turns_end_cannot_hand_it_over(
    h: Harness,
    monkeypatch: pytest.MonkeyPatch,
    landing: Callable[[Harness, pytest.MonkeyPatch], list[bool]],
    steps: list[dict[str, Any]],
    status: str,
    code: str,
) -> None:
    h.start(steps)
    fired = landing(h, monkeypatch)

    with capture_logs() as logs:
        result = h.run_next()

    assert fired, "the soft limit never fired"
    assert result is not None
    last = h.events()[-1]
    assert isinstance(last, TurnEnded) and (last.status, last.code) == (status, code)
    assert "soft_limit" not in [e.reason for e in h.events("run_ended")]  # type: ignore[attr-defined]
    assert (meta(h).status, meta(h).next_run) == (status, "")
    assert h.messages.sent == []
    refused = "soft limit after the run's turn moved on; nothing to hand over"
    assert refused in [entry["event"] for entry in logs]


@pytest.mark.parametrize("landed", [True, False], ids=["claim-landed", "claim-lost"])
def test_a_soft_limit_in_the_claim_hands_a_claimed_turn_over_at_once(
    h: Harness, monkeypatch: pytest.MonkeyPatch, landed: bool
) -> None:
    """A Redis slow to answer a claim (a stall, a failover) lets the soft limit in mid-claim.
    A claim that landed holds the turn under a lease nothing would renew: the run hands the turn
    over at once rather than leave it to the reaper once the lease ran out. One that did not land
    leaves its run pending, for the reaper (its message is acknowledged with the task)."""
    h.start([DONE])
    first = h.pending
    assert first
    claim = h.lifecycle.store.claim

    def cut_claim(*args: Any, **kwargs: Any) -> Any:
        if landed:
            claim(*args, **kwargs)
        raise SimulatedSoftLimit("soft limit while the claim waited for Redis")

    monkeypatch.setattr(h.lifecycle.store, "claim", cut_claim)
    what = h.lifecycle.run_chunk(h.turn_id, first, h.loop(), interrupts=(SimulatedSoftLimit,))
    monkeypatch.undo()

    if not landed:
        assert what == "not-claimed"
        assert (meta(h).status, meta(h).next_run) == ("queued", first)
        assert h.messages.sent == []
        return
    assert what == "chained"
    assert [e.type for e in h.events()] == ["turn_started", "run_started", "run_ended"]
    assert h.events("run_ended")[0].reason == "soft_limit"  # type: ignore[attr-defined]
    successor = meta(h).next_run
    assert (meta(h).status, meta(h).next_chunk) == ("resuming", 1)
    assert h.messages.sent == [(h.turn_id, successor, "foreground")]
    h.pending = successor
    result = h.run_next()
    assert result is not None and result.status == "completed"


class Ticks:
    """A monotonic clock the test moves by hand (the reaper's clock of outages)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def claimed_then_expired(h: Harness) -> None:
    h.start([SEND, DONE], mode="background")
    assert h.pending
    assert h.lifecycle.claim(h.turn_id, h.pending) is not None
    h.clock.t += h.settings.lease_s + 1  # the lease ran out, unrenewed


def test_after_an_outage_it_saw_the_reaper_gives_a_live_run_a_full_lease_before_taking_it(
    h: Harness,
) -> None:
    """A restart that every worker saw kept every heartbeat from renewing: the reaper of a
    process that failed to reach Redis waits a lease after that before it takes any run over."""
    claimed_then_expired(h)
    ticks = Ticks()
    reaper = Reaper(h.lifecycle, monotonic=ticks)
    h.lifecycle.store.ledger.last_error_at = ticks.now - 0.5  # a command failed just now

    assert reaper.sweep() == {h.turn_id: "alive"}
    waited_ms = (due_at(h.client, h.turn_id) or 0) - h.lifecycle.ms()
    assert abs(waited_ms - (h.settings.lease_s + RECONNECT_S - 0.5) * 1000) < 5

    ticks.now += h.settings.lease_s + RECONNECT_S
    h.clock.t += h.settings.lease_s + RECONNECT_S  # the turn is due again
    assert reaper.sweep() == {h.turn_id: "resumed"}


def test_a_sweep_that_redis_answered_only_after_a_stall_counts_as_an_outage(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A paused Redis (SIGSTOP) fails no command, it answers late: the heartbeats waited as
    long as the reaper's read, so no lease that ran out meanwhile is taken for dead yet."""
    claimed_then_expired(h)
    ticks = Ticks()
    reaper = Reaper(h.lifecycle, monotonic=ticks)
    # the sweep's first read of the index: its turns taken (one server), or read (a cluster)
    read = "take_due" if reaper.store.batches else "due"
    due = getattr(reaper.store, read)

    def stalled(*args: int) -> list[str]:
        ticks.now += h.settings.heartbeat_s + 1  # Redis answered only after a stall
        return list(due(*args))

    monkeypatch.setattr(reaper.store, read, stalled)
    assert reaper.sweep() == {h.turn_id: "alive"}

    monkeypatch.setattr(reaper.store, read, due)
    ticks.now += h.settings.lease_s + RECONNECT_S
    h.clock.t += h.settings.lease_s + RECONNECT_S  # the turn is due again
    assert reaper.sweep() == {h.turn_id: "resumed"}


def looks_read(reaper: Reaper) -> str:
    """The store's read of the due turns' metadata in a sweep: a batch's at once (one server),
    or each turn's (a cluster)."""
    return "metas" if reaper.store.batches else "meta"


def test_a_turn_read_only_after_a_stall_is_not_taken_for_dead(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis stalled not in the sweep's first read but in its look at the turn itself: the
    heartbeats waited as long, so that look counts as an outage too."""
    claimed_then_expired(h)
    ticks = Ticks()
    reaper = Reaper(h.lifecycle, monotonic=ticks)
    name = looks_read(reaper)
    read = getattr(reaper.store, name)

    def stalled(arg: Any) -> Any:
        ticks.now += h.settings.lease_s  # a stall a renewed lease runs out in
        return read(arg)

    monkeypatch.setattr(reaper.store, name, stalled)
    assert reaper.sweep() == {h.turn_id: "alive"}


def test_a_look_at_a_turn_slowed_by_a_busy_process_puts_no_take_over_off(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gevent worker's reaper shares its process with many runs: a look at a turn that came
    back a heartbeat late, too soon for a renewed lease to run out, is no outage."""
    claimed_then_expired(h)
    ticks = Ticks()
    reaper = Reaper(h.lifecycle, monotonic=ticks)
    name = looks_read(reaper)
    read = getattr(reaper.store, name)

    def slow(arg: Any) -> Any:
        ticks.now += h.settings.heartbeat_s + 0.1
        return read(arg)

    monkeypatch.setattr(reaper.store, name, slow)
    assert reaper.sweep() == {h.turn_id: "resumed"}


@pytest.mark.redis_server
def test_a_redis_restart_between_two_sweeps_gives_live_runs_a_full_lease(
    tmp_path: Path,
) -> None:
    """A real redis-server (AOF on) SIGKILLed and started again between two sweeps, while a
    live run's lease runs out unrenewed: no command of the reaper's fails (redis-py reconnects
    inside it) nor stalls, yet the server's new run id tells the restart, and the run gets a
    full lease and the time to reconnect before it is taken for dead (issue 46)."""
    server = RedisServer(data_dir=tmp_path / "redis").start()
    try:
        h = Harness(redis.Redis.from_url(server.url), tmp_path)
        h.start([SEND, DONE], mode="background")
        assert h.pending
        assert h.lifecycle.claim(h.turn_id, h.pending) is not None
        ticks = Ticks()
        reaper = Reaper(h.lifecycle, monotonic=ticks)
        assert reaper.sweep() in ({}, {h.turn_id: "alive"})

        server.kill()
        server.start()  # the same port and directory: the AOF brings the turn back
        h.clock.t += h.settings.lease_s + 1  # the lease ran out while Redis was away

        assert reaper.sweep() == {h.turn_id: "alive"}
        assert meta(h).status == TurnStatus.RUNNING

        ticks.now += h.settings.lease_s + RECONNECT_S
        h.clock.t += h.settings.lease_s + RECONNECT_S  # still unrenewed: the run is dead
        assert reaper.sweep() == {h.turn_id: "resumed"}
    finally:
        server.cleanup()
