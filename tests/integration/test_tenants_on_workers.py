"""Tenants on real workers (docs/semantics.md, tenants): a tenant's concurrency bound holds across
worker processes while another tenant runs beside it; a late tenant is not stuck behind another's
backlog; a turn waiting for its tenant holds no worker and no Celery message; a worker killed
mid-turn gives its slot to the run that picks the turn up, and back once; the rate spaces starts;
a multi-chunk turn's chunks never wait behind its tenant's queued turns.

Each test's limits are its ``limits`` (the DRES_* of this process and of its workers alike).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise

import pytest

from ledger.events import Event, RunStarted, TurnEnded
from rigs import DONE, ended, having, of, show, think, wait_for, wait_until
from tests.support.fixtures import BOTH_POOLS, StartWorker
from worker.base.errors import QueueFull
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server

#: chunks far longer than any step here, unless a test says otherwise
LONG = {"DRES_SOFT_LIMIT_S": "30", "DRES_HARD_LIMIT_S": "40", "DRES_VISIBILITY_TIMEOUT_S": "90"}
#: seconds a test's turns may take, all together
TURNS_S = 60.0


@pytest.fixture
def limits() -> dict[str, str]:
    return {}


@pytest.fixture
def store_env(redis_url: str, limits: dict[str, str]) -> dict[str, str]:
    """This test's Redis and tenant limits (and a reaper that sweeps often: its sweep lets
    through what a rate held back)."""
    return {"DRES_REDIS_URL": redis_url, "DRES_REAPER_INTERVAL_S": "0.2", **limits}


def span(events: Sequence[Event]) -> tuple[float, float]:
    """When the turn's first run started and when the turn ended (the ledger's clocks)."""
    first = next(e for e in events if isinstance(e, RunStarted))
    last = next(e for e in reversed(events) if isinstance(e, TurnEnded))
    return first.ts, last.ts


def most_at_once(spans: Sequence[tuple[float, float]]) -> int:
    """The most spans overlapping at any instant (an end at the instant of a start comes first:
    the slot was given back before it was taken)."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def all_ended(runtime: Runtime, turn_ids: Sequence[str]) -> list[list[Event]]:
    return [wait_for(runtime.ledger, t, ended(), TURNS_S, f"turn {t} ends") for t in turn_ids]


@BOTH_POOLS
@pytest.mark.parametrize("limits", [{"DRES_TENANT_CONCURRENCY": "1"}])
def test_a_tenants_bound_holds_across_two_workers_while_another_tenant_runs_beside_it(
    runtime: Runtime, start_worker: StartWorker, script: Callable[..., str]
) -> None:
    """Two worker processes of two slots each; tenant a's five turns run one at a time (its
    bound, across both workers), while tenant b's run beside them."""
    for _ in range(2):
        start_worker(concurrency=2, overrides=LONG)
    model = script([think(0.6), DONE])
    a = [runtime.lifecycle.enqueue(f"a{i}", model=model, tenant="a").turn_id for i in range(5)]
    b = [runtime.lifecycle.enqueue(f"b{i}", model=model, tenant="b").turn_id for i in range(2)]

    a_spans = [span(e) for e in all_ended(runtime, a)]
    b_spans = [span(e) for e in all_ended(runtime, b)]

    assert most_at_once(a_spans) == 1, a_spans
    assert most_at_once(a_spans + b_spans) == 2, (a_spans, b_spans)  # b ran beside a
    wait_until(lambda: runtime.lifecycle.tenant_view("a")["running"] == 0, 5, "a's slot back")
    assert runtime.lifecycle.tenant_view("b")["queued"] == 0


@BOTH_POOLS
def test_a_late_tenant_starts_before_another_tenants_backlog_ends(
    runtime: Runtime, start_worker: StartWorker, script: Callable[..., str]
) -> None:
    """No limit set; one worker slot busy with tenant a's burst of eight: tenant b's one turn,
    sent after them, starts after a few of a's, not after all eight (Celery's FIFO queue)."""
    start_worker(concurrency=1, overrides=LONG)
    model = script([think(0.3), DONE])
    a = [runtime.lifecycle.enqueue(f"a{i}", model=model, tenant="a").turn_id for i in range(8)]
    [b] = [runtime.lifecycle.enqueue("b", model=model, tenant="b").turn_id]

    a_starts = sorted(span(e)[0] for e in all_ended(runtime, a))
    b_start = span(all_ended(runtime, [b])[0])[0]

    before_b = sum(start < b_start for start in a_starts)
    # FIFO: all eight; here the one running, the two let into the broker ahead of the workers
    # (tenancy.AHEAD), and a's turn ahead of b's in round-robin order, give or take one the
    # broker took while they were counted
    assert before_b <= 5, f"{before_b} of a's eight turns started before b's"


