"""Requests to the HTTP API (docs/http-api.md, docs/http-api.md): idempotent enqueue, the bearer
token, bad input.

No worker runs here: an enqueued turn stays queued, so Redis changes only when the API writes,
and a rejected request can be shown to have written nothing at all (every key, every value).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import httpx
import redis
from api_support import TOKEN, check_bad_input, redis_state, turn_count

from ledger import keys
from worker.base.settings import Settings
from worker.edges.http.app import MAX_BODY_BYTES
from worker.edges.http.schemas import MAX_MESSAGE_CHARS

UNKNOWN = "turn_does_not_exist"


def queued_messages(client: redis.Redis, settings: Settings) -> int:
    """Chunk messages waiting in the broker's queues (no worker consumes them here)."""
    return int(client.llen(settings.foreground_queue) + client.llen(settings.background_queue))


# -- Idempotency-Key ----------------------------------------------------------------------------


def test_a_repeated_post_with_the_same_idempotency_key_and_body_returns_the_same_turn(
    http: httpx.Client, rdb: redis.Redis, settings: Settings
) -> None:
    body = {"message": "send the report", "conversation_id": "conv-idem"}
    headers = {"Idempotency-Key": "key-1"}
    first = http.post("/v1/turns", json=body, headers=headers)
    again = http.post("/v1/turns", json=body, headers=headers)

    assert first.status_code == again.status_code == 202, (first.text, again.text)
    assert again.json() == first.json()
    assert turn_count(rdb) == 1
    assert rdb.lrange(keys.conversation_turns("conv-idem"), 0, -1) == [
        first.json()["turn_id"].encode()
    ]
    assert queued_messages(rdb, settings) == 1  # dispatched once


def test_a_repeated_idempotency_key_without_a_conversation_returns_the_generated_one(
    http: httpx.Client, rdb: redis.Redis
) -> None:
    headers = {"Idempotency-Key": "key-2"}
    first = http.post("/v1/turns", json={"message": "hello"}, headers=headers)
    again = http.post("/v1/turns", json={"message": "hello"}, headers=headers)
    assert first.status_code == again.status_code == 202
    assert again.json() == first.json()
    assert first.json()["conversation_id"]
    assert turn_count(rdb) == 1


