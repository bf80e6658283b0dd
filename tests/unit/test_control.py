"""TurnControl's reading of the Stop flag when Redis is briefly away."""

from __future__ import annotations

import fakeredis
import pytest
import redis
from structlog.testing import capture_logs

from ledger.store import Ledger
from worker.clock import RandomIds, SystemClock
from worker.control import TurnControl
from worker.settings import load_settings


class NoDispatch:
    def dispatch(self, turn_id: str, run_id: str, mode: str) -> None: ...

    def revoke(self, turn_id: str, run_id: str) -> None: ...


def test_a_stop_check_that_cannot_reach_redis_says_no_and_warns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A redis-server restart must not fail the running turn at its next safe point."""
    client = fakeredis.FakeRedis()
    control = TurnControl(Ledger(client), load_settings(), SystemClock(), RandomIds(), NoDispatch())

    def refused(*keys: object) -> int:
        raise redis.ConnectionError("Connection refused")

    monkeypatch.setattr(client, "exists", refused)
    with capture_logs() as logs:
        assert control.is_cancelled("t1") is False
    assert [entry["event"] for entry in logs] == ["could not check for a Stop request"]
