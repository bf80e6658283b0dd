"""``GET /healthz``'s ``workers`` (docs/http-api.md): the workers seen in the last 30 s, on a real
``dres api`` and real ``dres worker`` processes of both pools. No worker is a 200 with
``"workers": 0``; each worker counts once whatever its concurrency, with or without its reaper;
one stopping cleanly leaves at once, one killed ages out."""

from __future__ import annotations

from typing import cast

import httpx
import pytest
import redis

from ledger import keys, presence
from rigs import wait_until
from tests.support.fixtures import BOTH_POOLS, StartWorker

pytestmark = pytest.mark.redis_server


def workers(http: httpx.Client) -> int:
    reply = http.get("/healthz")
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["redis"] == "ok" and body["broker"] == "ok", body
    count: int = body["workers"]
    return count


def test_with_no_worker_healthz_is_200_and_says_0_workers(http: httpx.Client) -> None:
    assert http.get("/healthz").json() == {"redis": "ok", "broker": "ok", "workers": 0}


@BOTH_POOLS
def test_a_worker_counts_once_while_alive_and_leaves_when_it_stops_cleanly(
    http: httpx.Client, start_worker: StartWorker, rdb: redis.Redis
) -> None:
    first = start_worker(concurrency=2)
    wait_until(lambda: workers(http) == 1, timeout=30, what="the worker counted")
    second = start_worker(extra=("--no-reaper",))  # a worker without the reaper is alive too
    wait_until(lambda: workers(http) == 2, timeout=30, what="both workers counted")

    second.stop()  # SIGTERM: a warm shutdown, which takes it off the list at once
    assert workers(http) == 1
    assert rdb.zcard(keys.workers()) == 1
    first.stop()
    assert workers(http) == 0


def test_a_killed_worker_is_not_counted_once_its_last_beat_is_30_s_old(
    http: httpx.Client, start_worker: StartWorker, rdb: redis.Redis
) -> None:
    worker = start_worker()
    wait_until(lambda: workers(http) == 1, timeout=30, what="the worker counted")
    worker.kill_group()
    (member,) = cast(list[bytes], rdb.zrange(keys.workers(), 0, -1))  # the kill left its entry
    seen_ms = cast(float, rdb.zscore(keys.workers(), member))
    # as 30 s later: its last beat moved back by the window
    rdb.zadd(keys.workers(), {member: seen_ms - presence.SEEN_MS - 1})
    assert workers(http) == 0
