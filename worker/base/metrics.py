"""The Prometheus metrics dres records (docs/http-api.md), made once, and the helpers recording
them.

The floors above record through these helpers only (``worker.engine`` and ``worker.lifecycle``
never import ``prometheus_client``). Who serves what is the edges': a worker serves all its pool
processes' values together on ``DRES_METRICS_PORT`` (``worker.edges.celery.metrics``), the API
serves its own process's beside the turn counts it reads from Redis
(``worker.edges.http.metrics``). Each process counts what it did itself, so a query sums over
the processes scraped: ``sum by (outcome) (rate(dres_tool_calls_total[5m]))``.

The metrics are made on first use, not at import: ``prometheus_client`` picks its multiprocess
mode once, when it is first imported, from ``PROMETHEUS_MULTIPROC_DIR``, which a worker sets
before that (before its pool forks).
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections import Counter as Tally
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from functools import cache, wraps
from typing import TYPE_CHECKING, ParamSpec

import structlog

from ledger.events import Event, RunEnded, RunStarted
from ledger.turn import StopCode

if TYPE_CHECKING:
    from prometheus_client import Counter, Gauge, Histogram

log = structlog.get_logger("dres.metrics")
P = ParamSpec("P")

#: what the executor did with a tool call: ran it (``error``: the tool raised, or the model's
#: call named an unknown tool or gave an invalid input), or did not run it (layer 2)
TOOL_OUTCOMES = ("ran", "blocked", "refused", "reconciled", "error")
#: a ``tool_blocked`` event's reason -> the call's outcome
OUTCOME_OF_REASON = {
    "completed": "blocked",
    "reconciled": "reconciled",
    "identity": "refused",
    "interrupted": "refused",
}
#: what became of an approval request (``dres_approvals_total``), by its decision
APPROVAL_OUTCOMES = {
    "approve": "approved",
    "deny": "denied",
    "expired": "expired",
    "voided": "voided",
}
#: what the reaper does to a turn it looks at (``worker.lifecycle.reaper``); ``stopped`` is any
#: stop code (the code goes to ``dres_turns_ended_total``)
REAPER_ACTIONS = (
    "alive",
    "waiting",
    "queued",
    "redispatched",
    "resumed",
    "stopped",
    "changed",
    "finished",
    "gone",
    "unreadable",
    "awaiting_approval",
)
#: how a chunk task ended, from what ``Lifecycle.run_chunk`` returned
CHUNK_ENDS = ("completed", "stopped", "chained", "waiting", "ended", "fenced-out", "failed")
#: what ``Lifecycle.run_chunk`` returns for a message that ran no chunk
NOT_A_CHUNK = ("not-claimed", "holder", "took", "bad-message")


@dataclass(frozen=True)
class Metrics:
    turns_ended: Counter
    tool_calls: Counter
    duplicates_prevented: Counter
    chunk_handoff: Histogram
    chunk_duration: Histogram
    reaper_actions: Counter
    ledger_append: Histogram
    store_errors: Counter
    store_outage: Histogram
    store_eviction_allowed: Gauge
    approvals: Counter
    approval_wait: Histogram
    timer_late: Histogram
    tokens: Counter
    tenant_queued: Counter
    tenant_wait: Histogram
    #: ``tool_calls``' two series of every tool call that ran, resolved once (the hot path)
    ran: Counter
    errored: Counter


@cache
def get() -> Metrics:
    """This process's metrics, made (and registered) on the first call."""
    from prometheus_client import Counter, Gauge, Histogram

    tool_calls = Counter(
        "dres_tool_calls_total",
        "Tool calls the model made, by what the executor did with them",
        ["outcome"],
    )
    made = Metrics(
        turns_ended=Counter(
            "dres_turns_ended_total",
            "Turns ended, by status (completed, stopped) and stop code",
            ["status", "code"],
        ),
        tool_calls=tool_calls,
        duplicates_prevented=Counter(
            "dres_duplicates_prevented_total",
            "Write calls not run because they could repeat a side effect, by tool_blocked reason",
            ["reason"],
        ),
        chunk_handoff=Histogram(
            "dres_chunk_handoff_seconds",
            "Seconds from a run's hand-over (its run_ended at a soft limit or a shutdown) to its "
            "successor's run_started, by the ledger's timestamps",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 120),
        ),
        chunk_duration=Histogram(
            "dres_chunk_duration_seconds",
            "Seconds a chunk task ran, by the turn's mode and how the chunk ended",
            ["mode", "ended"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 90, 120, 300, 600, 900),
        ),
        reaper_actions=Counter(
            "dres_reaper_actions_total",
            "Turns the reaper looked at, by what it did",
            ["action"],
        ),
        ledger_append=Histogram(
            "dres_ledger_append_seconds",
            "Seconds one fenced append of a run's events to its turn's stream took",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
        ),
        store_errors=Counter(
            "dres_store_errors_total",
            "Ledger commands that could not reach Redis (each is sent again within "
            "DRES_STORE_OUTAGE_S), by operation",
            ["op"],
        ),
        store_outage=Histogram(
            "dres_store_outage_seconds",
            "Seconds an operation rode out an unreachable Redis before it succeeded",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60),
        ),
        store_eviction_allowed=Gauge(
            "dres_store_eviction_allowed",
            "1 for each Redis this process started on although its maxmemory-policy may evict "
            "dres's keys (DRES_ALLOW_EVICTION=1), by store (ledger, broker) and policy",
            ["store", "policy"],
            multiprocess_mode="max",  # set by the main process at start, never by the pool
        ),
        approvals=Counter(
            "dres_approvals_total",
            "Approval requests decided, by decision (approved, denied, expired, voided)",
            ["decision"],
        ),
        approval_wait=Histogram(
            "dres_approval_wait_seconds",
            "Seconds from an approval request to its decision (a person's, an expiry or a voiding)",
            buckets=(1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600),
        ),
        timer_late=Histogram(
            "dres_timer_late_seconds",
            "Seconds from a waiting turn's wake_at to the reaper's step that resumes it",
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 15, 60, 300),
        ),
        tokens=Counter(
            "dres_tokens_total",
            "Tokens model calls spent as their providers reported them, by model and kind "
            "(input, output)",
            ["model", "kind"],
        ),
        tenant_queued=Counter(
            "dres_tenant_turns_queued_total",
            "Turns that waited to start for their tenant (its limits, or other tenants' turns "
            "ahead in fair order), by tenant when DRES_METRICS_TENANT_LABEL=1",
            ["tenant"],
        ),
        tenant_wait=Histogram(
            "dres_tenant_queue_wait_seconds",
            "Seconds a turn waited to start for its tenant, by tenant when "
            "DRES_METRICS_TENANT_LABEL=1",
            ["tenant"],
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
        ),
        ran=tool_calls.labels("ran"),
        errored=tool_calls.labels("error"),
    )
    # Every known series starts at zero, so a rate over it exists before its first event.
    for outcome in TOOL_OUTCOMES:
        made.tool_calls.labels(outcome)
    for reason in OUTCOME_OF_REASON:
        made.duplicates_prevented.labels(reason)
    for decision in APPROVAL_OUTCOMES.values():
        made.approvals.labels(decision)
    made.turns_ended.labels("completed", "")
    for code in StopCode:
        made.turns_ended.labels("stopped", code.value)
    return made


