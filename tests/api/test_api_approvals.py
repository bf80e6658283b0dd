"""Approvals through HTTP (docs/semantics.md, docs/http-api.md): the decide route, GET
/v1/approvals, a waiting turn's status, Stop, Continue and a new message on it, the metrics and the
OpenAPI document.

Turns are made to wait by the in-process harness on the API's Redis (``api_support.Approvals``:
a worker's chunk path with DRES_APPROVAL=send_email), so no worker is needed for the routes; the
run a decision queues is run by the harness too where the test needs the turn's end. One test
runs the whole way on a real ``dres worker``.
"""

from __future__ import annotations

import json
import queue
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from api_support import (
    DONE_STEP,
    SEND_STEP,
    TOKEN,
    Approvals,
    post_turn,
    status_of,
)

from ledger.events import ApprovalDecided, TurnStarted
from ledger.store import Ledger
from rigs import EMAIL, Script, context_of, wait_until
from rigs.scrape import Scrape
from tests.support.fixtures import StartWorker
from worker.demo_tools import outbox

pytestmark = pytest.mark.redis_server

OTHER = {"to": "bob@example.com", "subject": "Other", "body": "b"}
TWO_SENDS = {
    "text": "Sending two.",
    "tool_calls": [
        {"name": "send_email", "input": EMAIL},
        {"name": "send_email", "input": OTHER},
    ],
}


@pytest.fixture
def ap(rdb: redis.Redis, tmp_path: Path, dres_env: dict[str, str]) -> Approvals:
    return Approvals(rdb, tmp_path)


def decide(http: httpx.Client, turn_id: str, approval_id: str, **body: Any) -> httpx.Response:
    return http.post(f"/v1/turns/{turn_id}/approvals/{approval_id}", json=body)


def sent(client: redis.Redis) -> list[str]:
    """Whom the demo tools' send_email sent to, in order."""
    return [message["to"] for message in outbox(client)]


def decisions(ap: Approvals, turn_id: str) -> list[ApprovalDecided]:
    return [e for e in ap.events(turn_id, "approval_decided") if isinstance(e, ApprovalDecided)]


# -- POST /v1/turns/{turn_id}/approvals/{approval_id} ---------------------------------------------


def test_an_approval_answers_202_with_the_run_that_resumes_the_turn_and_records_by(
    http: httpx.Client, ap: Approvals
) -> None:
    turn_id, request = ap.wait()

    reply = decide(
        http,
        turn_id,
        request.approval_id,
        decision="approve",
        signature=request.signature,
        by="ops@example.com",
        reason="fine",
    )

    assert reply.status_code == 202, reply.text
    body = reply.json()
    meta = ap.h.lifecycle.store.meta(turn_id)
    assert body == {
        "turn_id": turn_id,
        "approval_id": request.approval_id,
        "decision": "approve",
        "detail": "approved; the turn resumes",
        "run_id": meta.next_run,
    }
    assert meta.status == "resuming" and body["run_id"]
    (decided,) = decisions(ap, turn_id)
    assert (decided.decision, decided.by, decided.reason) == ("approve", "ops@example.com", "fine")
    # the run it queued runs the approved call once, with exactly the approved input
    assert ap.finish(turn_id) == "completed"
    assert sent(ap.h.client) == [EMAIL["to"]]


def test_a_decision_without_by_is_recorded_as_by_api_and_one_of_two_keeps_the_turn_waiting(
    http: httpx.Client, ap: Approvals
) -> None:
    turn_id, _ = ap.wait([TWO_SENDS, DONE_STEP])
    first, second = ap.requests(turn_id)

    reply = decide(http, turn_id, first.approval_id, decision="deny", signature=first.signature)

    assert reply.status_code == 202, reply.text
    assert reply.json()["run_id"] is None
    assert reply.json()["detail"] == "denied; 1 request(s) still open"
    assert status_of(http, turn_id)["status"] == "waiting"
    (decided,) = decisions(ap, turn_id)
    assert (decided.decision, decided.by, decided.reason) == ("deny", "api", "")

    last = decide(http, turn_id, second.approval_id, decision="approve", signature=second.signature)
    assert last.status_code == 202 and last.json()["run_id"], last.text
    assert ap.finish(turn_id) == "completed"
    assert sent(ap.h.client) == [OTHER["to"]]  # the denied one never ran


