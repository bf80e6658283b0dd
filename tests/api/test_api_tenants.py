"""Tenants at the edges (docs/http-api.md "Tenants", docs/commands.md): a new turn's tenant from
``POST /v1/turns``' body or the ``Dres-Tenant`` header of every route that starts a turn, a bad or
a conflicting one refused, ``GET /v1/tenants/{tenant}``'s counts, and a full queue answered 429
with ``Retry-After``; the CLI's ``--tenant`` and ``dres tenant``. On the session's real ``dres
api`` servers and no worker, so every turn stays where the API leaves it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
from api_support import APPROVERS, TOKEN, Case, Cli, StartApi, check_bad_input, post_turn
from api_support import turn_count as turns_in

from ledger import keys
from ledger.events import TurnStarted
from rigs import ApiProcess
from rigs.scrape import Scrape
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server

#: the limits of the bounded server: one turn of a tenant at once, two more queued
CONCURRENCY, MAX_QUEUED = 1, 2
#: a header that names a tenant
ACME = {"Dres-Tenant": "acme"}


@pytest.fixture(scope="module")
def bounded_api(api_servers: StartApi) -> ApiProcess:
    """A ``dres api`` with tenant limits: ``CONCURRENCY`` running, ``MAX_QUEUED`` queued."""
    return api_servers(
        DRES_TENANT_CONCURRENCY=str(CONCURRENCY), DRES_TENANT_MAX_QUEUED=str(MAX_QUEUED)
    )


@pytest.fixture
def bounded(bounded_api: ApiProcess, redis_url: str) -> Iterator[httpx.Client]:
    """A client of the bounded server, on an empty Redis."""
    with httpx.Client(base_url=bounded_api.url, timeout=10) as client:
        yield client


def tenant_of(rt: Runtime, turn_id: str) -> tuple[str, str]:
    """The turn's tenant as its metadata and its ``turn_started`` event record it."""
    started = rt.ledger.events(turn_id)[0]
    assert isinstance(started, TurnStarted)
    return rt.ledger.meta(turn_id).tenant, started.tenant


def view(http: httpx.Client, tenant: str) -> dict[str, Any]:
    response = http.get(f"/v1/tenants/{tenant}")
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


def chat_body(chat_id: str) -> dict[str, Any]:
    user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}
    return {"id": chat_id, "messages": [user], "trigger": "submit-message"}


def agui_body(thread_id: str) -> dict[str, Any]:
    return {
        "threadId": thread_id,
        "runId": "run-1",
        "messages": [{"id": "u1", "role": "user", "content": "hi"}],
    }


def opened(http: httpx.Client, path: str, body: dict[str, Any], **kw: Any) -> httpx.Response:
    """POST a chat protocol's request; its stream is closed once it answered (no worker runs:
    the turn would never end), an error read whole."""
    with http.stream("POST", path, json=body, **kw) as response:
        if response.status_code != 200:
            response.read()
        return response


def newest_turn(http: httpx.Client, conversation_id: str) -> str:
    response = http.get(f"/v1/conversations/{conversation_id}")
    assert response.status_code == 200, response.text
    turn_id: str = response.json()["turns"][-1]["turn_id"]
    return turn_id


# -- which tenant a new turn belongs to ---------------------------------------------------------


def test_the_bodys_tenant_or_the_header_reaches_the_turn_the_header_winning_else_default(
    http: httpx.Client, runtime: Runtime
) -> None:
    in_body = post_turn(http, tenant="acme")["turn_id"]
    in_header = http.post("/v1/turns", json={"message": "hi"}, headers={"Dres-Tenant": "beta"})
    in_both = http.post(
        "/v1/turns", json={"message": "hi", "tenant": "acme"}, headers={"Dres-Tenant": "gamma"}
    )
    neither = post_turn(http)["turn_id"]

    assert (in_header.status_code, in_both.status_code) == (202, 202), in_header.text
    assert tenant_of(runtime, in_body) == ("acme", "acme")
    assert tenant_of(runtime, in_header.json()["turn_id"]) == ("beta", "beta")
    # a gateway's header is not overruled by the body its caller wrote
    assert tenant_of(runtime, in_both.json()["turn_id"]) == ("gamma", "gamma")
    assert tenant_of(runtime, neither) == ("default", "default")
    assert http.get(f"/v1/turns/{in_body}").json()["tenant"] == "acme"
    assert http.get(f"/v1/turns/{neither}").json()["tenant"] == "default"


