"""The HTTP API (docs/http-api.md) as a ``dres api`` process with the ledger on a Redis Cluster.

Its async reader is a ``redis.asyncio.cluster.RedisCluster`` and its writes go through the
worker's ``RedisCluster`` client; the turn runs on a prefork worker of the same settings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from ledger import keys
from rigs import DONE, ApiProcess, WorkerProcess, send, stop_all, think
from rigs.redis_cluster import LocalCluster
from tests.api.api_support import as_ledger, ledger_form, sse_events
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server

#: seconds an HTTP request may take (an event stream: between two chunks of it)
HTTP_TIMEOUT_S = 20.0


@pytest.fixture
def api_on_cluster(
    dres_env: dict[str, str], tmp_path: Path, script: Callable[..., str]
) -> Iterator[tuple[ApiProcess, str]]:
    """A ``dres api`` on the cluster whose default model is a two-chunk script that emails."""
    model = script([send("a@x.io", "Hi"), think(1.5), DONE], on_resume="restart")
    api = ApiProcess.start({**dres_env, "DRES_MODEL": model}, tmp_path / "api.log", ready=False)
    try:
        api.wait_ready()
        yield api, model
    finally:
        stop_all([api])
        print(f"--- api log ---\n{api.log()[-6000:]}")


def test_the_api_on_a_cluster_creates_reports_streams_and_journals_a_turn(
    api_on_cluster: tuple[ApiProcess, str],
    runtime: Runtime,
    redis_cluster: LocalCluster,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    api, model = api_on_cluster
    start_worker(overrides={"DRES_MODEL": model})
    with httpx.Client(base_url=api.url, timeout=HTTP_TIMEOUT_S) as http:
        assert http.get("/healthz").status_code == 200
        key = {"Idempotency-Key": "k-cluster-1"}
        created = http.post("/v1/turns", json={"message": "email a"}, headers=key)
        assert created.status_code == 202, created.text
        turn_id, conversation_id = created.json()["turn_id"], created.json()["conversation_id"]
        again = http.post("/v1/turns", json={"message": "email a"}, headers=key)
        assert again.json()["turn_id"] == turn_id, "the idempotency record on the cluster"

        with http.stream("GET", f"/v1/turns/{turn_id}/events") as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            streamed = list(sse_events(response))  # ends: the server closes after turn_ended

        assert as_ledger(streamed) == ledger_form(runtime.ledger.read_turn(turn_id))
        assert streamed[-1].event == "turn_ended"
        assert streamed[-1].json["status"] == "completed"
        status = http.get(f"/v1/turns/{turn_id}").json()
        assert (status["status"], status["conversation_id"]) == ("completed", conversation_id)
        assert status["runs"] >= 2 and status["chunk"] >= 1, status
        journal = http.get(f"/v1/turns/{turn_id}/journal").json()
        assert [c["tool"] for c in journal["completed"]].count("send_email") == 1
        assert journal["interrupted"] == []
        assert [m.event for m in streamed].count("tool_blocked") == 1

        assert http.get("/v1/turns/turn_missing").status_code == 404
        metrics = http.get("/metrics")  # its pipelines span masters: split by node, no MULTI
        assert metrics.status_code == 200, metrics.text
        assert "dres_turns_indexed" in metrics.text
    listed = runtime.redis.lrange(keys.conversation_turns(conversation_id), 0, -1)
    assert [t.decode() for t in listed] == [turn_id]
    holder = redis_cluster.turn_holder(turn_id)
    assert holder in range(3)


def test_conversations_on_a_cluster_are_listed_read_and_erased(
    api_on_cluster: tuple[ApiProcess, str], runtime: Runtime, redis_cluster: LocalCluster
) -> None:
    """Turns of a conversation live on several masters; the listing is one key, and the erase
    deletes every turn on its own master."""
    api, _ = api_on_cluster
    with httpx.Client(base_url=api.url, timeout=HTTP_TIMEOUT_S) as http:
        turns = []
        for n in range(4):
            created = http.post("/v1/turns", json={"message": f"m{n}", "conversation_id": "cc"})
            assert created.status_code == 202, created.text
            turns.append(created.json()["turn_id"])
            assert http.post(f"/v1/turns/{turns[-1]}/stop").status_code == 202
        http.post("/v1/turns", json={"message": "other", "conversation_id": "cd"})

        listed = http.get("/v1/conversations", params={"limit": 1}).json()
        assert [i["conversation_id"] for i in listed["items"]] == ["cd"]
        rest = http.get("/v1/conversations", params={"cursor": listed["next_cursor"]}).json()
        assert [(i["conversation_id"], i["turn_id"]) for i in rest["items"]] == [("cc", turns[-1])]
        detail = http.get("/v1/conversations/cc").json()
        assert [t["turn_id"] for t in detail["turns"]] == turns
        assert detail["title"] == "m0"

        masters = {redis_cluster.turn_holder(t) for t in turns}
        assert http.delete("/v1/conversations/cd").status_code == 409  # its turn is queued
        assert http.delete("/v1/conversations/cc").status_code == 204
        assert http.get("/v1/conversations/cc").status_code == 404
    assert not any(runtime.redis.exists(*keys.turn_keys(t)) for t in turns), masters
