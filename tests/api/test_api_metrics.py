"""GET /metrics on the API (docs/http-api.md): Prometheus text with the unfinished turns it reads
from Redis and the names of docs/http-api.md; behind the bearer token when one is set."""

from __future__ import annotations

import httpx
import pytest
from api_support import TOKEN

from rigs.scrape import Scrape
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server


def test_metrics_count_the_unfinished_turns_in_redis_by_status(
    http: httpx.Client, runtime: Runtime
) -> None:
    """Three turns created at the ledger level (no message sent), one of them claimed."""
    turns = [runtime.lifecycle.create(f"task {n}") for n in range(3)]
    assert runtime.lifecycle.claim(turns[0].turn_id, turns[0].run_id) is not None

    reply = http.get("/metrics")

    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/plain")
    got = Scrape(reply.text)
    assert got.value("dres_turns", status="queued") == 2
    assert got.value("dres_turns", status="running") == 1
    assert got.value("dres_turns", status="resuming") == 0
    assert got.value("dres_turns_indexed") == 3
    # the names of docs/http-api.md, whose counts the workers serve
    assert got.families["dres_turns_ended"] == "counter"
    assert got.families["dres_tool_calls"] == "counter"
    assert got.families["dres_chunk_handoff_seconds"] == "histogram"
    outcomes = {"ran", "blocked", "refused", "reconciled", "error"}
    for outcome in outcomes:
        assert ("dres_tool_calls_total", frozenset({("outcome", outcome)})) in got.samples


def test_metrics_on_an_empty_redis_count_no_turns(http: httpx.Client) -> None:
    got = Scrape(http.get("/metrics").text)
    assert got.total("dres_turns") == 0
    assert got.value("dres_turns_indexed") == 0


def test_metrics_need_the_bearer_token_when_one_is_set(guarded: httpx.Client) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong-token"}):
        refused = guarded.get("/metrics", headers=headers)
        assert refused.status_code == 401, refused.text
        assert refused.headers["www-authenticate"] == "Bearer"

    reply = guarded.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})

    assert reply.status_code == 200, reply.text
    assert "dres_turns_indexed" in Scrape(reply.text).families
