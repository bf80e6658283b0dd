"""Who may reach the API at all (docs/http-api.md, "Who may call"; issue 38): no page on another
site can drive a dres on this machine. A tokenless ``dres api`` answers loopback ``Host`` names
only (a DNS name rebound to 127.0.0.1 gets 421), a write whose ``Origin`` is another site's is a
403 with or without a token, the page cannot be framed, and the OpenAPI document is behind the
token and names no file of the server. On the session's real ``dres api`` servers.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import redis
from api_support import TOKEN, Approvals, post_turn, redis_state, status_of

from rigs import ApiProcess
from worker.base.settings import load_settings
from worker.edges.http.document import model_forms

pytestmark = pytest.mark.redis_server

#: a DNS name a page on another site rebinds to 127.0.0.1
REBOUND = "rebind.attacker.example"
#: a page on another site
FOREIGN = "http://attacker.example"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def port_of(server: ApiProcess) -> int:
    port = urlsplit(server.url).port
    assert port is not None
    return port


def test_a_tokenless_api_refuses_a_rebound_host_on_reads_decisions_and_the_page(
    http: httpx.Client, api: ApiProcess, rdb: redis.Redis, tmp_path: Path, dres_env: dict[str, str]
) -> None:
    """DNS rebinding: the request reaches 127.0.0.1 with the attacker's name as ``Host``."""
    ap = Approvals(rdb, tmp_path)
    turn_id, request = ap.wait()
    before = redis_state(rdb)
    host = {"Host": f"{REBOUND}:{port_of(api)}"}
    decision = {"decision": "approve", "signature": request.signature}
    decide = f"/v1/turns/{turn_id}/approvals/{request.approval_id}"

    replies = [
        http.get("/v1/approvals", headers=host),
        http.get(f"/v1/turns/{turn_id}", headers=host),
        http.post(decide, json=decision, headers=host),
        http.post(f"/v1/turns/{turn_id}/stop", headers=host),
        http.get("/", headers=host),
        http.get("/metrics", headers=host),
        http.get("/openapi.json", headers=host),
    ]

    for reply in replies:
        assert reply.status_code == 421, (reply.request.url, reply.text)
        assert REBOUND in reply.json()["detail"]
    assert redis_state(rdb) == before
    assert status_of(http, turn_id)["status"] == "waiting"


@pytest.mark.parametrize(
    "name", ["localhost", "127.0.0.1", "127.4.5.6", "[::1]", "LOCALHOST"], ids=str
)
def test_a_tokenless_api_answers_every_loopback_name_with_any_port(
    http: httpx.Client, api: ApiProcess, name: str
) -> None:
    for host in (f"{name}:{port_of(api)}", f"{name}:8080", name):
        reply = http.get("/v1/approvals", headers={"Host": host})
        assert reply.status_code == 200, (host, reply.text)


def test_an_api_with_a_token_answers_any_host_name(
    guarded: httpx.Client, guarded_api: ApiProcess
) -> None:
    """Behind its token an API may be reached by any name (it may listen off loopback)."""
    host = {"Host": f"dres.example.com:{port_of(guarded_api)}"}
    assert guarded.get("/v1/approvals", headers=host).status_code == 401
    assert guarded.get("/v1/approvals", headers={**host, **AUTH}).status_code == 200


def test_a_cross_site_form_post_is_refused_with_403_and_changes_nothing(
    http: httpx.Client, rdb: redis.Redis
) -> None:
    """A form on another site needs no CORS preflight: its POST reached Stop before."""
    turn_id = post_turn(http)["turn_id"]  # queued: no worker runs here
    before = redis_state(rdb)

    for origin in (FOREIGN, "null", f"https://{urlsplit(str(http.base_url)).netloc}"):
        reply = http.post(
            f"/v1/turns/{turn_id}/stop", content=b"x=1", headers={**FORM, "Origin": origin}
        )
        assert reply.status_code == 403, (origin, reply.text)
        assert "origin" in reply.json()["detail"]
    created = http.post("/v1/turns", json={"message": "hi"}, headers={"Origin": FOREIGN})
    assert created.status_code == 403, created.text
    # a browser that left Origin out still says where the request came from
    unnamed = http.post(
        "/v1/turns", json={"message": "hi"}, headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert unnamed.status_code == 403 and "cross-site" in unnamed.json()["detail"]
    assert redis_state(rdb) == before
    assert status_of(http, turn_id)["status"] == "queued"


def test_a_write_from_the_apis_own_origin_or_with_no_origin_is_taken(
    http: httpx.Client, api: ApiProcess
) -> None:
    """The page's own requests carry its origin; a client that is not a browser sends none."""
    own = {"Origin": api.url}
    created = http.post("/v1/turns", json={"message": "hi"}, headers=own)
    assert created.status_code == 202, created.text
    turn_id = created.json()["turn_id"]
    localhost = {"Origin": f"http://localhost:{port_of(api)}", "Host": f"localhost:{port_of(api)}"}
    assert http.post(f"/v1/turns/{turn_id}/stop", headers=localhost).status_code == 202
    assert http.get("/v1/approvals", headers={"Origin": FOREIGN}).status_code == 200
    same = {"Sec-Fetch-Site": "same-origin"}
    assert http.post("/v1/turns", json={"message": "hi"}, headers=same).status_code == 202


def test_with_a_token_a_write_from_another_origin_is_still_refused(
    guarded: httpx.Client,
) -> None:
    """A token does not make a cross-site write safe (a proxy may add it, or the browser)."""
    reply = guarded.post("/v1/turns", json={"message": "hi"}, headers={**AUTH, "Origin": FOREIGN})
    assert reply.status_code == 403, reply.text
    assert guarded.post("/v1/turns", json={"message": "hi"}, headers=AUTH).status_code == 202


def test_the_page_cannot_be_framed_by_another_site(http: httpx.Client) -> None:
    page = http.get("/")
    assert page.status_code == 200
    policy = [part.strip() for part in page.headers["content-security-policy"].split(";")]
    assert "frame-ancestors 'none'" in policy
    assert "script-src 'self'" in policy
    assert page.headers["x-frame-options"] == "DENY"


def test_the_openapi_document_is_behind_the_token_and_names_no_script_file(
    http: httpx.Client, guarded: httpx.Client, api_script_dir: object
) -> None:
    assert guarded.get("/openapi.json").status_code == 401
    assert guarded.get("/openapi.json", headers=AUTH).json()["info"]["title"] == "dres"
    document = http.get("/openapi.json")
    assert document.status_code == 200
    assert str(api_script_dir) not in document.text  # the servers' DRES_MODELS lists such files
    model = document.json()["components"]["schemas"]["TurnRequest"]["properties"]["model"]
    assert model["anyOf"] == [{"type": "null"}]


def test_the_document_admits_named_and_provider_models_but_no_scripted_path() -> None:
    settings = load_settings(models="scripted:/srv/x.json,openai:gpt-x,anthropic:*")
    assert model_forms(settings) == [
        {"type": "string", "enum": ["openai:gpt-x"]},
        {"type": "string", "pattern": r"^anthropic:[^*\s]+$"},
    ]
