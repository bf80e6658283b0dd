"""Conversations through HTTP (docs/http-api.md): the listing (newest first, paged), one
conversation's turns, and its erasure on request, refused while a turn of it has not ended."""

from __future__ import annotations

from typing import Any

import httpx
import redis
from api_support import post_turn, status_of

from ledger import keys
from rigs import Script, WorkerProcess, busy, crashed_stop, wait_until
from worker.edges.runtime import Runtime


def stop(http: httpx.Client, turn_id: str) -> None:
    """Stop a queued turn (no worker runs it): it ends cancelled at once."""
    assert http.post(f"/v1/turns/{turn_id}/stop").status_code == 202
    assert status_of(http, turn_id)["status"] == "stopped"


def listing(http: httpx.Client, **params: Any) -> dict[str, Any]:
    response = http.get("/v1/conversations", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_conversations_are_listed_newest_first_in_pages_with_their_newest_turn(
    http: httpx.Client,
) -> None:
    long = "a long first message " * 10
    a = post_turn(http, long, conversation_id="conv-a")
    post_turn(http, "second in a", conversation_id="conv-a")
    b = post_turn(http, "only message of b", conversation_id="conv-b")
    c = post_turn(http, "only message of c", conversation_id="conv-c")
    stop(http, b["turn_id"])

    first = listing(http, limit=2)
    items = first["items"]
    assert [i["conversation_id"] for i in items] == ["conv-c", "conv-b"]
    assert items[0]["turn_id"] == c["turn_id"] and items[0]["status"] == "queued"
    assert items[1]["status"] == "stopped", "the status is the newest turn's now"
    assert isinstance(first["next_cursor"], str)

    second = listing(http, limit=2, cursor=first["next_cursor"])
    (only,) = second["items"]
    assert only["conversation_id"] == "conv-a" and only["turn_id"] != a["turn_id"]
    assert only["title"] == " ".join(long.split())[:79] + "…" and len(only["title"]) == 80
    assert second["next_cursor"] is None
    assert items[0]["updated_at"] >= items[1]["updated_at"] >= only["updated_at"]


def test_a_continue_moves_its_conversation_to_the_top_of_the_listing(
    http: httpx.Client, runtime: Runtime
) -> None:
    old = crashed_stop(runtime, conversation_id="conv-old")
    post_turn(http, "newer", conversation_id="conv-new")
    assert [i["conversation_id"] for i in listing(http)["items"]] == ["conv-new", "conv-old"]
    assert http.post(f"/v1/turns/{old}/continue", json={"auto": False}).status_code == 202
    assert [i["conversation_id"] for i in listing(http)["items"]] == ["conv-old", "conv-new"]


def test_a_conversation_shows_its_turns_in_order_and_which_one_can_continue(
    http: httpx.Client,
) -> None:
    first = post_turn(http, "first", conversation_id="conv-1")["turn_id"]
    stop(http, first)
    second = post_turn(http, "second", conversation_id="conv-1")["turn_id"]
    stop(http, second)

    response = http.get("/v1/conversations/conv-1")
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["conversation_id"], body["title"]) == ("conv-1", "first")
    message_ids = [turn.pop("message_id") for turn in body["turns"]]
    assert all(m.startswith("msg_") for m in message_ids) and len(set(message_ids)) == 2
    assert body["turns"] == [
        {
            "turn_id": first,
            "message": "first",
            "status": "stopped",
            "code": "cancelled",
            "can_continue": False,  # only the conversation's newest stop
            "replaced_by": None,
        },
        {
            "turn_id": second,
            "message": "second",
            "status": "stopped",
            "code": "cancelled",
            "can_continue": True,
            "replaced_by": None,
        },
    ]


def test_an_unknown_conversation_is_404_to_read_and_to_delete(http: httpx.Client) -> None:
    for method in ("GET", "DELETE"):
        response = http.request(method, "/v1/conversations/conv-nobody")
        assert response.status_code == 404, response.text
        assert "conv-nobody" in response.json()["detail"]
    assert http.get("/v1/conversations/bad{id}").status_code == 422


def test_deleting_a_running_conversation_is_refused_and_after_its_end_erases_it(
    worker: WorkerProcess, http: httpx.Client, script: Script, rdb: redis.Redis
) -> None:
    done = post_turn(http, "earlier", conversation_id="conv-run")["turn_id"]
    # the worker may have taken it already (then it stops at its next safe point)
    assert http.post(f"/v1/turns/{done}/stop").status_code == 202
    wait_until(lambda: status_of(http, done)["status"] == "stopped", what="the earlier stopped")
    turn_id = post_turn(http, conversation_id="conv-run", model=script(busy(40)))["turn_id"]
    wait_until(lambda: status_of(http, turn_id)["status"] == "running", what="the turn running")

    refused = http.delete("/v1/conversations/conv-run")
    assert refused.status_code == 409, refused.text
    assert turn_id in refused.json()["detail"] and "running" in refused.json()["detail"]
    assert http.get(f"/v1/turns/{done}").status_code == 200, "a refused delete erases nothing"

    assert http.post(f"/v1/turns/{turn_id}/stop").status_code == 202
    wait_until(lambda: status_of(http, turn_id)["status"] == "stopped", what="the turn stopped")
    deleted = http.delete("/v1/conversations/conv-run")
    assert deleted.status_code == 204, deleted.text
    assert deleted.content == b""

    assert http.get("/v1/conversations/conv-run").status_code == 404
    assert listing(http)["items"] == []
    for erased in (done, turn_id):
        assert http.get(f"/v1/turns/{erased}").status_code == 404
        assert not rdb.exists(*keys.turn_keys(erased))
        assert rdb.zscore(keys.active_turns(), erased) is None
    assert not rdb.exists(keys.conversation_turns("conv-run"), keys.conversation_meta("conv-run"))
    again = http.post("/v1/turns", json={"message": "hello?", "conversation_id": "conv-run"})
    assert again.status_code == 409, "an erased conversation's id starts no new one"
    assert "deleted" in again.json()["detail"]
