"""``POST /v1/turns/{turn_id}/tool-outputs/{call_id}`` (docs/http-api.md): a client's output of a
call of a tool it runs, recorded once, resuming the turn; ``GET /v1/turns/{id}`` says what a
waiting turn waits on. Turns are made to wait by the in-process harness on the test's Redis."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import redis
from api_support import DONE_STEP, Approvals, redis_state, status_of

from ledger.events import ToolDone, ToolStart

pytestmark = pytest.mark.redis_server

ASK = {"text": "Asking.", "tool_calls": [{"name": "ask_user", "input": {"question": "Red?"}}]}


def asked(ap: Approvals) -> tuple[str, str]:
    turn_id, _ = ap.h.start([ASK, DONE_STEP]), None
    assert ap.h.run_next() is None
    (start,) = [e for e in ap.events(turn_id) if isinstance(e, ToolStart)]
    assert start.call_id is not None
    return turn_id, start.call_id


def test_a_waiting_turn_says_it_waits_on_the_clients_call(
    http: httpx.Client, rdb: redis.Redis, tmp_path: Path
) -> None:
    turn_id, call_id = asked(Approvals(rdb, tmp_path))

    status = status_of(http, turn_id)

    assert (status["status"], status["waiting_for"]) == ("waiting", "client_tool")
    assert status["awaiting"] == [{"call_id": call_id, "tool": "ask_user"}]


def test_the_output_is_recorded_once_and_the_turn_resumes(
    http: httpx.Client, rdb: redis.Redis, tmp_path: Path
) -> None:
    ap = Approvals(rdb, tmp_path)
    turn_id, call_id = asked(ap)
    url = f"/v1/turns/{turn_id}/tool-outputs/{call_id}"

    first = http.post(url, json={"output": {"answer": "red"}})
    again = http.post(url, json={"output": {"answer": "blue"}})

    assert first.status_code == 202, first.text
    assert first.json()["run_id"] and status_of(http, turn_id)["status"] == "resuming"
    assert again.status_code == 409 and "already answered" in again.json()["detail"]
    (done,) = [e for e in ap.events(turn_id) if isinstance(e, ToolDone)]
    assert (done.call_id, done.result, done.is_error) == (call_id, {"answer": "red"}, False)
    assert ap.finish(turn_id) == "completed"


def test_an_output_for_a_call_the_turn_does_not_wait_on_is_a_409_naming_what_it_waits_on(
    http: httpx.Client, rdb: redis.Redis, tmp_path: Path
) -> None:
    turn_id, call_id = asked(Approvals(rdb, tmp_path))
    before = redis_state(rdb)

    response = http.post(f"/v1/turns/{turn_id}/tool-outputs/call-nobody", json={"output": 1})

    assert response.status_code == 409
    assert call_id in response.json()["detail"] and "ask_user" in response.json()["detail"]
    assert redis_state(rdb) == before


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/v1/turns/turn-nobody/tool-outputs/c1", {"output": 1}, 404),
        ("/v1/turns/t1/tool-outputs/bad{id}", {"output": 1}, 422),
        ("/v1/turns/t1/tool-outputs/c1", {"output": 1, "more": 2}, 422),
        ("/v1/turns/t1/tool-outputs/c1", {}, 422),
        ("/v1/turns/t1/tool-outputs/c1", {"output": 1, "is_error": "maybe"}, 422),
    ],
)
def test_an_output_for_no_turn_or_with_a_bad_body_is_refused(
    http: httpx.Client, path: str, body: dict[str, object], status: int
) -> None:
    assert http.post(path, json=body).status_code == status


def test_a_turn_waiting_on_its_timer_says_so_and_when_it_wakes(
    http: httpx.Client, rdb: redis.Redis, tmp_path: Path
) -> None:
    ap = Approvals(rdb, tmp_path)
    wake_at = ap.h.clock.t + 3600
    remind = {"name": "remind_at", "input": {"at": wake_at, "label": "a"}}
    turn_id = ap.h.start([{"text": "", "tool_calls": [remind]}, DONE_STEP])
    assert ap.h.run_next() is None

    status = status_of(http, turn_id)

    assert (status["status"], status["waiting_for"]) == ("waiting", "timer")
    assert status["wake_at"] == pytest.approx(wake_at, abs=1e-3) and status["awaiting"] == []
    answered = http.post(f"/v1/turns/{turn_id}/tool-outputs/call-x", json={"output": 1})
    assert answered.status_code == 409 and "does not wait on call" in answered.json()["detail"]