@pytest.mark.parametrize("limits", [{"DRES_TENANT_CONCURRENCY": "1"}])
def test_a_turn_waiting_for_its_tenant_holds_no_worker_and_no_message(
    runtime: Runtime, start_worker: StartWorker, script: Callable[..., str]
) -> None:
    start_worker(concurrency=2, overrides=LONG)
    first = runtime.lifecycle.enqueue("a0", model=script([think(30), DONE]), tenant="a")
    wait_for(runtime.ledger, first.turn_id, having("model_start"), what="a's first turn runs")
    waiting = runtime.lifecycle.enqueue("a1", model=script([DONE]), tenant="a")

    meta = runtime.ledger.meta(waiting.turn_id)
    assert (meta.status, meta.held, meta.next_run) == ("queued", True, ""), meta
    assert runtime.lifecycle.dispatcher.backlog() == 0  # no message of it in the broker
    assert runtime.lifecycle.tenant_view("a") | {"limits": None} == {
        "tenant": "a",
        "running": 1,
        "queued": 1,
        "limits": None,
    }
    # the worker's second slot is free: another tenant's turn runs in it now
    other = runtime.lifecycle.enqueue("b0", model=script([DONE]), tenant="b")
    wait_for(runtime.ledger, other.turn_id, ended("completed"), 15, "b's turn beside a's")
    assert runtime.ledger.meta(waiting.turn_id).status == "queued"
    runtime.lifecycle.stop(first.turn_id)
    wait_for(runtime.ledger, waiting.turn_id, ended("completed"), 15, "a's second turn, next")


@pytest.mark.parametrize("limits", [{"DRES_TENANT_CONCURRENCY": "1"}])
def test_a_killed_workers_slot_passes_to_the_run_that_picks_the_turn_up_and_back_once(
    runtime: Runtime, start_worker: StartWorker, script: Callable[..., str]
) -> None:
    """A background turn's worker is SIGKILLed mid-turn; the reaper of a second worker resumes
    the turn under a new run, still holding the tenant's one slot: the tenant's queued turn
    starts only once it ends, and the slot is free after."""
    doomed = start_worker(concurrency=1, overrides=LONG)
    first = runtime.lifecycle.enqueue(
        "a0", model=script([think(2.0), DONE]), tenant="a", mode="background"
    )
    wait_for(runtime.ledger, first.turn_id, having("model_start"), what="a's first turn runs")
    second = runtime.lifecycle.enqueue("a1", model=script([DONE]), tenant="a")
    doomed.kill_group()
    start_worker(concurrency=2, overrides=LONG)

    one, two = all_ended(runtime, [first.turn_id, second.turn_id])

    assert [e.cause for e in of(one, "run_started")] == ["first", "reaper"], show(one)
    assert span(two)[0] >= span(one)[1], (show(one), show(two))
    # each turn gives its slot back just after its end is recorded
    wait_until(lambda: runtime.lifecycle.tenant_view("a")["running"] == 0, 5, "the slot back")
    assert runtime.lifecycle.tenant_view("a")["queued"] == 0


@pytest.mark.parametrize("limits", [{"DRES_TENANT_RATE": "2/s"}])
def test_the_rate_spaces_a_tenants_starts(
    runtime: Runtime, start_worker: StartWorker, script: Callable[..., str]
) -> None:
    """2/s: a start every 0.5 s at most, though four worker slots are free; another tenant's
    start is not held back by it."""
    start_worker(concurrency=4, overrides=LONG)
    model = script([DONE])
    a = [runtime.lifecycle.enqueue(f"a{i}", model=model, tenant="a").turn_id for i in range(4)]
    b = runtime.lifecycle.enqueue("b", model=model, tenant="b").turn_id

    starts = sorted(span(e)[0] for e in all_ended(runtime, a))
    gaps = [later - earlier for earlier, later in pairwise(starts)]
    # each admission is 0.5 s after the one before; the start follows it by a dispatch each
    assert min(gaps) >= 0.4, gaps
    assert span(all_ended(runtime, [b])[0])[0] < starts[1], "b's start waited for a's rate"