def test_an_idempotency_key_repeat_is_the_same_request_when_it_names_the_same_tenant(
    http: httpx.Client,
) -> None:
    """The header's tenant counts as the body's: naming it either way repeats the request;
    naming another tenant is another request under the same key (409)."""
    key = {"Idempotency-Key": "k-tenant"}
    first = http.post("/v1/turns", json={"message": "hi", "tenant": "acme"}, headers=key)
    again = http.post("/v1/turns", json={"message": "hi"}, headers=key | ACME)
    other = http.post("/v1/turns", json={"message": "hi"}, headers=key | {"Dres-Tenant": "beta"})

    assert (first.status_code, again.status_code, other.status_code) == (202, 202, 409)
    assert again.json()["turn_id"] == first.json()["turn_id"]


def test_every_route_that_starts_a_turn_takes_the_dres_tenant_header(
    http: httpx.Client, runtime: Runtime
) -> None:
    chat = opened(http, "/v1/chat", chat_body("c-chat"), headers=ACME)
    agui = opened(http, "/v1/ag-ui", agui_body("c-agui"), headers={"Dres-Tenant": "beta"})
    assert (chat.status_code, agui.status_code) == (200, 200), chat.text + agui.text
    source = post_turn(http, conversation_id="c-fork", tenant="gamma")["turn_id"]
    assert http.post(f"/v1/turns/{source}/stop").status_code == 202  # a fork's source has ended
    named = http.post(f"/v1/turns/{source}/fork", json={"conversation": "new"}, headers=ACME)
    inherited = http.post(f"/v1/turns/{source}/fork", json={"conversation": "new"})

    assert (named.status_code, inherited.status_code) == (202, 202), named.text + inherited.text
    assert tenant_of(runtime, newest_turn(http, "c-chat")) == ("acme", "acme")
    assert tenant_of(runtime, newest_turn(http, "c-agui")) == ("beta", "beta")
    assert tenant_of(runtime, named.json()["turn_id"]) == ("acme", "acme")
    # a fork without the header is its source turn's tenant's
    assert tenant_of(runtime, inherited.json()["turn_id"]) == ("gamma", "gamma")


def test_a_bad_tenant_is_a_422_naming_its_field_and_records_nothing(
    http: httpx.Client, rdb: redis.Redis
) -> None:
    def body(tenant: Any) -> dict[str, Any]:
        return {"json": {"message": "hi", "tenant": tenant}}

    def header(value: str, **kw: Any) -> dict[str, Any]:
        return {"headers": {"Dres-Tenant": value}, **kw}

    rule = ["tenant", "1-64 characters"]
    cases: dict[str, Case] = {
        "body empty": ("POST", "/v1/turns", body(""), 422, rule),
        "body too long": ("POST", "/v1/turns", body("t" * 65), 422, rule),
        "body dots": ("POST", "/v1/turns", body(".."), 422, rule),
        "body space": ("POST", "/v1/turns", body("a b"), 422, rule),
        "body number": ("POST", "/v1/turns", body(7), 422, ["tenant"]),
        "header too long": (
            "POST",
            "/v1/turns",
            header("t" * 65, json={"message": "hi"}),
            422,
            ["Dres-Tenant", "1-64 characters"],
        ),
        "header slash": (
            "POST",
            "/v1/turns",
            header("a/b", json={"message": "hi"}),
            422,
            ["Dres-Tenant"],
        ),
        "chat header": (
            "POST",
            "/v1/chat",
            header("..", json=chat_body("c-bad")),
            422,
            ["Dres-Tenant"],
        ),
        "ag-ui header": (
            "POST",
            "/v1/ag-ui",
            header("a b", json=agui_body("c-bad")),
            422,
            ["Dres-Tenant"],
        ),
        "fork header": (
            "POST",
            "/v1/turns/{turn}/fork",
            header("t" * 65, json={}),
            422,
            ["Dres-Tenant"],
        ),
        "view too long": ("GET", "/v1/tenants/" + "t" * 65, {}, 422, rule),
        "view space": ("GET", "/v1/tenants/a%20b", {}, 422, rule),
    }
    check_bad_input(http, rdb, cases)