def test_a_second_decision_is_refused_with_409_naming_the_first(
    http: httpx.Client, ap: Approvals
) -> None:
    turn_id, request = ap.wait([TWO_SENDS, DONE_STEP])
    request = ap.requests(turn_id)[0]  # the turn still waits on the other one afterwards
    assert (
        decide(
            http, turn_id, request.approval_id, decision="approve", signature=request.signature
        ).status_code
        == 202
    )

    for decision in ("deny", "approve"):
        again = decide(
            http, turn_id, request.approval_id, decision=decision, signature=request.signature
        )
        assert again.status_code == 409, again.text
        assert again.json()["detail"] == (
            f"approval {request.approval_id} was already decided: approve"
        )
    assert len(decisions(ap, turn_id)) == 1


def test_a_decision_for_another_signature_is_refused_with_409_and_changes_nothing(
    http: httpx.Client, ap: Approvals, rdb: redis.Redis
) -> None:
    turn_id, request = ap.wait()
    other = "0" * 64

    reply = decide(http, turn_id, request.approval_id, decision="approve", signature=other)

    assert reply.status_code == 409, reply.text
    assert "signature" in reply.json()["detail"] and other in reply.json()["detail"]
    status = status_of(http, turn_id)
    assert status["status"] == "waiting"
    assert [a["decision"] for a in status["approvals"]] == [None]
    assert decisions(ap, turn_id) == []


def test_a_decision_on_a_turn_that_is_not_waiting_is_refused_with_409(
    http: httpx.Client, ap: Approvals
) -> None:
    queued = post_turn(http)["turn_id"]  # no worker: it stays queued
    reply = decide(http, queued, "apr_1", decision="approve", signature="a" * 64)
    assert reply.status_code == 409, reply.text
    assert "not waiting" in reply.json()["detail"] and "queued" in reply.json()["detail"]

    turn_id, request = ap.wait()
    assert http.post(f"/v1/turns/{turn_id}/stop").status_code == 202
    stopped = decide(
        http, turn_id, request.approval_id, decision="approve", signature=request.signature
    )
    assert stopped.status_code == 409, stopped.text
    assert "already decided: voided" in stopped.json()["detail"]


def test_a_decision_on_an_unknown_turn_or_request_is_404(http: httpx.Client, ap: Approvals) -> None:
    unknown = decide(http, "turn_nope", "apr_1", decision="approve", signature="a" * 64)
    assert unknown.status_code == 404, unknown.text
    assert "turn_nope" in unknown.json()["detail"]

    turn_id, request = ap.wait()
    missing = decide(http, turn_id, "apr_nope", decision="approve", signature=request.signature)
    assert missing.status_code == 404, missing.text
    assert "apr_nope" in missing.json()["detail"]
    assert status_of(http, turn_id)["status"] == "waiting"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param({"decision": "maybe"}, "decision", id="decision-maybe"),
        pytest.param({"signature": "abc"}, "signature", id="signature-short"),
        pytest.param({"signature": "G" * 64}, "signature", id="signature-not-hex"),
        pytest.param({"extra": 1}, "extra", id="unknown-field"),
        pytest.param({"by": ""}, "by", id="by-empty"),
    ],
)
def test_a_malformed_decision_is_422_naming_the_field(
    http: httpx.Client, ap: Approvals, body: dict[str, Any], field: str
) -> None:
    turn_id, request = ap.wait()
    good = {"decision": "approve", "signature": request.signature}

    reply = decide(http, turn_id, request.approval_id, **{**good, **body})

    assert reply.status_code == 422, reply.text
    assert field in str(reply.json()["detail"])
    assert status_of(http, turn_id)["status"] == "waiting" and decisions(ap, turn_id) == []


