"""A turn's ``loop`` (docs/loops.md, docs/http-api.md): ``POST /v1/turns`` and ``dres enqueue
--loop`` take one of ``DRES_LOOP``'s entries by its text and record it on ``turn_started``
(absent: ``None``, the default, DRES_LOOP's first); any other is a 422 (exit 2) naming ``loop``,
and nothing is recorded. The API accepts loops by name: it runs no agent and imports no
framework for them."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import redis
from api_support import Cli, post_turn, redis_state, serve, turn_count

from ledger.events import TurnStarted
from ledger.store import Ledger
from rigs import ROOT
from worker.base.settings import load_settings
from worker.edges.http.app import create_api

PYDANTIC = "pydantic_ai:pydantic_ai_agent:agent"
AGENTS = "openai_agents:openai_agents_agent:agent"


@pytest.fixture
def loops_api(dres_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[httpx.Client]:
    """An API whose DRES_LOOP lists dres first, then the examples' agents (found, not imported)."""
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    app = create_api(load_settings(loop=f"dres,{PYDANTIC},{AGENTS}"))
    with serve(app) as url, httpx.Client(base_url=url, timeout=30) as http:
        yield http


def started(ledger: Ledger, turn_id: str) -> TurnStarted:
    first = ledger.events(turn_id)[0]
    assert isinstance(first, TurnStarted)
    return first


def test_a_turns_loop_is_one_of_dres_loops_entries_recorded_on_turn_started(
    loops_api: httpx.Client, ledger: Ledger
) -> None:
    chosen = post_turn(loops_api, loop=PYDANTIC)
    assert started(ledger, chosen["turn_id"]).loop == PYDANTIC
    later = post_turn(loops_api, conversation_id=chosen["conversation_id"], loop=AGENTS)
    assert started(ledger, later["turn_id"]).loop == AGENTS
    assert started(ledger, post_turn(loops_api, loop="dres")["turn_id"]).loop == "dres"
    # none given: the default, whatever DRES_LOOP's first is when the turn runs
    assert started(ledger, post_turn(loops_api)["turn_id"]).loop is None


@pytest.mark.parametrize(
    "loop",
    [
        "openai_agents:elsewhere:agent",  # well formed, not listed
        f" {PYDANTIC}",  # listed, but not by its exact text
        "DRES",
        "",
    ],
)
def test_a_loop_not_listed_is_a_422_naming_loop_and_nothing_is_recorded(
    loops_api: httpx.Client, rdb: redis.Redis, loop: str
) -> None:
    before = redis_state(rdb)
    response = loops_api.post("/v1/turns", json={"message": "hi", "loop": loop})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert detail == (f"loop: {loop!r} is not one of DRES_LOOP's: dres, {PYDANTIC}, {AGENTS}"), (
        detail
    )
    again = loops_api.post(
        "/v1/turns", json={"message": "hi", "loop": loop}, headers={"Idempotency-Key": "k-1"}
    )
    assert again.status_code == 422, again.text
    assert redis_state(rdb) == before


def test_a_fork_of_a_turn_runs_the_default_loop_as_the_fork_request_names_none(
    loops_api: httpx.Client, ledger: Ledger
) -> None:
    source = post_turn(loops_api, loop=AGENTS)
    forked = loops_api.post(f"/v1/turns/{source['turn_id']}/fork", json={"message": "again"})
    assert forked.status_code == 202, forked.text
    assert started(ledger, forked.json()["turn_id"]).loop is None


def test_the_session_api_takes_dres_and_refuses_a_framework_loop_it_does_not_list(
    http: httpx.Client, ledger: Ledger
) -> None:
    assert started(ledger, post_turn(http, loop="dres")["turn_id"]).loop == "dres"
    response = http.post("/v1/turns", json={"message": "hi", "loop": PYDANTIC})
    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith("loop: ")


def test_dres_enqueue_loop_records_a_listed_loop_and_refuses_another_in_one_line_exit_2(
    cli: Cli, ledger: Ledger, rdb: redis.Redis
) -> None:
    # a generous timeout: a command's start may be slow on a busy machine
    done = cli("enqueue", "hi", "--loop", "dres", timeout=120)
    assert done.returncode == 0, done.stderr
    assert started(ledger, done.stdout.strip()).loop == "dres"
    refused = cli("enqueue", "hi", "--loop", PYDANTIC, timeout=120)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr == f"dres: loop: {PYDANTIC!r} is not one of DRES_LOOP's: dres\n"
    assert turn_count(rdb) == 1


def test_the_document_names_the_loops_this_server_takes(loops_api: httpx.Client) -> None:
    """A turn's ``loop`` in /openapi.json is one of this server's entries (a fuzzer's
    schema-valid loop is one the server takes)."""
    document = loops_api.get("/openapi.json").json()
    loop = document["components"]["schemas"]["TurnRequest"]["properties"]["loop"]
    assert loop["anyOf"] == [
        {"type": "string", "enum": ["dres", PYDANTIC, AGENTS]},
        {"type": "null"},
    ]
