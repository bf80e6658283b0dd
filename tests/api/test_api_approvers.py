"""Approvers are who their token says (docs/http-api.md, "Who may call"; issue 38): with
DRES_APPROVER_TOKENS set only an approver's token decides an approval, the API token (the turn's
caller) gets 403 there, and the decision's ``by`` is the approver's NAME; an approver's token
reads every GET route and writes nothing else. On the session's real ``dres api`` with
DRES_API_TOKEN and two approvers; turns wait by the in-process harness on its Redis.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from api_support import APPROVERS, TOKEN, Approvals, redis_state

from ledger.events import ApprovalDecided

pytestmark = pytest.mark.redis_server

CALLER = {"Authorization": f"Bearer {TOKEN}"}
ANA = {"Authorization": f"Bearer {APPROVERS['ana']}"}


@pytest.fixture
def ap(rdb: redis.Redis, tmp_path: Path, dres_env: dict[str, str]) -> Approvals:
    return Approvals(rdb, tmp_path)


def decisions(ap: Approvals, turn_id: str) -> list[ApprovalDecided]:
    return [e for e in ap.events(turn_id, "approval_decided") if isinstance(e, ApprovalDecided)]


def decide(
    client: httpx.Client, ap: Approvals, headers: dict[str, str], **extra: Any
) -> tuple[str, httpx.Response]:
    """A new waiting turn, and the answer to approving its request with ``headers``."""
    turn_id, request = ap.wait()
    body = {"decision": "approve", "signature": request.signature, **extra}
    path = f"/v1/turns/{turn_id}/approvals/{request.approval_id}"
    return turn_id, client.post(path, json=body, headers=headers)


def test_the_api_token_alone_gets_403_on_a_decision_and_nothing_is_decided(
    approving: httpx.Client, ap: Approvals
) -> None:
    turn_id, reply = decide(approving, ap, CALLER)

    assert reply.status_code == 403, reply.text
    assert "approver" in reply.json()["detail"]
    assert decisions(ap, turn_id) == []
    assert ap.h.lifecycle.store.meta(turn_id).status == "waiting"


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer " + "n" * 40}], ids=["no-token", "unknown-token"]
)
def test_a_decision_without_an_approvers_token_is_401(
    approving: httpx.Client, ap: Approvals, headers: dict[str, str]
) -> None:
    turn_id, reply = decide(approving, ap, headers)
    assert reply.status_code == 401, reply.text
    assert reply.headers["www-authenticate"] == "Bearer"
    assert decisions(ap, turn_id) == []


@pytest.mark.parametrize("by", [None, "ana"], ids=["by-left-out", "by-the-name"])
def test_an_approvers_decision_is_recorded_by_the_tokens_name(
    approving: httpx.Client, ap: Approvals, by: str | None
) -> None:
    turn_id, reply = decide(approving, ap, ANA, **({} if by is None else {"by": by}))

    assert reply.status_code == 202, reply.text
    (decided,) = decisions(ap, turn_id)
    assert (decided.decision, decided.by) == ("approve", "ana")
    assert ap.finish(turn_id) == "completed"


def test_an_approvers_decision_whose_by_names_another_is_422_naming_by(
    approving: httpx.Client, ap: Approvals
) -> None:
    turn_id, reply = decide(approving, ap, ANA, by="ops")

    assert reply.status_code == 422, reply.text
    assert reply.json()["detail"].startswith("by:")
    assert decisions(ap, turn_id) == []


def test_an_approvers_token_reads_every_get_route_and_makes_no_other_write(
    approving: httpx.Client, ap: Approvals, rdb: redis.Redis
) -> None:
    turn_id, _ = ap.wait()
    conversation_id = ap.h.lifecycle.store.meta(turn_id).conversation_id
    reads = [
        "/v1/approvals",
        "/v1/conversations",
        f"/v1/conversations/{conversation_id}",
        f"/v1/turns/{turn_id}",
        f"/v1/turns/{turn_id}/journal",
        "/metrics",
        "/openapi.json",
    ]
    for path in reads:
        assert approving.get(path, headers=ANA).status_code == 200, path
        assert approving.get(path).status_code == 401, path
    before = redis_state(rdb)

    writes = [
        approving.post("/v1/turns", json={"message": "hi"}, headers=ANA),
        approving.post(f"/v1/turns/{turn_id}/stop", headers=ANA),
        approving.post(f"/v1/turns/{turn_id}/continue", json={}, headers=ANA),
        approving.delete(f"/v1/conversations/{conversation_id}", headers=ANA),
    ]

    for reply in writes:
        assert reply.status_code == 403, (reply.request.url, reply.text)
        assert "API token" in reply.json()["detail"]
    assert redis_state(rdb) == before
    created = approving.post("/v1/turns", json={"message": "hi"}, headers=CALLER)
    assert created.status_code == 202, created.text
