"""The fork route and a conversation's one live turn over HTTP (docs/http-api.md): what each answers
and what it records, with no worker running (turns stay where the API leaves them)."""

from __future__ import annotations

import httpx
import pytest
import redis
from api_support import post_turn, redis_state, status_of

from rigs import crashed_stop
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server


def conversation(http: httpx.Client, conversation_id: str) -> list[dict[str, object]]:
    response = http.get(f"/v1/conversations/{conversation_id}")
    assert response.status_code == 200, response.text
    turns: list[dict[str, object]] = response.json()["turns"]
    return turns


def test_a_second_message_is_queued_behind_the_live_turn(http: httpx.Client) -> None:
    first = post_turn(http, "one", conversation_id="conv-q")
    second = post_turn(http, "two", conversation_id="conv-q")

    assert status_of(http, first["turn_id"])["status"] == "queued"  # sent, no worker yet
    assert status_of(http, second["turn_id"])["status"] == "queued"  # held behind it
    assert [t["message"] for t in conversation(http, "conv-q")] == ["one", "two"]


def test_reject_is_a_409_naming_the_live_turn_and_records_nothing(
    http: httpx.Client, rdb: redis.Redis
) -> None:
    first = post_turn(http, "one", conversation_id="conv-r")
    before = redis_state(rdb)

    refused = http.post(
        "/v1/turns", json={"message": "two", "conversation_id": "conv-r", "double_text": "reject"}
    )

    assert refused.status_code == 409, refused.text
    assert first["turn_id"] in refused.json()["detail"]
    assert redis_state(rdb) == before


def test_interrupt_stops_the_live_turn_as_superseded(http: httpx.Client) -> None:
    first = post_turn(http, "one", conversation_id="conv-i")

    post_turn(http, "two", conversation_id="conv-i", double_text="interrupt")

    stopped = status_of(http, first["turn_id"])
    assert (stopped["status"], stopped["code"], stopped["can_continue"]) == (
        "stopped",
        "superseded",
        False,
    )


def test_the_newest_message_sent_again_is_the_same_turn_and_its_id_on_other_text_is_a_409(
    http: httpx.Client,
) -> None:
    first = post_turn(http, "hello", conversation_id="conv-m", message_id="m-1")
    again = post_turn(http, "hello", conversation_id="conv-m", message_id="m-1")
    assert again["turn_id"] == first["turn_id"]
    edited = http.post(
        "/v1/turns", json={"message": "hi", "conversation_id": "conv-m", "message_id": "m-1"}
    )
    assert edited.status_code == 409 and "fork" in edited.json()["detail"]
    assert conversation(http, "conv-m")[0]["message_id"] == "m-1"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"message_id": "bad id"}, "message_id"),
        ({"double_text": "later"}, "double_text"),
    ],
)
def test_a_bad_message_id_or_double_text_is_a_422_naming_it(
    http: httpx.Client, body: dict[str, str], field: str
) -> None:
    response = http.post("/v1/turns", json={"message": "x", **body})
    assert response.status_code == 422 and field in response.json()["detail"]


def test_a_fork_replaces_the_turn_and_later_ones_and_lists_them(
    http: httpx.Client, runtime: Runtime
) -> None:
    first = crashed_stop(runtime, conversation_id="conv-f")
    second = post_turn(http, "then this", conversation_id="conv-f")["turn_id"]

    response = http.post(f"/v1/turns/{first}/fork", json={"message": "do it differently"})

    assert response.status_code == 202, response.text
    fork = response.json()
    assert fork["conversation_id"] == "conv-f" and fork["replaces"] == [first, second]
    assert fork["events_url"] == f"/v1/turns/{fork['turn_id']}/events"
    turns = conversation(http, "conv-f")
    assert [(t["turn_id"], t["replaced_by"]) for t in turns] == [
        (first, fork["turn_id"]),
        (second, fork["turn_id"]),
        (fork["turn_id"], None),
    ]
    assert status_of(http, second)["code"] == "superseded"  # it was queued: stopped first
    assert turns[-1]["message"] == "do it differently"


def test_a_fork_into_a_new_conversation_leaves_the_source_alone(
    http: httpx.Client, runtime: Runtime
) -> None:
    first = crashed_stop(runtime, conversation_id="conv-n")

    fork = http.post(f"/v1/turns/{first}/fork", json={"conversation": "new"}).json()

    assert fork["conversation_id"] != "conv-n" and fork["replaces"] == [first]
    assert [t["replaced_by"] for t in conversation(http, "conv-n")] == [None]
    assert [t["turn_id"] for t in conversation(http, fork["conversation_id"])] == [fork["turn_id"]]


def test_a_fork_into_a_new_conversation_of_a_live_turn_is_a_409(http: httpx.Client) -> None:
    live = post_turn(http, "one", conversation_id="conv-l")["turn_id"]
    response = http.post(f"/v1/turns/{live}/fork", json={"conversation": "new"})
    assert response.status_code == 409 and live in response.json()["detail"]


@pytest.mark.parametrize(
    ("turn", "body", "status"),
    [
        ("turn-nobody", {}, 404),
        ("bad{id}", {}, 422),
        ("real", {"message": "  "}, 422),
        ("real", {"conversation": "other"}, 422),
        ("real", {"unknown": 1}, 422),
    ],
)
def test_a_fork_of_no_turn_or_with_a_bad_body_is_refused(
    http: httpx.Client, runtime: Runtime, turn: str, body: dict[str, object], status: int
) -> None:
    target = crashed_stop(runtime, conversation_id="conv-b") if turn == "real" else turn
    response = http.post(f"/v1/turns/{target}/fork", json=body)
    assert response.status_code == status, response.text
