"""A ``redis://`` broker goes through ``worker.edges.celery.transport``'s transport (a kombu bug's
workaround); other schemes keep kombu's own. The workaround itself is tested on a real server in
``tests/integration/test_store_faults.py``."""

from __future__ import annotations

import pytest
from kombu.transport import redis as kombu_redis

from worker.base.settings import load_settings
from worker.edges.celery import transport as broker
from worker.edges.celery.app import create_app


def test_a_redis_broker_uses_the_transport_that_survives_a_lost_connection() -> None:
    app = create_app(load_settings(redis_url="redis://127.0.0.1:9/0", broker_url=""))
    with app.connection_for_write() as connection:
        assert connection.transport_cls == broker.TRANSPORT
        assert issubclass(connection.get_transport_cls(), kombu_redis.Transport)


@pytest.mark.parametrize("url", ["rediss://127.0.0.1:9/0", "memory://"])
def test_other_brokers_keep_kombus_transport(url: str) -> None:
    app = create_app(load_settings(redis_url="redis://127.0.0.1:9/0", broker_url=url))
    with app.connection_for_write() as connection:
        assert connection.transport_cls == url.split(":")[0]


def test_a_sentinel_broker_keeps_the_transport_when_it_fails_over_to_the_next_sentinel() -> None:
    """kombu's reconnect (and a publish's retry) moves a connection to its next alternate URL
    after a failed attempt, re-reading the transport from that URL's scheme: the connection
    must still use dres's transport after it went round every Sentinel."""
    settings = load_settings(
        redis_url="redis://127.0.0.1:9/0",
        redis_sentinels="127.0.0.1:7,127.0.0.1:8,127.0.0.1:9",
        redis_master="dres-master",
    )
    app = create_app(settings)
    # the consumer's, a producer's, and one of the pool a chunk's hand-over publishes from
    for connection in (app.connection_for_read(), app.connection_for_write(), app.pool.acquire()):
        with connection:
            for _ in range(len(connection.alt) + 1):
                connection.maybe_switch_next()  # what a failed connect does
                assert issubclass(connection.get_transport_cls(), broker.SentinelTransport)