# -- GET /v1/tenants/{tenant} -------------------------------------------------------------------


def test_a_tenant_with_no_turns_is_known_with_zero_of_each_and_no_limits(
    http: httpx.Client,
) -> None:
    assert view(http, "nobody") == {
        "tenant": "nobody",
        "running": 0,
        "queued": 0,
        "limits": {"concurrency": None, "rate": None, "max_queued": None},
    }


def test_the_view_counts_a_tenants_turns_and_only_its_own(bounded: httpx.Client) -> None:
    for n in range(3):
        post_turn(bounded, f"task {n}", tenant="acme")
    post_turn(bounded, "another's", tenant="beta")

    acme = view(bounded, "acme")
    assert acme["running"] + acme["queued"] == 3, acme
    assert acme["running"] <= CONCURRENCY, acme
    assert acme["limits"] == {"concurrency": CONCURRENCY, "rate": None, "max_queued": MAX_QUEUED}
    beta = view(bounded, "beta")
    assert beta["running"] + beta["queued"] == 1, beta
    assert view(bounded, "nobody")["running"] == 0


def test_reading_a_tenant_wants_a_readers_token(
    guarded: httpx.Client, approving: httpx.Client
) -> None:
    assert guarded.get("/v1/tenants/acme").status_code == 401
    api = guarded.get("/v1/tenants/acme", headers={"Authorization": f"Bearer {TOKEN}"})
    assert api.status_code == 200, api.text
    # an approver reads what every GET route shows
    ana = approving.get("/v1/tenants/acme", headers={"Authorization": f"Bearer {APPROVERS['ana']}"})
    assert ana.status_code == 200, ana.text


# -- a full queue: 429 ----------------------------------------------------------------------------


def fill(http: httpx.Client, tenant: str) -> int:
    """Post turns of ``tenant`` until its view shows ``MAX_QUEUED`` queued; how many were
    accepted. Each must be: no more than the slots and the queue hold are asked for."""
    posted = 0
    while view(http, tenant)["queued"] < MAX_QUEUED:
        assert posted < CONCURRENCY + MAX_QUEUED, view(http, tenant)
        post_turn(http, f"task {posted}", tenant=tenant)
        posted += 1
    return posted


def refused_with_retry_after(response: httpx.Response) -> None:
    assert response.status_code == 429, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.headers["Retry-After"].isdigit(), response.headers
    assert int(response.headers["Retry-After"]) >= 1
    assert response.json()["detail"]


def test_a_turn_over_the_tenants_queue_is_a_429_with_retry_after_that_records_nothing(
    bounded: httpx.Client, rdb: redis.Redis
) -> None:
    posted = fill(bounded, "acme")
    turns = turns_in(rdb)

    over = bounded.post(
        "/v1/turns",
        json={"message": "one more", "tenant": "acme"},
        headers={"Idempotency-Key": "k-over"},
    )

    refused_with_retry_after(over)
    assert turns_in(rdb) == turns == posted
    assert not rdb.exists(keys.idempotency("k-over"))  # a repeat is a new request, later
    assert view(bounded, "acme")["queued"] == MAX_QUEUED
    # another tenant is not bounded by it
    assert post_turn(bounded, "another's", tenant="beta")["turn_id"]


