"""A 20-trial subset of ``make chaos``: faults at random points on a real worker, no violation."""

from __future__ import annotations

import pytest

from chaos.runner import run, table
from worker.dev.redis_server import RedisServer

TRIALS = 20
SEED = 20261202


@pytest.mark.timeout(600)
def test_twenty_chaos_trials_keep_every_invariant(redis_server: RedisServer) -> None:
    """No write twice, no blind retry, a terminal state, no zombie event, no lost record."""
    outcomes, _ = run(TRIALS, SEED)
    print(table(outcomes))
    assert len(outcomes) == TRIALS
    assert sum(o.fired for o in outcomes) >= TRIALS * 3 // 4, "most injected faults must fire"
    violations = [(o.fault, v) for o in outcomes for v in o.violations]
    assert violations == []