# -- recording ----------------------------------------------------------------------------------


def never_fails(record: Callable[P, None]) -> Callable[P, None]:
    """A metric that cannot be recorded (a full disk under the multiprocess files, …) is logged
    and left out: it never fails the tool call, the chunk or the sweep that records it."""

    @wraps(record)
    def safely(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            record(*args, **kwargs)
        except Exception as e:
            log.warning("metric not recorded", metric=record.__name__, error=repr(e))

    return safely


@never_fails
def tool_ran(*, is_error: bool) -> None:
    m = get()
    (m.errored if is_error else m.ran).inc()


@never_fails
def tool_blocked(reason: str) -> None:
    """A call recorded as ``tool_blocked``: one duplicate prevented, by the event's reason."""
    m = get()
    m.tool_calls.labels(OUTCOME_OF_REASON.get(reason, "blocked")).inc()
    m.duplicates_prevented.labels(reason).inc()


@never_fails
def tool_denied() -> None:
    """A call a person denied: not run, and no duplicate prevented."""
    get().tool_calls.labels("blocked").inc()


@never_fails
def approval_decided(decision: str, waited_s: float | None) -> None:
    m = get()
    m.approvals.labels(APPROVAL_OUTCOMES.get(decision, decision)).inc()
    if waited_s is not None:
        m.approval_wait.observe(max(waited_s, 0.0))


@never_fails
def timer_woke(late_s: float) -> None:
    get().timer_late.observe(max(late_s, 0.0))


@never_fails
def tokens_spent(model: str, input_tokens: int, output_tokens: int) -> None:
    tokens = get().tokens
    tokens.labels(model, "input").inc(input_tokens)
    tokens.labels(model, "output").inc(output_tokens)


@never_fails
def tenant_queued(tenant: str) -> None:
    """A turn waits for its tenant; ``tenant`` "" when the operator allows no tenant label (an
    empty label is no label to Prometheus)."""
    get().tenant_queued.labels(tenant).inc()


@never_fails
def tenant_waited(tenant: str, seconds: float) -> None:
    """A turn that waited for its tenant starts."""
    get().tenant_wait.labels(tenant).observe(max(seconds, 0.0))


@never_fails
def turn_ended(status: str, code: str = "") -> None:
    get().turns_ended.labels(status, code).inc()


class StoreMetrics:
    """The ledger's ``StoreListener``: its faults as ``dres_store_errors_total`` and
    ``dres_store_outage_seconds``."""

    @staticmethod
    @never_fails
    def store_error(op: str) -> None:
        get().store_errors.labels(op).inc()

    @staticmethod
    @never_fails
    def outage_ridden(seconds: float) -> None:
        get().store_outage.observe(seconds)


@never_fails
def eviction_allowed(store: str, policy: str) -> None:
    """This process started on a ``store`` Redis (ledger, broker) whose ``maxmemory-policy`` is
    ``policy``, not ``noeviction``, because DRES_ALLOW_EVICTION=1 let it."""
    get().store_eviction_allowed.labels(store, policy).set(1)


#: append latencies not yet in the histogram. An observation costs ~3.5 us (a lock for the sum
#: and one for the bucket), and a tool call appends twice: in a burst of appends they go in by
#: batches (every ``APPEND_BATCH`` appends, ``APPEND_FLUSH_S`` after the last batch at the latest
#: and when a run's recorder closes: ``flush_appends``); an append after a quiet second goes in
#: at once. A process killed in a burst loses its unflushed observations, no more.
_appends: deque[float] = deque()
_flushed_at = [0.0]
APPEND_BATCH = 32
APPEND_FLUSH_S = 1.0


def observe_append(seconds: float) -> None:
    """One append of a run's events (a fenced round trip to Redis) took ``seconds``."""
    _appends.append(seconds)
    if len(_appends) >= APPEND_BATCH or time.monotonic() - _flushed_at[0] >= APPEND_FLUSH_S:
        flush_appends()


@never_fails
def flush_appends() -> None:
    """Put the appends observed so far into the histogram (any thread; each goes in once)."""
    _flushed_at[0] = time.monotonic()
    batch: list[float] = []
    with suppress(IndexError):
        while True:  # taken one by one: another thread may append meanwhile
            batch.append(_appends.popleft())
    if batch:  # a batch that cannot be recorded is left out, once
        observe_many(get().ledger_append, batch)


def observe_many(histogram: Histogram, amounts: Sequence[float]) -> None:
    """``histogram.observe`` of each of ``amounts``, as one increment per bucket they fall in and
    one of the sum: ``observe`` takes two locks per amount (in multiprocess mode two writes to its
    file), which was most of a tool call's own CPU. Reads the histogram's buckets as
    ``prometheus_client`` keeps them (``Histogram.observe`` does the same); where they are not
    kept so, amount by amount."""
    try:
        bounds: list[float] = histogram._upper_bounds
        buckets = histogram._buckets
        total = histogram._sum
    except AttributeError:  # another prometheus_client: the public way
        for amount in amounts:
            histogram.observe(amount)
        return
    counts = Tally(bisect_left(bounds, amount) for amount in amounts)
    total.inc(math.fsum(amounts))
    for bucket, count in counts.items():
        buckets[bucket].inc(count)


def handoff(cause: str, events: Sequence[Event] | None) -> float | None:
    """Seconds from the hand-over to this run's start, for a run that continues its turn in the
    next chunk (``cause`` ``next_chunk``), from the turn's events as its claim read them: the
    ``ts`` of the last ``run_ended`` before the run's own ``run_started`` (the last event).

    Taken from the ledger's record rather than the metadata's ``dispatched``, which a
    re-dispatch by the reaper overwrites: a hand-over whose message was lost counts in full.
    """
    if cause != "next_chunk" or not events or not isinstance(events[-1], RunStarted):
        return None
    started = events[-1]
    for event in reversed(events[:-1]):
        if isinstance(event, RunEnded):
            return max(0.0, started.ts - event.ts)
    return None


@never_fails
def observe_handoff(cause: str, events: Sequence[Event] | None) -> None:
    """Observe the hand-over that led to this run, if it continues a chunk and its claim read
    the turn (a claim that could not read it whole in its own step observes nothing)."""
    seconds = handoff(cause, events)
    if seconds is not None:
        get().chunk_handoff.observe(seconds)


def chunk_end(outcome: object) -> str | None:
    """How a chunk task ended, from what it returned (``Lifecycle.run_chunk``'s word or two:
    ``completed``, ``stopped: cancelled``, ``chained``, …); None for a message that ran no
    chunk (a duplicate, a stale or a bad message); ``failed`` when the task raised."""
    if not isinstance(outcome, str):
        return "failed"
    word = outcome.split(":", 1)[0].split(" ", 1)[0]
    if word in NOT_A_CHUNK:
        return None
    return word.replace("-", "_") if word in CHUNK_ENDS else "other"


@never_fails
def observe_chunk(mode: str, outcome: object, seconds: float) -> None:
    ended = chunk_end(outcome)
    if ended is not None:
        get().chunk_duration.labels(mode, ended).observe(seconds)


def reaper_action(action: str) -> str:
    """The label of what the reaper did to a turn, from the word it returned (a take-over's
    ``Outcome.reason``, such as ``stopped: crashed``)."""
    word = action.split(":", 1)[0]
    if word == "the turn changed":
        return "changed"
    return word if word in REAPER_ACTIONS else "other"


@never_fails
def reaper_swept(actions: Iterable[str]) -> None:
    """Count one sweep's actions (a turn it stopped is counted where every turn end is)."""
    m = get()
    for action in actions:
        m.reaper_actions.labels(reaper_action(action)).inc()