def test_concurrent_posts_with_one_idempotency_key_all_get_the_one_turn(
    http: httpx.Client, rdb: redis.Redis, settings: Settings
) -> None:
    body = {"message": "only once", "conversation_id": "conv-race"}
    barrier = threading.Barrier(10)
    replies: list[httpx.Response | BaseException | None] = [None] * 10

    def post(i: int) -> None:
        barrier.wait()
        try:
            replies[i] = http.post("/v1/turns", json=body, headers={"Idempotency-Key": "race"})
        except BaseException as e:  # reported by the assertion below
            replies[i] = e

    threads = [threading.Thread(target=post, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)

    answers = [(r.status_code, r.json()) for r in replies if isinstance(r, httpx.Response)]
    assert len(answers) == 10, replies
    assert {status for status, _ in answers} == {202}, answers
    assert len({json.dumps(created, sort_keys=True) for _, created in answers}) == 1
    assert turn_count(rdb) == 1
    assert queued_messages(rdb, settings) == 1


def test_the_same_idempotency_key_with_a_different_body_is_refused_with_409(
    http: httpx.Client, rdb: redis.Redis
) -> None:
    headers = {"Idempotency-Key": "key-3"}
    first = http.post("/v1/turns", json={"message": "one thing"}, headers=headers)
    assert first.status_code == 202
    before = redis_state(rdb)

    other = http.post("/v1/turns", json={"message": "another thing"}, headers=headers)

    assert other.status_code == 409
    assert "Idempotency-Key" in other.json()["detail"]
    assert redis_state(rdb) == before


def test_an_idempotency_key_whose_request_was_rejected_can_still_be_used(
    http: httpx.Client, rdb: redis.Redis
) -> None:
    headers = {"Idempotency-Key": "key-4"}
    rejected = http.post("/v1/turns", json={"message": "   "}, headers=headers)
    assert rejected.status_code == 422, rejected.text
    accepted = http.post("/v1/turns", json={"message": "a real one"}, headers=headers)
    assert accepted.status_code == 202, accepted.text
    assert turn_count(rdb) == 1


# -- the bearer token ---------------------------------------------------------------------------


def test_without_the_right_bearer_token_requests_get_401_and_write_nothing(
    guarded: httpx.Client, rdb: redis.Redis
) -> None:
    before = redis_state(rdb)
    for authorization in (None, "Bearer wrong-token", f"Basic {TOKEN}", "Bearer", TOKEN):
        headers = {"Authorization": authorization} if authorization else {}
        replies = [
            guarded.post("/v1/turns", json={"message": "hi"}, headers=headers),
            guarded.get(f"/v1/turns/{UNKNOWN}", headers=headers),  # 401 before 404: no leak
            guarded.get(f"/v1/turns/{UNKNOWN}/events", headers=headers),
            guarded.post(f"/v1/turns/{UNKNOWN}/stop", headers=headers),
        ]
        for reply in replies:
            assert reply.status_code == 401, (authorization, reply.request.url, reply.text)
            assert "token" in reply.json()["detail"]
            assert reply.headers["www-authenticate"] == "Bearer"
    assert redis_state(rdb) == before


def test_with_the_bearer_token_requests_succeed(guarded: httpx.Client) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    created = guarded.post("/v1/turns", json={"message": "hi"}, headers=auth)
    assert created.status_code == 202, created.text
    turn_id = created.json()["turn_id"]
    assert guarded.get(f"/v1/turns/{turn_id}", headers=auth).status_code == 200
    assert guarded.get(f"/v1/turns/{turn_id}/journal", headers=auth).status_code == 200


def test_healthz_needs_no_token(guarded: httpx.Client) -> None:
    reply = guarded.get("/healthz")
    assert reply.status_code == 200
    assert reply.json() == {"redis": "ok", "broker": "ok", "workers": 0}


# -- bad input ----------------------------------------------------------------------------------

JSON = {"content-type": "application/json"}


def oversize_chunks() -> Iterator[bytes]:
    """A body over MAX_BODY_BYTES sent chunked, so that no Content-Length announces its size."""
    yield b'{"message": "'
    for _ in range((MAX_BODY_BYTES // 65536) + 2):
        yield b"x" * 65536
    yield b'"}'


def test_a_malformed_json_body_gets_400_naming_it_and_writes_nothing(
    http: httpx.Client, rdb: redis.Redis
) -> None:
    check_bad_input(
        http,
        rdb,
        {
            "turns": (
                "POST",
                "/v1/turns",
                {"content": b'{"message": "hi",', "headers": JSON},
                400,
                ["malformed JSON"],
            ),
            "continue": (
                "POST",
                "/v1/turns/{turn}/continue",
                {"content": b"{auto: true}", "headers": JSON},
                400,
                ["malformed JSON"],
            ),
        },
    )


def test_an_unknown_turn_gets_404_naming_it_on_every_route_and_writes_nothing(
    http: httpx.Client, rdb: redis.Redis
) -> None:
    check_bad_input(
        http,
        rdb,
        {
            "get": ("GET", f"/v1/turns/{UNKNOWN}", {}, 404, [UNKNOWN]),
            "journal": ("GET", f"/v1/turns/{UNKNOWN}/journal", {}, 404, [UNKNOWN]),
            "events": ("GET", f"/v1/turns/{UNKNOWN}/events", {}, 404, [UNKNOWN]),
            "continue": (
                "POST",
                f"/v1/turns/{UNKNOWN}/continue",
                {"json": {"auto": False}},
                404,
                [UNKNOWN],
            ),
            "stop": ("POST", f"/v1/turns/{UNKNOWN}/stop", {}, 404, [UNKNOWN]),
        },
    )


def test_an_oversize_message_gets_422_and_an_oversize_body_413_and_neither_writes(
    http: httpx.Client, rdb: redis.Redis
) -> None:
    check_bad_input(
        http,
        rdb,
        {
            "message": (
                "POST",
                "/v1/turns",
                {"json": {"message": "x" * (MAX_MESSAGE_CHARS + 1)}},
                422,
                ["message", str(MAX_MESSAGE_CHARS)],
            ),
            "body": (
                "POST",
                "/v1/turns",
                {"json": {"message": "hi", "model": "x" * (MAX_BODY_BYTES + 1)}},
                413,
                [str(MAX_BODY_BYTES), "bytes"],
            ),
            "chunked body": (
                "POST",
                "/v1/turns",
                {"content": oversize_chunks, "headers": JSON},
                413,
                [str(MAX_BODY_BYTES), "bytes"],
            ),
        },
    )


def test_an_invalid_field_gets_422_naming_the_field_and_writes_nothing(
    http: httpx.Client, rdb: redis.Redis
) -> None:
    check_bad_input(
        http,
        rdb,
        {
            "blank message": (
                "POST",
                "/v1/turns",
                {"json": {"message": " \n\t "}},
                422,
                ["message"],
            ),
            "missing message": (
                "POST",
                "/v1/turns",
                {"json": {"mode": "background"}},
                422,
                ["message"],
            ),
            "unknown model kind": (
                "POST",
                "/v1/turns",
                {"json": {"message": "hi", "model": "bogus:x"}},
                422,
                ["bogus:x"],
            ),
            "missing script file": (
                "POST",
                "/v1/turns",
                {"json": {"message": "hi", "model": "scripted:/no/such/script.json"}},
                422,
                ["/no/such/script.json"],
            ),
            "invalid mode": (
                "POST",
                "/v1/turns",
                {"json": {"message": "hi", "mode": "urgent"}},
                422,
                ["mode", "foreground", "background"],
            ),
            "unknown field": (
                "POST",
                "/v1/turns",
                {"json": {"message": "hi", "priority": 1}},
                422,
                ["priority"],
            ),
            "conversation id": (
                "POST",
                "/v1/turns",
                {"json": {"message": "hi", "conversation_id": "a{b}c"}},
                422,
                ["conversation_id"],
            ),
            "idempotency key": (
                "POST",
                "/v1/turns",
                {"json": {"message": "hi"}, "headers": {"Idempotency-Key": "no spaces {here}"}},
                422,
                ["idempotency-key"],
            ),
            "continue body": (
                "POST",
                "/v1/turns/{turn}/continue",
                {"json": {"auto": [1]}},
                422,
                ["auto"],
            ),
        },
    )


def test_a_bad_last_event_id_or_after_gets_422_naming_it(
    http: httpx.Client, rdb: redis.Redis
) -> None:
    check_bad_input(
        http,
        rdb,
        {
            "Last-Event-ID": (
                "GET",
                "/v1/turns/{turn}/events",
                {"headers": {"Last-Event-ID": "banana"}},
                422,
                ["Last-Event-ID", "banana", "stream id"],
            ),
            "after": (
                "GET",
                "/v1/turns/{turn}/events",
                {"params": {"after": "12-x"}},
                422,
                ["after", "12-x", "stream id"],
            ),
            # the stateful fuzz found it: digits past 64 bits broke the stream mid-response
            "after past 64 bits": (
                "GET",
                "/v1/turns/{turn}/events",
                {"params": {"after": "24871187205771800621377-0"}},
                422,
                ["after", "24871187205771800621377", "stream id"],
            ),
            # 20 digits: the document's bound (19 a part, always under 2**64), kept by the route
            "Last-Event-ID of 20 digits": (
                "GET",
                "/v1/turns/{turn}/events",
                {"headers": {"Last-Event-ID": "3-10000000000000000000"}},
                422,
                ["3-10000000000000000000", "at most 19 digits"],
            ),
        },
    )


def test_a_listing_cursor_with_thousands_of_digits_gets_422_naming_it(
    http: httpx.Client, rdb: redis.Redis
) -> None:
    """A cursor past what a score holds is a 422 JSON error on both listings, never a 500."""
    cursor = {"params": {"cursor": "1" * 5000 + ":x"}}
    check_bad_input(
        http,
        rdb,
        {
            "conversations": ("GET", "/v1/conversations", cursor, 422, ["cursor"]),
            "approvals": ("GET", "/v1/approvals", cursor, 422, ["cursor"]),
        },
    )


# -- what the API does not serve ----------------------------------------------------------------


def test_a_method_a_path_lacks_gets_405_whose_allow_lists_the_methods_it_has(
    http: httpx.Client,
) -> None:
    """405's ``Allow`` names every method of the path, across the routes that share it."""
    allowed = {
        ("PUT", "/v1/turns"): "POST",
        ("DELETE", "/v1/turns/turn_x"): "GET",
        ("GET", "/v1/turns/turn_x/stop"): "POST",
        ("POST", "/v1/conversations/conv_x"): "DELETE, GET",
        ("POST", "/healthz"): "GET",
    }
    for (method, path), allow in allowed.items():
        reply = http.request(method, path)
        assert reply.status_code == 405, (method, path, reply.text)
        assert reply.headers["allow"] == allow, (method, path)
        assert reply.json() == {"detail": "Method Not Allowed"}


def test_there_is_no_swagger_ui_or_redoc_and_the_document_is_served(
    guarded: httpx.Client,
) -> None:
    """``/docs`` and ``/redoc`` (pages that load scripts from a CDN, open without the token) are
    404; ``/openapi.json`` is the document, behind the token."""
    for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        assert guarded.get(path).status_code == 404, path
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert guarded.get("/openapi.json", headers=auth).json()["info"]["title"] == "dres"
