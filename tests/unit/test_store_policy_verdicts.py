"""The start-up check of each Redis's ``maxmemory-policy`` (``worker.edges.redis.policy``): what
it decides from a reading, and what it does with a Redis that will not say or is not there.
(The refusals on real redis-servers: ``tests/integration/test_store_policy.py``.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import fakeredis
import pytest
from fakeredis import TcpFakeServer
from structlog.testing import capture_logs

from worker.base.settings import load_settings
from worker.dev.redis_server import free_port
from worker.edges.redis.policy import Reading, check_stores, read_policy, refusal, verdict


@pytest.mark.parametrize(
    ("reading", "allow", "expected"),
    [
        (Reading("ledger", "r:6379", policy="noeviction"), False, "ok"),
        (Reading("ledger", "r:6379", policy="allkeys-lru"), False, "refused"),
        (Reading("broker", "r:6379", policy="volatile-ttl"), False, "refused"),
        (Reading("ledger", "r:6379", policy="volatile-lru"), True, "allowed"),
        (Reading("ledger", "r:6379", policy="noeviction"), True, "ok"),
        (Reading("ledger", "r:6379", error="an empty reply"), False, "unread"),
        (Reading("ledger", "r:6379", error="NOPERM"), False, "unread"),
        (Reading("ledger", "r:6379", error="refused", reached=False), False, "unreached"),
    ],
)
def test_only_noeviction_passes_and_any_other_policy_is_refused_unless_allowed(
    reading: Reading, allow: bool, expected: str
) -> None:
    assert verdict(reading, allow=allow) == expected


def test_a_redis_that_refuses_config_get_gives_a_reading_without_a_policy() -> None:
    # fakeredis answers CONFIG GET as a managed Redis that renamed it away: an unknown command
    reading = read_policy("ledger", "fake:6379", fakeredis.FakeRedis())
    assert (reading.policy, reading.reached) == ("", True)
    assert "unknown command" in reading.error
    assert verdict(reading, allow=False) == "unread"


def test_the_refusal_is_one_line_naming_each_redis_its_policy_the_fix_and_the_variable() -> None:
    line = refusal(
        [
            Reading("ledger", "10.0.0.1:6379", policy="allkeys-lru"),
            Reading("broker", "10.0.0.2:6380", policy="volatile-lru"),
        ]
    )
    assert "\n" not in line
    assert "the ledger's Redis at 10.0.0.1:6379 has maxmemory-policy allkeys-lru" in line
    assert "the broker's Redis at 10.0.0.2:6380 has maxmemory-policy volatile-lru" in line
    assert "CONFIG SET maxmemory-policy noeviction" in line
    assert "maxmemory-policy noeviction in redis.conf" in line
    assert "DRES_ALLOW_EVICTION=1" in line


@pytest.fixture
def fake_tcp_redis() -> Iterator[str]:
    """fakeredis's TCP server, which ``dres up`` and ``dres demo`` fall back to without a
    redis-server binary."""
    port = free_port()
    server = TcpFakeServer(("127.0.0.1", port), server_type="redis")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"redis://127.0.0.1:{port}/0"
    server.shutdown()
    server.server_close()


def test_a_redis_that_will_not_say_its_policy_is_trusted_with_a_warning(
    fake_tcp_redis: str,
) -> None:
    settings = load_settings(redis_url=fake_tcp_redis, broker_url="")
    with capture_logs() as logs:
        [reading] = check_stores(settings)
    assert verdict(reading, allow=False) == "unread"
    warned = [e for e in logs if e["log_level"] == "warning"]
    assert [(e["event"], e["store"]) for e in warned] == [
        ("maxmemory-policy not readable: make sure it is noeviction", "ledger")
    ]


def test_a_redis_that_cannot_be_reached_at_start_is_not_checked_and_says_so() -> None:
    closed = f"redis://127.0.0.1:{free_port()}/0"
    settings = load_settings(redis_url=closed, broker_url=closed.replace("/0", "/1"))
    with capture_logs() as logs:
        readings = check_stores(settings)
    assert [(r.store, r.reached) for r in readings] == [("ledger", False), ("broker", False)]
    warned = [(e["event"], e["store"]) for e in logs if e["log_level"] == "warning"]
    skipped = "Redis unreachable at start: maxmemory-policy check skipped"
    assert warned == [(skipped, "ledger"), (skipped, "broker")]


def test_a_broker_on_the_ledgers_url_is_read_once() -> None:
    closed = f"redis://127.0.0.1:{free_port()}/0"
    with capture_logs():
        readings = check_stores(load_settings(redis_url=closed, broker_url=closed))
    assert [r.store for r in readings] == ["ledger"]