def test_decisions_need_the_bearer_token_when_one_is_set(
    guarded: httpx.Client, ap: Approvals
) -> None:
    turn_id, request = ap.wait()
    body = {"decision": "approve", "signature": request.signature}
    path = f"/v1/turns/{turn_id}/approvals/{request.approval_id}"

    for headers in ({}, {"Authorization": "Bearer wrong-token"}):
        assert guarded.post(path, json=body, headers=headers).status_code == 401
        assert guarded.get("/v1/approvals", headers=headers).status_code == 401
    assert decisions(ap, turn_id) == []

    accepted = guarded.post(path, json=body, headers={"Authorization": f"Bearer {TOKEN}"})
    assert accepted.status_code == 202, accepted.text


def test_concurrent_decisions_on_one_request_get_exactly_one_202(
    http: httpx.Client, ap: Approvals
) -> None:
    turn_id, request = ap.wait()
    n = 12
    barrier = threading.Barrier(n)
    replies: list[httpx.Response | BaseException | None] = [None] * n

    def ask(i: int) -> None:
        barrier.wait()
        try:
            replies[i] = decide(
                http,
                turn_id,
                request.approval_id,
                decision="approve" if i % 2 else "deny",
                signature=request.signature,
                by=f"person-{i}",
            )
        except BaseException as e:  # reported by the assertions below
            replies[i] = e

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)

    codes = [getattr(reply, "status_code", reply) for reply in replies]
    assert codes.count(202) == 1 and codes.count(409) == n - 1, codes
    won = next(r for r in replies if isinstance(r, httpx.Response) and r.status_code == 202)
    (decided,) = decisions(ap, turn_id)
    assert decided.decision == won.json()["decision"]
    for reply in replies:
        if isinstance(reply, httpx.Response) and reply.status_code == 409:
            assert "already decided" in reply.json()["detail"], reply.text
    meta = ap.h.lifecycle.store.meta(turn_id)
    assert (meta.status, meta.next_run) == ("resuming", won.json()["run_id"])


# -- GET /v1/approvals -----------------------------------------------------------------------------


def test_the_list_is_newest_first_paged_and_drops_a_decided_request(
    http: httpx.Client, ap: Approvals
) -> None:
    made = [ap.wait() for _ in range(3)]
    newest_first = [request.approval_id for _, request in reversed(made)]

    whole = http.get("/v1/approvals")
    assert whole.status_code == 200, whole.text
    assert [a["approval_id"] for a in whole.json()["items"]] == newest_first
    assert whole.json()["next_cursor"] is None
    turn_id, request = made[0]
    assert whole.json()["items"][-1] == {
        "approval_id": request.approval_id,
        "turn_id": turn_id,
        "call_id": request.call_id,
        "tool": "send_email",
        "input": EMAIL,
        "signature": request.signature,
        "requested_at": request.ts,
        "expires_at": request.expires_at,
        "decision": None,
        "reason": None,
        "by": None,
        "decided_at": None,
    }

    first = http.get("/v1/approvals", params={"limit": 2, "status": "pending"}).json()
    assert [a["approval_id"] for a in first["items"]] == newest_first[:2]
    assert first["next_cursor"]
    rest = http.get("/v1/approvals", params={"limit": 2, "cursor": first["next_cursor"]}).json()
    assert [a["approval_id"] for a in rest["items"]] == newest_first[2:]
    assert rest["next_cursor"] is None

    middle_turn, middle = made[1]
    assert (
        decide(
            http, middle_turn, middle.approval_id, decision="deny", signature=middle.signature
        ).status_code
        == 202
    )
    after = http.get("/v1/approvals").json()
    assert [a["approval_id"] for a in after["items"]] == [newest_first[0], newest_first[2]]


def test_a_page_of_exactly_the_open_requests_has_no_next_cursor(
    http: httpx.Client, ap: Approvals
) -> None:
    made = [ap.wait() for _ in range(2)]
    page = http.get("/v1/approvals", params={"limit": 2}).json()
    assert len(page["items"]) == len(made) and page["next_cursor"] is None
    assert http.get("/v1/approvals").json()["items"][0]["turn_id"] == made[-1][0]