@pytest.mark.parametrize(
    "limits", [{"DRES_TENANT_MAX_QUEUED": "2", "DRES_TENANT_CONCURRENCY": "1"}]
)
def test_one_more_turn_than_the_tenant_may_queue_is_refused_and_records_nothing(
    runtime: Runtime, script: Callable[..., str]
) -> None:
    """No worker: a's first turn takes its slot (its message waits in the broker), two more
    wait queued, the fourth is refused; another tenant is not."""
    model = script([DONE])
    kept = [runtime.lifecycle.enqueue(f"a{i}", model=model, tenant="a") for i in range(3)]
    with pytest.raises(QueueFull) as refused:
        runtime.lifecycle.enqueue("a3", model=model, tenant="a", turn_id="turn-refused")
    assert refused.value.retry_after_s >= 1
    assert "DRES_TENANT_MAX_QUEUED=2" in str(refused.value)
    assert runtime.redis.exists("dres:turn:{turn-refused}:meta") == 0
    assert [t.run_id != "" for t in kept] == [True, False, False]
    runtime.lifecycle.enqueue("b0", model=model, tenant="b")


@BOTH_POOLS
@pytest.mark.parametrize("limits", [{"DRES_TENANT_CONCURRENCY": "1"}])
def test_a_multi_chunk_turns_chunks_never_wait_behind_its_tenants_queued_turns(
    runtime: Runtime, start_worker: StartWorker, script: Callable[..., str]
) -> None:
    """A 0.5 s soft limit; a's first turn spans four chunks while three more of a's wait: every
    chunk of the first runs before any of the others starts."""
    chunks = {"DRES_SOFT_LIMIT_S": "0.5", "DRES_HARD_LIMIT_S": "5"}
    start_worker(concurrency=2, overrides=chunks)
    long = script([think(0.8), think(0.8), think(0.8), DONE], on_resume="restart")
    first = runtime.lifecycle.enqueue("a0", model=long, tenant="a").turn_id
    rest = [
        runtime.lifecycle.enqueue(f"a{i}", model=script([DONE]), tenant="a").turn_id
        for i in range(1, 4)
    ]

    one = wait_for(runtime.ledger, first, ended("completed"), TURNS_S, "a's long turn")
    others = all_ended(runtime, rest)

    assert len(of(one, "run_started")) >= 3, show(one)
    first_end = span(one)[1]
    assert all(span(e)[0] >= first_end for e in others), [show(e) for e in others]


@pytest.mark.parametrize("limits", [{"DRES_TENANT_CONCURRENCY": "1"}])
def test_a_turn_resuming_after_approval_takes_its_tenants_next_slot_before_new_turns(
    runtime: Runtime, start_worker: StartWorker, script: Callable[..., str]
) -> None:
    """a's first turn waits for approval (its slot given back: a's second turn runs), a third
    waits queued; the decision comes while the second runs: the first resumes when the second
    ends, before the third starts."""
    start_worker(concurrency=2, overrides={**LONG, "DRES_APPROVAL": "writes"})
    asks = script([{"tool_calls": [{"name": "send_email", "input": EMAIL}]}, DONE])
    waits = runtime.lifecycle.enqueue("a0", model=asks, tenant="a").turn_id
    wait_for(runtime.ledger, waits, having("approval_requested"), 15, "a0 asks")
    wait_until(lambda: runtime.ledger.meta(waits).status == "waiting", 15, "a0 waits")
    second = runtime.lifecycle.enqueue("a1", model=script([think(2.0), DONE]), tenant="a")
    wait_for(runtime.ledger, second.turn_id, having("model_start"), 15, "a1 runs in the slot")
    third = runtime.lifecycle.enqueue("a2", model=script([DONE]), tenant="a").turn_id
    [request] = of(runtime.ledger.events(waits), "approval_requested")
    decided = runtime.lifecycle.decide(
        waits, request.approval_id, "approve", request.signature, by="test"
    )
    assert decided.ok and "free slot" in decided.detail, decided
    assert runtime.ledger.meta(waits).status == "queued"

    one, two, three = all_ended(runtime, [waits, second.turn_id, third])

    resumed = next(e.ts for e in of(one, "run_started") if e.cause == "approval")
    assert span(two)[1] <= resumed <= span(three)[0], (show(one), show(two), show(three))


EMAIL = {"to": "a@x.io", "subject": "Hi", "body": "hello"}
