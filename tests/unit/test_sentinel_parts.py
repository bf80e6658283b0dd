"""Sentinel without servers (``DRES_REDIS_SENTINELS``, ``worker.edges.redis.sentinel``): the
settings
and their one-line refusals, the URLs and options Celery gets, TLS from a ``rediss://`` URL, how
discovery picks the master from the Sentinels' answers, and what the watch makes of their
events. (On real sentinels: ``tests/integration/test_sentinel.py``, with TLS
``tests/integration/test_sentinel_tls.py``.)"""

from __future__ import annotations

import inspect
import time
from typing import Any

import pytest
import redis.asyncio.connection
import redis.connection
from redis.asyncio.sentinel import SentinelManagedSSLConnection as AsyncSentinelSSLConnection
from redis.sentinel import SentinelManagedSSLConnection

from worker.base.errors import ConfigError
from worker.base.parsers import SENTINEL_TLS_OPTIONS
from worker.base.settings import load_settings
from worker.edges.celery.app import create_app
from worker.edges.celery.transport import SENTINEL_TRANSPORT
from worker.edges.redis.sentinel import master_client, master_options, master_reader, watch_for
from worker.edges.redis.sentinel_watch import (
    ABORTED,
    FAILOVER_HOLD_S,
    PROMOTING,
    SWITCH_MASTER,
    MasterWatch,
    newest_master,
)

