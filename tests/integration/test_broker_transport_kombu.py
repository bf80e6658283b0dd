"""dres's broker transport (``worker.edges.celery.transport``) against kombu's own, on a real
redis-server
and through Sentinel: a channel that still holds an unacknowledged message, closed after Celery
collected its connection (what a Redis restart under a busy worker does), must fail as a
connection error, which the consumer survives, and the message must stay in Redis to be
restored."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kombu
import pytest
import redis
from kombu import Connection, Exchange, Queue
from kombu.common import ignore_errors

from rigs.redis_sentinel import MASTER, LocalSentinel
from tests.support.fixtures import own_redis, started
from worker.base.settings import load_settings
from worker.dev.redis_server import RedisServer
from worker.edges.celery.transport import SENTINEL_TRANSPORT, TRANSPORT

pytestmark = pytest.mark.redis_server


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RedisServer]:
    yield from own_redis(tmp_path)


def close_after_the_connection_was_collected(
    url: str,
    transport: str | None,
    options: dict[str, Any] | None = None,
    before_close: Callable[[], None] = lambda: None,
) -> None:
    """Take one message without acking it, then do what the consumer's reconnect does once
    Redis went away: the connection's transport loses its client, then (after
    ``before_close``: Redis killed) the channel is closed."""
    connection = Connection(url, transport=transport, transport_options=options or {})
    channel = connection.channel()
    queue = Queue("q", Exchange("q"), "q")(channel)
    queue.declare()
    connection.Producer(channel).publish({"n": 1}, exchange=queue.exchange, routing_key="q")
    assert queue.get(no_ack=False) is not None
    connection._do_close_transport()  # what Connection.collect() leaves behind
    before_close()
    ignore_errors(connection, channel.close)


def test_kombus_own_transport_lets_an_attribute_error_escape_the_consumers_cleanup(
    store: RedisServer,
) -> None:
    """The upstream hazard, shown on the kombu in use (5.7.0 has it). A tripwire, not a pin:
    a kombu that fixed it skips here, saying that worker.edges.celery.transport can go."""
    try:
        close_after_the_connection_was_collected(store.url, None, before_close=store.kill)
    except AttributeError as e:
        assert "hostname" in str(e)
    else:
        pytest.skip(f"kombu {kombu.__version__} no longer has the hazard")


def test_dres_transport_fails_it_as_a_connection_error_and_keeps_the_message(
    store: RedisServer,
) -> None:
    # nothing escapes
    close_after_the_connection_was_collected(store.url, TRANSPORT, before_close=store.kill)

    store.start()
    client = redis.Redis.from_url(store.url)
    try:
        assert client.hlen("unacked") == 1, "the unacknowledged message stays to be restored"
    finally:
        client.close()


@pytest.fixture
def sentinels() -> Iterator[LocalSentinel]:
    yield from started(lambda: LocalSentinel().start(), "a primary, a replica and sentinels")


def test_through_sentinel_kombus_transport_has_the_hazard_and_dres_transport_fixes_it(
    sentinels: LocalSentinel,
) -> None:
    """kombu's ``SentinelChannel`` is a Redis ``Channel``: the same ``_connparams``, the same
    escape; dres's ``SentinelTransport`` has the same fix (a tripwire too)."""
    settings = load_settings(
        redis_url=sentinels.url, redis_sentinels=sentinels.addresses, redis_master=MASTER
    )
    url = settings.broker
    options = {"master_name": MASTER}
    try:
        close_after_the_connection_was_collected(url, None, options)
    except AttributeError as e:
        assert "hostname" in str(e)
    else:
        pytest.skip(f"kombu {kombu.__version__} no longer has the hazard through Sentinel")
    close_after_the_connection_was_collected(url, SENTINEL_TRANSPORT, options)  # nothing escapes
    with sentinels.master_client() as client:
        assert client.hlen("unacked") == 2, "both messages stay to be restored"
