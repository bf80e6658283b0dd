"""Tenant trials (``make chaos TENANTS=N``, ``python -m chaos --tenants N``): the default trials,
each with its turns under 2 or 3 tenants of a trial of their own, the workers and the runner
bounded to N turns of a tenant at once (``DRES_TENANT_CONCURRENCY``).

The first tenant enqueues more turns than N at once (the turn the fault aims at first), so its
bound binds; the others enqueue 1 to N+1 beside it. After the trial, besides every turn's own
invariants: no tenant had more than N of its turns in a run at one instant (``chaos.tenant_checks``,
from the ledger; the trial's runs are printed when it broke), and every tenant's ``running`` and
``queued`` counts (``GET /v1/tenants/{t}``) are back to 0 — each slot given back once, a slot a
crash left behind by the reaper's mend (``worker.lifecycle.tenancy.SETTLED_AFTER_MS``) within
``SLOTS_BACK_S``. ``reached`` says whether a tenant had N running at once: the bound was tried,
not just never met.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from chaos import tenant_checks
from chaos.cluster import Cluster
from chaos.report import Outcome
from chaos.trial import Trial
from ledger.errors import UnknownTurn
from worker.lifecycle.tenancy import MEND_S, SETTLED_AFTER_MS

#: seconds after the trial within which every slot must be back: a slot a crash left behind
#: (between a turn's end and its give-back) is given back by a reaper's mend once it is
#: ``SETTLED_AFTER_MS`` old, and the mend runs every ``MEND_S``; with room for a slow sweep
SLOTS_BACK_S = SETTLED_AFTER_MS / 1000 + MEND_S + 10.0
#: seconds each round of the busiest tenant's turns may add to the trial's bound
WAVE_S = 5.0
#: seconds between two looks at the tenants' counts
LOOK_S = 0.2
LETTERS = "abc"
#: a worker's line when its reaper's mend gives back a slot a crash left behind
MENDED = "gave back a slot its turn left behind"


def turn_tenants(trial: Trial, index: int) -> list[str]:
    """The tenant of each of the trial's turns, in the order they are enqueued (the first
    tenant's first): names of the trial's own (``t<index>a``...), so that no trial meets
    another's slots."""
    return [f"t{index}{LETTERS[j]}" for j, n in enumerate(trial.tenants) for _ in range(n)]


def judge(
    cluster: Cluster,
    trial: Trial,
    turns: dict[str, str],
    outcome: Outcome,
    read: Callable[[Callable[[], Any]], Any],
) -> None:
    """Check a tenant trial's bound and slots into ``outcome`` (``turns``: turn id -> tenant;
    ``read``: the runner's read, sent again until Redis answers)."""
    ledger = cluster.runtime.ledger
    streams = {
        turn_id: [env.event for env in read(partial(ledger.read_turn, turn_id))]
        for turn_id in turns
    }
    broken = tenant_checks.within_bound(streams, trial.limit)
    outcome.violations += broken
    if broken:
        outcome.details += tenant_checks.timeline(streams)
    most = tenant_checks.most_running(streams)
    outcome.limit = trial.limit
    outcome.reached = any(n >= trial.limit for n in most.values())
    if all(t.status in ("completed", "stopped") for t in outcome.turns):  # else said already
        counts = slots(cluster, sorted(set(turns.values())), read)
        left = tenant_checks.slots_back(counts)
        outcome.violations += left
        if left:
            outcome.details += holders(cluster, [t for t, c in counts.items() if any(c)], read)


def holders(
    cluster: Cluster, tenants: Sequence[str], read: Callable[[Callable[[], Any]], Any]
) -> list[str]:
    """The turns still holding the ``tenants``' slots, each with its status: what to read when a
    slot was not given back (a turn ended or waiting: a give-back lost to a crash, which the
    reaper's mend gives back only to a tenant with a turn waiting to start)."""
    ledger, slots_of = cluster.runtime.ledger, cluster.runtime.lifecycle.store.tenants
    lines = []
    for tenant in tenants:
        for turn_id, since in read(partial(slots_of.running, tenant)):
            try:
                status = str(read(partial(ledger.meta, turn_id)).status)
            except UnknownTurn:
                status = "gone"
            lines.append(f"{tenant} holds a slot for {turn_id} ({status}) since {since} ms")
    return lines


def slots(
    cluster: Cluster, tenants: Sequence[str], read: Callable[[Callable[[], Any]], Any]
) -> dict[str, tuple[int, int]]:
    """Each tenant's running and queued counts once all are 0, or as they are at the deadline."""
    lifecycle = cluster.runtime.lifecycle
    deadline = time.monotonic() + SLOTS_BACK_S
    while True:
        counts = {}
        for tenant in tenants:
            view = read(partial(lifecycle.tenant_view, tenant))
            counts[tenant] = (int(view["running"]), int(view["queued"]))
        if not any(r or q for r, q in counts.values()) or time.monotonic() > deadline:
            return counts
        time.sleep(LOOK_S)  # a reaper's mend gives a slot left behind back within the deadline