def test_the_list_pages_through_requests_of_the_same_millisecond(
    http: httpx.Client, ap: Approvals
) -> None:
    """Two turns' requests, and one turn's two: equal scores, each listed exactly once."""
    turn_id, _ = ap.wait([TWO_SENDS, DONE_STEP])
    ap.h.clock.t -= 1.0  # the next turn's requests at the same instant as these
    other, _ = ap.wait([TWO_SENDS, DONE_STEP])
    expected = {r.approval_id for t in (turn_id, other) for r in ap.requests(t)}

    seen: list[str] = []
    cursor = None
    for _ in range(5):
        params: dict[str, Any] = {"limit": 1, **({"cursor": cursor} if cursor else {})}
        page = http.get("/v1/approvals", params=params).json()
        seen += [a["approval_id"] for a in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(expected) and len(seen) == 4, seen


@pytest.mark.parametrize(
    ("params", "said"),
    [
        pytest.param({"status": "all"}, "pending", id="status-all"),
        pytest.param({"cursor": "not-a-cursor"}, "cursor", id="bad-cursor"),
        pytest.param({"limit": 0}, "limit", id="limit-0"),
        pytest.param({"cursor": "9" * 5000 + ":turn_1/apr_1"}, "cursor", id="cursor-huge-score"),
    ],
)
def test_a_bad_list_query_is_422_naming_what(
    http: httpx.Client, params: dict[str, Any], said: str
) -> None:
    reply = http.get("/v1/approvals", params=params)
    assert reply.status_code == 422, reply.text
    assert said in str(reply.json()["detail"])


# -- GET /v1/turns/{turn_id}; Continue, Stop and a new message on a waiting turn ---------------


def test_a_waiting_turns_status_lists_its_requests_then_their_decision(
    http: httpx.Client, ap: Approvals
) -> None:
    turn_id, request = ap.wait()

    waiting = status_of(http, turn_id)
    assert (waiting["status"], waiting["can_continue"], waiting["code"]) == ("waiting", False, "")
    (listed,) = waiting["approvals"]
    assert listed == http.get("/v1/approvals").json()["items"][0]  # the same fields as the list

    refused = http.post(f"/v1/turns/{turn_id}/continue", json={"auto": False})
    assert refused.status_code == 409, refused.text
    assert refused.json()["detail"]

    reply = decide(
        http,
        turn_id,
        request.approval_id,
        decision="approve",
        signature=request.signature,
        by="ops",
    )
    assert reply.status_code == 202, reply.text
    (decided,) = status_of(http, turn_id)["approvals"]
    assert (decided["decision"], decided["by"], decided["reason"]) == ("approve", "ops", "")
    assert decided["decided_at"] is not None
    assert ap.finish(turn_id) == "completed"
    assert status_of(http, turn_id)["approvals"] == [decided]


def test_stop_of_a_waiting_turn_is_202_and_the_turn_stops_cancelled_its_request_voided(
    http: httpx.Client, ap: Approvals
) -> None:
    turn_id, request = ap.wait()

    stopped = http.post(f"/v1/turns/{turn_id}/stop")

    assert stopped.status_code == 202, stopped.text
    status = status_of(http, turn_id)
    assert (status["status"], status["code"]) == ("stopped", "cancelled")
    (voided,) = status["approvals"]
    assert (voided["approval_id"], voided["decision"], voided["by"]) == (
        request.approval_id,
        "voided",
        "dres",
    )
    assert http.get("/v1/approvals").json()["items"] == []
    assert ap.events(turn_id)[-1].type == "turn_ended"

    # Continue asks again (the Stop flag does not cancel the new run)
    assert status["can_continue"] is True
    assert http.post(f"/v1/turns/{turn_id}/continue", json={"auto": False}).status_code == 202
    ap.h.turn_id, ap.h.pending = turn_id, ap.h.lifecycle.store.meta(turn_id).next_run
    assert ap.h.run_next() is None
    assert status_of(http, turn_id)["status"] == "waiting"
    assert [a["turn_id"] for a in http.get("/v1/approvals").json()["items"]] == [turn_id]


def test_a_new_message_supersedes_a_waiting_turn_and_its_note_names_the_waiting_call(
    http: httpx.Client, ap: Approvals, ledger: Ledger
) -> None:
    turn_id, _ = ap.wait(conversation_id="conv-approvals")

    new = post_turn(http, "never mind, send it tomorrow", conversation_id="conv-approvals")

    old = status_of(http, turn_id)
    assert (old["status"], old["code"], old["can_continue"]) == ("stopped", "superseded", False)
    assert [a["decision"] for a in old["approvals"]] == ["voided"]
    assert http.post(f"/v1/turns/{turn_id}/continue", json={"auto": False}).status_code == 409
    assert http.get("/v1/approvals").json()["items"] == []
    events = ledger.events(new["turn_id"])
    assert isinstance(events[0], TurnStarted)
    note = context_of(events)[1] or ""
    assert "waiting to have approved by a person" in note, note
    assert "send_email" in note and EMAIL["to"] in note, note


def test_an_expired_request_stops_the_turn_and_continue_over_http_asks_again(
    http: httpx.Client, ap: Approvals
) -> None:
    turn_id, request = ap.wait()
    ap.h.clock.t = request.expires_at  # the reaper's look at the turn, once it is due
    assert ap.h.lifecycle.expire_if_due(ap.h.lifecycle.store.meta(turn_id)).endswith(
        "approval_expired"
    )

    stopped = status_of(http, turn_id)
    assert (stopped["status"], stopped["code"], stopped["can_continue"]) == (
        "stopped",
        "approval_expired",
        True,
    )
    assert [a["decision"] for a in stopped["approvals"]] == ["expired"]
    late = decide(
        http, turn_id, request.approval_id, decision="approve", signature=request.signature
    )
    assert late.status_code == 409 and "already decided: expired" in late.json()["detail"]
    assert http.get("/v1/approvals").json()["items"] == []

    assert http.post(f"/v1/turns/{turn_id}/continue", json={"auto": False}).status_code == 202
    ap.h.turn_id, ap.h.pending = turn_id, ap.h.lifecycle.store.meta(turn_id).next_run
    assert ap.h.run_next() is None  # the same call asks again
    again = status_of(http, turn_id)
    assert again["status"] == "waiting"
    old, new = again["approvals"]
    assert (old["decision"], new["decision"]) == ("expired", None)
    assert new["approval_id"] != request.approval_id
    assert (new["call_id"], new["signature"]) == (request.call_id, request.signature)
    listed = http.get("/v1/approvals").json()["items"]
    assert [a["approval_id"] for a in listed] == [new["approval_id"]]


def test_the_webhook_is_told_each_request_with_the_url_a_decision_is_posted_to(
    http: httpx.Client, rdb: redis.Redis, tmp_path: Path, dres_env: dict[str, str]
) -> None:
    received: queue.Queue[dict[str, Any]] = queue.Queue()

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            size = int(self.headers["Content-Length"])
            received.put(json.loads(self.rfile.read(size)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    hook = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    try:
        ap = Approvals(
            rdb,
            tmp_path,
            approval_webhook=f"http://127.0.0.1:{hook.server_port}/hook",
            public_url="https://dres.example.com/",
        )
        turn_id, request = ap.wait([TWO_SENDS, DONE_STEP])
        told = [received.get(timeout=10), received.get(timeout=10)]
    finally:
        hook.shutdown()
        hook.server_close()

    listed = http.get("/v1/approvals").json()["items"]
    for body in told:
        path = f"/v1/turns/{turn_id}/approvals/{body['approval_id']}"
        assert body["turn_url"] == f"https://dres.example.com/v1/turns/{turn_id}"
        assert body["decide_url"] == f"https://dres.example.com{path}"
        fields = {k: v for k, v in body.items() if k not in ("turn_url", "decide_url")}
        (same,) = [a for a in listed if a["approval_id"] == body["approval_id"]]
        assert fields == {k: v for k, v in same.items() if v is not None}
        decision = {"decision": "approve", "signature": body["signature"]}
        assert http.post(path, json=decision).status_code == 202
    assert {b["approval_id"] for b in told} == {r.approval_id for r in ap.requests(turn_id)}
    assert request.approval_id in {b["approval_id"] for b in told}


# -- metrics and the OpenAPI document --------------------------------------------------------------


def test_the_apis_metrics_count_the_decisions_it_took_and_their_wait(
    http: httpx.Client, ap: Approvals
) -> None:
    def scrape() -> Scrape:
        reply = http.get("/metrics")
        assert reply.status_code == 200, reply.text
        return Scrape(reply.text)

    turns = [ap.wait() for _ in range(3)]
    before = scrape()
    assert before.value("dres_turns", status="waiting") == 3  # unfinished: in the index
    for (turn_id, request), decision in zip(turns[:2], ("approve", "deny"), strict=True):
        reply = decide(
            http, turn_id, request.approval_id, decision=decision, signature=request.signature
        )
        assert reply.status_code == 202, reply.text
    assert http.post(f"/v1/turns/{turns[2][0]}/stop").status_code == 202

    after = scrape()
    assert after.families["dres_approvals"] == "counter"
    assert after.families["dres_approval_wait_seconds"] == "histogram"
    for decision in ("approved", "denied", "voided"):
        name, labels = "dres_approvals_total", {"decision": decision}
        assert after.value(name, **labels) - before.value(name, **labels) == 1, decision
    expired = after.value("dres_approvals_total", decision="expired")
    assert expired == before.value("dres_approvals_total", decision="expired")
    waits = "dres_approval_wait_seconds_count"
    assert after.value(waits) - before.value(waits) == 3
    assert after.value("dres_turns", status="waiting") == 0


def test_the_openapi_document_lists_the_approval_routes_with_their_409_and_waiting(
    http: httpx.Client,
) -> None:
    doc = http.get("/openapi.json").json()
    decide_op = doc["paths"]["/v1/turns/{turn_id}/approvals/{approval_id}"]["post"]
    assert {"202", "404", "409", "422"} <= set(decide_op["responses"]), decide_op["responses"]
    listing = doc["paths"]["/v1/approvals"]["get"]
    assert "200" in listing["responses"]
    names = {p["name"] for p in listing["parameters"]}
    assert {"status", "limit", "cursor"} <= names
    schemas = doc["components"]["schemas"]
    assert "waiting" in schemas["TurnStatus"]["properties"]["status"]["enum"]
    assert set(schemas["DecisionRequest"]["properties"]) == {
        "decision",
        "signature",
        "reason",
        "by",
    }


# -- the whole way, on a real worker -------------------------------------------------------------


def test_a_turn_on_a_worker_waits_is_approved_over_http_and_sends_once(
    http: httpx.Client,
    start_worker: StartWorker,
    script: Script,
    ledger: Ledger,
    rdb: redis.Redis,
) -> None:
    start_worker(overrides={"DRES_APPROVAL": "send_email"})
    turn_id = post_turn(http, "send it", model=script([SEND_STEP, DONE_STEP]))["turn_id"]

    listed = wait_until(
        lambda: http.get("/v1/approvals").json()["items"], timeout=20, what="the request listed"
    )
    (request,) = listed
    assert (request["turn_id"], request["tool"], request["input"]) == (turn_id, "send_email", EMAIL)
    assert status_of(http, turn_id)["status"] == "waiting"
    assert outbox(rdb) == []

    reply = decide(
        http, turn_id, request["approval_id"], decision="approve", signature=request["signature"]
    )
    assert reply.status_code == 202, reply.text

    wait_until(
        lambda: status_of(http, turn_id)["status"] == "completed", timeout=20, what="completed"
    )
    assert sent(rdb) == [EMAIL["to"]]
    causes = [e.cause for e in ledger.events(turn_id) if e.type == "run_started"]  # type: ignore[union-attr]
    assert causes == ["first", "approval"]
