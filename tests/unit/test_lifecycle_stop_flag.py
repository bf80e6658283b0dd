"""The lifecycle's reading of the Stop flag when Redis is briefly away."""

from __future__ import annotations

import fakeredis
import pytest
import redis
from harness import KeptMessages
from structlog.testing import capture_logs

from ledger.store import Ledger
from worker.base.clock import RandomIds, SystemClock
from worker.base.settings import load_settings
from worker.lifecycle import Lifecycle


def test_a_stop_check_that_cannot_reach_redis_says_no_and_warns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A redis-server restart must not fail the running turn at its next safe point."""
    client = fakeredis.FakeRedis()
    lifecycle = Lifecycle(
        Ledger(client), load_settings(), SystemClock(), RandomIds(), KeptMessages()
    )

    def refused(*keys: object) -> int:
        raise redis.ConnectionError("Connection refused")

    monkeypatch.setattr(client, "exists", refused)
    with capture_logs() as logs:
        assert lifecycle.is_cancelled("t1") is False
    assert [entry["event"] for entry in logs] == ["could not check for a Stop request"]
