"""``dres worker``'s pool, read from its Celery options before anything is imported (gevent's
patches must come first): every spelling Celery's ``-P`` takes, and nothing else patched; the
chunks one process runs at once (``-c``), which size its ledger pool."""

from __future__ import annotations

import pytest

from worker.base.settings import Settings
from worker.edges.celery.app import create_app
from worker.edges.cli.pools import concurrency_option, patch_for, pool_option
from worker.edges.cli.worker import POOLS
from worker.edges.redis import clients
from worker.edges.redis.clients import REDIS_PY_POOL, pool_size
from worker.lifecycle.heartbeat import BatchedBeats, Beats


@pytest.mark.parametrize(
    ("extra", "pool"),
    [
        (["-P", "gevent"], "gevent"),
        (["--pool", "gevent"], "gevent"),
        (["--pool=gevent"], "gevent"),
        (["-Pgevent"], "gevent"),
        (["-c", "50", "-l", "info", "-P", "solo"], "solo"),
        (["-c", "2"], None),
        (["-P"], None),
    ],
)
def test_the_pool_option_in_each_spelling(extra: list[str], pool: str | None) -> None:
    assert pool_option(extra) == pool


@pytest.mark.parametrize(
    "argv",
    [[], ["worker"], ["worker", "-P", "prefork"], ["enqueue", "-P", "gevent"], ["api"]],
)
def test_only_a_gevent_worker_is_patched(argv: list[str]) -> None:
    assert patch_for(argv) is False


@pytest.mark.parametrize(
    ("extra", "concurrency"),
    [
        (["-c", "500"], 500),
        (["--concurrency", "50", "-P", "gevent"], 50),
        (["--concurrency=8"], 8),
        (["-c12"], 12),
        (["-P", "gevent"], None),
        (["-c", "many"], None),
    ],
)
def test_the_concurrency_option_in_each_spelling(extra: list[str], concurrency: int | None) -> None:
    assert concurrency_option(extra) == concurrency


def test_a_ledger_pool_has_two_connections_a_chunk_and_never_fewer_than_redis_pys() -> None:
    assert pool_size(1) == REDIS_PY_POOL
    assert pool_size(500) >= 2 * 500


def test_a_gevent_workers_ledger_client_may_open_two_connections_for_each_chunk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``-c 500``: the pool allows what 500 chunks at once may hold (no connection is opened)."""
    monkeypatch.setattr(clients, "_chunks", 1)
    clients.expect_chunks(500)
    client = clients.ledger_client(Settings(redis_url="redis://127.0.0.1:1/0"))
    assert client.connection_pool.max_connections == pool_size(500) > REDIS_PY_POOL


def test_a_gevent_worker_beats_all_its_runs_together_and_prefork_each_run_alone() -> None:
    assert POOLS["gevent"].heartbeats is BatchedBeats
    assert POOLS["prefork"].heartbeats is Beats
    assert (POOLS["gevent"].chunks_share_a_process, POOLS["prefork"].chunks_share_a_process) == (
        True,
        False,
    )


def test_a_gevent_workers_broker_channel_may_open_a_connection_for_each_chunk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kombu's channel refuses an 11th Redis connection by default: 500 chunks acking together
    (after a broker restart) would see "Couldn't ack" and their messages delivered again."""
    monkeypatch.setattr(clients, "_chunks", 1)
    settings = Settings(redis_url="redis://127.0.0.1:1/0")
    assert create_app(settings).conf.broker_transport_options["max_connections"] == REDIS_PY_POOL
    clients.expect_chunks(500)
    options = create_app(settings).conf.broker_transport_options
    assert options["max_connections"] == pool_size(500) > 500
