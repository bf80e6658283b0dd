"""TLS through Sentinel (docs/faults.md) on real processes: a primary, a replica and three
sentinels that serve TLS only and want a client certificate (``LocalSentinel(tls=True)``), and
dres told so by a ``rediss://`` DRES_REDIS_URL whose query names the CA, the certificate and its
key. No port of the rig speaks plain TCP, and none takes a client without the certificate, so
every connection dres opens must carry the URL's TLS options to work: a prefork worker's ledger
client and Celery broker, this process's runtime, the API's asyncio reader, and the watch's
subscriptions on each sentinel, which a ``SENTINEL FAILOVER`` in the middle of a write puts to
use.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from sample_tools import OUTSIDE_EFFECTS, outside_effects

from ledger.store import Ledger
from rigs import (
    DONE,
    ApiProcess,
    having,
    of,
    outside_write,
    show,
    wait_ended_through,
    wait_for,
    wait_until,
)
from rigs.redis_sentinel import LocalSentinel
from rigs.scripts import Script
from tests.support.fixtures import StartWorker, show_logs, started
from worker.base.settings import Settings
from worker.edges.redis.policy import check_stores
from worker.edges.redis.sentinel import watch_for
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server

#: chunk limits long enough for a write of a few seconds and a failover beside it
LONG_CHUNKS = {
    "DRES_SOFT_LIMIT_S": "15",
    "DRES_HARD_LIMIT_S": "20",
    "DRES_VISIBILITY_TIMEOUT_S": "60",
    "DRES_LEASE_S": "2",
}
#: seconds a turn may take to end after the failover (Celery's consumer moves when the old
#: master drops its clients, ~11 s after SENTINEL FAILOVER)
AFTER_S = 45.0
#: seconds the turn's write works after its effect: the failover happens meanwhile
WRITE_S = 3.0


@pytest.fixture
def rig() -> Iterator[LocalSentinel]:
    """This test's own TLS-only primary, replica and sentinels (a failover changes them)."""
    yield from started(
        lambda: LocalSentinel(
            password="m4ster-pw", sentinel_password="s3ntinel-pw", tls=True
        ).start(),
        "a primary, a replica and three sentinels on TLS (redis-server built with TLS, openssl)",
    )


@pytest.fixture
def store_env(rig: LocalSentinel) -> dict[str, str]:
    """dres's processes and this one's settings: the rig's, with chunks long enough."""
    return {**rig.env(), **LONG_CHUNKS}


def test_the_rig_takes_no_plain_client_and_no_client_without_the_certificate(
    rig: LocalSentinel,
) -> None:
    """What makes the other tests a proof: a connection without dres's TLS options fails."""
    master = rig.master_port()
    with rig.node(master) as client:
        assert client.config_get("port") == {"port": "0"}, "no plain port"
        assert client.config_get("tls-replication") == {"tls-replication": "yes"}
    certificates = rig.tls
    assert certificates is not None
    bare: dict[str, Any] = {"port": rig.ports[0], "password": "s3ntinel-pw", "socket_timeout": 2}
    without_certificate: dict[str, Any] = {"ssl": True, "ssl_ca_certs": str(certificates.ca)}
    for options in ({}, without_certificate):
        with pytest.raises(redis.ConnectionError), redis.Redis(**bare, **options) as sentinel:
            sentinel.ping()


def test_the_eviction_check_and_this_processs_clients_reach_the_master_over_tls(
    rig: LocalSentinel, settings: Settings, runtime: Runtime
) -> None:
    [reading] = check_stores(settings)
    assert (reading.policy, reading.reached) == ("noeviction", True)
    assert settings.sentinel_tls["ssl"] is True
    runtime.redis.set("probe", "1")
    with rig.master_client() as master:
        assert master.get("probe") == b"1", "written on the master the sentinels name"


@pytest.mark.timeout(180)
def test_a_turn_with_a_write_completes_once_through_a_sentinel_failover_over_tls(
    rig: LocalSentinel,
    settings: Settings,
    runtime: Runtime,
    dres_env: dict[str, str],
    start_worker: StartWorker,
    script: Script,
    effects_file: str,
    tmp_path: Path,
) -> None:
    worker = start_worker(overrides={OUTSIDE_EFFECTS: effects_file})
    api = ApiProcess.start(dres_env, tmp_path / "api.log")
    try:
        steps = [outside_write("w", WRITE_S), outside_write("w2", 0.0), DONE]
        model = script(steps, on_resume="restart")
        turn = runtime.lifecycle.enqueue("write w", model=model)
        wait_for(runtime.ledger, turn.turn_id, having("tool_start"), what="the write's call")
        wait_until(lambda: len(outside_effects(effects_file, "w")), 10, "the write's effect")

        old = rig.failover()
        new = rig.wait_master(other_than=old)

        events = wait_ended_through(runtime.ledger, turn.turn_id, AFTER_S)
        assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
        for label in ("w", "w2"):
            assert len(outside_effects(effects_file, label)) == 1, f"{label} ran once"
        with rig.node(new) as client:  # the new master itself, over TLS
            assert [env.event for env in Ledger(client).read_turn(turn.turn_id)] == events
        watch = watch_for(settings)
        wait_until(lambda: ("127.0.0.1", old) in watch.demoted, 10, "+switch-master over TLS")
        status = httpx.get(f"{api.url}/v1/turns/{turn.turn_id}", timeout=10)
        assert status.json()["status"] == "completed", status.text

        pid = worker.pid
        after = runtime.lifecycle.enqueue("write a", model=script([outside_write("a", 0.0), DONE]))
        events = wait_ended_through(runtime.ledger, after.turn_id, AFTER_S)
        assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
        assert len(outside_effects(effects_file, "a")) == 1
        assert worker.alive() and worker.pid == pid, "the same worker serves after the failover"
    finally:
        api.kill_group()
        show_logs([api])