SENTINELS = {"redis_sentinels": "10.0.0.5:26379, 10.0.0.6:26380", "redis_master": "main"}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"redis_sentinels": "10.0.0.5:26379"}, "DRES_REDIS_SENTINELS and DRES_REDIS_MASTER go"),
        ({"redis_master": "main"}, "DRES_REDIS_SENTINELS and DRES_REDIS_MASTER go together"),
        ({"redis_sentinels": ",", "redis_master": "main"}, "go together"),
        (
            {"redis_sentinels": "10.0.0.5", "redis_master": "main"},
            "DRES_REDIS_SENTINELS: '10.0.0.5' is not host:port",
        ),
        (
            {"redis_sentinels": "s1:26379,s2:http", "redis_master": "main"},
            "DRES_REDIS_SENTINELS: 's2:http' is not host:port",
        ),
        (
            {"redis_sentinels": "s1:0", "redis_master": "main"},
            "DRES_REDIS_SENTINELS: 's1:0' is not host:port",
        ),
        (
            {**SENTINELS, "redis_cluster": True, "broker_url": "redis://b:6379/0"},
            "cannot be used with DRES_REDIS_CLUSTER=1",
        ),
        (
            {**SENTINELS, "redis_url": "unix:///run/redis.sock"},
            "DRES_REDIS_URL: must be a redis:// or rediss:// URL with DRES_REDIS_SENTINELS",
        ),
        (
            {**SENTINELS, "redis_url": "redis://r/0?ssl_ca_certs=/etc/ca.crt"},
            "DRES_REDIS_URL: ssl_ca_certs is a TLS option: use a rediss:// URL",
        ),
        (
            {**SENTINELS, "redis_url": "rediss://r/0?ssl_validate_ocsp=true"},
            "DRES_REDIS_URL: ssl_validate_ocsp cannot be used through Sentinel",
        ),
        (
            {**SENTINELS, "redis_url": "rediss://r/0?socket_timeout=5"},
            "DRES_REDIS_URL: socket_timeout is not used through Sentinel",
        ),
        (
            {**SENTINELS, "redis_url": "rediss://r/0?ssl_cert_reqs=CERT_REQUIRED"},
            "DRES_REDIS_URL: ssl_cert_reqs must be one of none, optional, required",
        ),
        (
            {**SENTINELS, "redis_url": "rediss://r/0?ssl_min_version=tls13"},
            "DRES_REDIS_URL: Invalid value for 'ssl_min_version'",
        ),
        ({"broker_url": "sentinel://s1:26379"}, "a sentinel:// DRES_BROKER_URL needs"),
    ],
)
def test_sentinel_settings_that_cannot_work_are_refused_in_one_line(
    settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(**settings)
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_the_broker_follows_the_sentinels_with_the_masters_password_and_database() -> None:
    settings = load_settings(**SENTINELS, redis_url="redis://:p%40ss@unused:6379/3")
    assert settings.sentinels == [("10.0.0.5", 26379), ("10.0.0.6", 26380)]
    assert settings.broker == (
        "sentinel://:p%40ss@10.0.0.5:26379/3;sentinel://:p%40ss@10.0.0.6:26380/3"
    )
    assert master_options(settings) == {"db": 3, "password": "p@ss"}
    explicit = load_settings(**SENTINELS, broker_url="redis://b:6379/0")
    assert explicit.broker == "redis://b:6379/0", "DRES_BROKER_URL still wins"


def test_celery_gets_the_sentinel_transport_the_master_name_and_the_sentinels_password() -> None:
    settings = load_settings(**SENTINELS, redis_sentinel_password="s3cret")
    app = create_app(settings, publish_timeout_s=0.5)
    try:
        assert app.conf.broker_transport == SENTINEL_TRANSPORT
        options = app.conf.broker_transport_options
        assert options["master_name"] == "main"
        assert options["sentinel_kwargs"] == {
            "socket_timeout": 0.5,
            "socket_connect_timeout": 0.5,
            "password": "s3cret",
        }
        assert app.conf.result_backend_transport_options["master_name"] == "main"
    finally:
        app.close()


TLS_URL = (
    "rediss://:pw@unused/1?ssl_ca_certs=/etc/dres/ca.crt&ssl_certfile=/etc/dres/client.crt"
    "&ssl_keyfile=/etc/dres/client.key&ssl_check_hostname=false"
)
TLS = {
    "ssl_ca_certs": "/etc/dres/ca.crt",
    "ssl_certfile": "/etc/dres/client.crt",
    "ssl_keyfile": "/etc/dres/client.key",
    "ssl_check_hostname": False,
}


def test_a_rediss_url_means_tls_to_the_master_and_to_the_sentinels_with_its_options() -> None:
    settings = load_settings(**SENTINELS, redis_url=TLS_URL, redis_sentinel_password="s3cret")
    assert settings.sentinel_tls == {"ssl": True, **TLS}
    assert master_options(settings) == {"db": 1, "password": "pw", "ssl": True, **TLS}
    assert settings.broker == "sentinel://:pw@10.0.0.5:26379/1;sentinel://:pw@10.0.0.6:26380/1"
    watch = watch_for(settings)
    assert watch.kwargs == {
        "socket_timeout": 1.0,
        "socket_connect_timeout": 1.0,
        "password": "s3cret",
        "ssl": True,
        **TLS,
    }, "the watch's and discovery's clients of the Sentinels"
    assert watch_for(load_settings(**SENTINELS, redis_sentinel_password="s3cret")) is not watch
    client = master_client(settings)
    assert client.connection_pool.connection_class is SentinelManagedSSLConnection
    assert client.connection_pool.connection_kwargs["ssl_certfile"] == "/etc/dres/client.crt"
    reader = master_reader(settings)
    assert reader.connection_pool.connection_class is AsyncSentinelSSLConnection
    client.close()


def test_celery_gets_the_masters_tls_as_broker_use_ssl_and_the_sentinels_in_their_kwargs() -> None:
    settings = load_settings(**SENTINELS, redis_url=TLS_URL)
    app = create_app(settings)
    try:
        assert app.conf.broker_use_ssl == {"ssl_cert_reqs": "required", **TLS}
        sentinels = app.conf.broker_transport_options["sentinel_kwargs"]
        assert sentinels == {
            "socket_timeout": 1.0,
            "socket_connect_timeout": 1.0,
            "ssl": True,
            **TLS,
        }
    finally:
        app.close()
    bare = create_app(load_settings(**SENTINELS, redis_url="rediss://:pw@unused/0"))
    plain = create_app(load_settings(**SENTINELS))
    try:
        assert bare.conf.broker_use_ssl == {"ssl_cert_reqs": "required"}, (
            "not empty, which kombu would take for no TLS; redis-py's default check"
        )
        assert plain.conf.broker_use_ssl is False, "Celery's default: no TLS"
    finally:
        bare.close()
        plain.close()


def test_every_tls_option_dres_passes_through_sentinel_is_one_both_redis_clients_take() -> None:
    """The workers' redis.Redis and the API's redis.asyncio.Redis open their TLS connections
    with these keyword arguments; an option one of them lost would fail only at connect."""
    for connection in (redis.connection.SSLConnection, redis.asyncio.connection.SSLConnection):
        taken = set(inspect.signature(connection.__init__).parameters)
        assert taken >= SENTINEL_TLS_OPTIONS, connection


def state(port: int, epoch: int, flags: str = "master") -> dict[str, Any]:
    flagset = set(flags.split(","))
    return {
        "ip": "10.0.0.9",
        "port": port,
        "config-epoch": epoch,
        "num-other-sentinels": 2,
        "is_master": "master" in flagset,
        "is_sdown": "s_down" in flagset,
        "is_odown": "o_down" in flagset,
    }


def test_discovery_takes_the_newest_healthy_master_never_one_since_demoted() -> None:
    lagging, current = state(6379, 1), state(6380, 2)
    assert newest_master([lagging, current, None]) == ("10.0.0.9", 6380)
    assert newest_master([current, lagging]) == ("10.0.0.9", 6380)
    assert newest_master([state(6380, 2, "master,s_down"), lagging]) == ("10.0.0.9", 6379)
    assert newest_master([state(6379, 1, "master,o_down")]) is None
    assert newest_master([lagging], demoted={("10.0.0.9", 6379)}) is None
    assert newest_master([]) is None


def test_the_watch_holds_commands_from_a_promotion_until_the_switch_and_follows_it() -> None:
    watch = MasterWatch([("s1", 1), ("s2", 2)], "main", {})
    leader, other = ("s1", 1), ("s2", 2)
    watch.address = ("10.0.0.9", 6379)
    promoting = "slave 10.0.0.9:6380 10.0.0.9 6380 @ main 10.0.0.9 6379"
    watch.heard(PROMOTING, promoting.replace("@ main", "@ other"), leader)
    assert watch.held() == 0, "another master's failover holds nothing"
    watch.heard(PROMOTING, promoting, leader)
    assert 0 < watch.held() <= FAILOVER_HOLD_S
    watch.heard(ABORTED.replace("*", "not-elected"), "master main 10.0.0.9 6379", other)
    assert watch.held() > 0, "another sentinel's lost election ends no hold"
    assert watch.stale("10.0.0.9", 6379) is False
    watch.heard(SWITCH_MASTER, "main 10.0.0.9 6379 10.0.0.9 6380", other)
    assert watch.held() == 0
    assert watch.address == ("10.0.0.9", 6380)
    assert watch.stale("10.0.0.9", "6379") and not watch.stale("10.0.0.9", "6380")
    assert watch.demoted == {("10.0.0.9", 6379)}
    watch.heard(SWITCH_MASTER, "main 10.0.0.9 6380 10.0.0.9 6379", leader)
    assert watch.demoted == {("10.0.0.9", 6380)}, "a master that is back is no longer demoted"


def test_a_hold_ends_with_its_leaders_abort_or_after_its_bound() -> None:
    watch = MasterWatch([("s1", 1)], "main", {})
    watch.heard(PROMOTING, "slave a:1 a 1 @ main b 2", ("s1", 1))
    watch.heard("-failover-abort-slave-timeout", "master main b 2", ("s1", 1))
    assert watch.held() == 0
    watch.held_until = time.monotonic() - 0.001  # a promotion whose switch never came
    started = time.monotonic()
    watch.wait()
    assert time.monotonic() - started < 0.1