def test_every_route_that_starts_a_turn_answers_429_for_a_full_tenant(
    bounded: httpx.Client, rdb: redis.Redis
) -> None:
    source = post_turn(bounded, "the source", tenant="beta")["turn_id"]
    assert bounded.post(f"/v1/turns/{source}/stop").status_code == 202  # a fork's source ended
    fill(bounded, "acme")
    turns = turns_in(rdb)

    replies = [
        bounded.post("/v1/turns", json={"message": "hi"}, headers=ACME),
        opened(bounded, "/v1/chat", chat_body("c-full"), headers=ACME),
        opened(bounded, "/v1/ag-ui", agui_body("c-full"), headers=ACME),
        bounded.post(f"/v1/turns/{source}/fork", json={"conversation": "new"}, headers=ACME),
    ]

    for reply in replies:
        refused_with_retry_after(reply)
    assert turns_in(rdb) == turns


# -- the document --------------------------------------------------------------------------------


def test_the_document_declares_the_header_and_the_429_on_every_route_that_starts_a_turn(
    http: httpx.Client,
) -> None:
    paths = http.get("/openapi.json").json()["paths"]
    starts = [
        ("/v1/turns", "post"),
        ("/v1/turns/{turn_id}/fork", "post"),
        ("/v1/chat", "post"),
        ("/v1/ag-ui", "post"),
    ]
    for path, method in starts:
        operation = paths[path][method]
        assert "Dres-Tenant" in [p["name"] for p in operation["parameters"]], path
        assert "Retry-After" in operation["responses"]["429"]["headers"], path
    assert "200" in paths["/v1/tenants/{tenant}"]["get"]["responses"]


# -- the CLI ---------------------------------------------------------------------------------------


def test_dres_enqueue_tenant_and_dres_tenant(cli: Cli, runtime: Runtime) -> None:
    enqueued = cli("enqueue", "hi", "--tenant", "acme")
    assert enqueued.returncode == 0, enqueued.stderr
    assert tenant_of(runtime, enqueued.stdout.strip()) == ("acme", "acme")

    as_json = cli("tenant", "acme", "--json")
    assert as_json.returncode == 0, as_json.stderr
    found = json.loads(as_json.stdout)
    assert found["tenant"] == "acme"
    assert found["running"] + found["queued"] == 1
    line = cli("tenant", "acme")
    assert line.returncode == 0, line.stderr
    assert line.stdout.startswith("acme: ") and "queued" in line.stdout


def test_the_cli_refuses_a_bad_tenant_and_a_full_queue_in_one_line(
    cli: Cli, rdb: redis.Redis
) -> None:
    for args in (("enqueue", "hi", "--tenant", "a b"), ("tenant", "..")):
        bad = cli(*args)
        assert bad.returncode == 2, bad.stderr
        assert "1-64 characters" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1

    full = {"DRES_TENANT_CONCURRENCY": "1", "DRES_TENANT_MAX_QUEUED": "1"}
    results = [cli("enqueue", f"task {n}", "--tenant", "acme", env=full) for n in range(3)]
    codes = [r.returncode for r in results]
    assert codes[0] == 0 and 2 in codes, [r.stderr for r in results]
    refused = results[codes.index(2)]
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert turns_in(rdb) == codes.index(2)


def test_metrics_count_a_tenants_waits_by_tenant_only_when_the_operator_allows_the_label(
    bounded: httpx.Client, api_servers: StartApi
) -> None:
    """A turn over its tenant's bound waits: counted in ``dres_tenant_turns_queued_total``
    with an empty label (no label to Prometheus), or by tenant with DRES_METRICS_TENANT_LABEL=1:
    the operator's choice, the cardinality theirs to mind."""
    name = "dres_tenant_turns_queued_total"
    labelled = api_servers(DRES_TENANT_CONCURRENCY="1", DRES_METRICS_TENANT_LABEL="1")
    with httpx.Client(base_url=labelled.url, timeout=10) as by_tenant:
        for http, tenant, label in ((bounded, "acme", ""), (by_tenant, "umbrella", "umbrella")):
            before = Scrape(http.get("/metrics").text).value(name, tenant=label)
            for _ in range(2):
                posted = http.post("/v1/turns", json={"message": "hi", "tenant": tenant})
                assert posted.status_code == 202, posted.text
            after = Scrape(http.get("/metrics").text)
            assert after.value(name, tenant=label) == before + 1, after.samples
            assert after.total(name, tenant=tenant if not label else "") == 0
