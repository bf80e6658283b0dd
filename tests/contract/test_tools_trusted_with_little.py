"""What a tool from elsewhere is trusted with (docs/security.md, docs/tools.md), through the real
loop, ledger and executor in process, against the rigs' real OpenAPI app (a uvicorn subprocess
that logs every request it receives, those no operation answers too): a path parameter cannot
take the operator's credentials out of its operation's path, a configured header is never the
model's to replace, a fetched document names no server of its own, and a result of any size is
stored cut past DRES_MAX_RESULT_BYTES with a marker the model reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from harness import TOOL_MODULES, Harness
from sample_tools import effects

from ledger.events import ToolBlocked, ToolDone
from ledger.journal import build_journal
from rigs.openapi_app import ELSEWHERE, ApiServer, requests
from worker.base.errors import ConfigError
from worker.base.settings import load_settings
from worker.base.tool_sources import OpenApi
from worker.engine.models.base import ToolResultMessage
from worker.engine.tools import Registry
from worker.engine.tools.results import MAX_RESULT_BYTES, stored_result
from worker.engine.tools.sources.openapi import api_tools, load_document
from worker.engine.tools.sources.python import module_tools

OPERATOR = "Bearer operator-secret"
PAUSE = {"delay_s": 10, "tool_calls": [{"name": "async_lookup", "input": {"key": "pause"}}]}
DONE = {"text": "Done."}


def step(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": n, "input": d} for n, d in calls]}


@pytest.fixture
def h(rdb: redis.Redis, tmp_path: Path) -> Harness:
    return Harness(rdb, tmp_path)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ApiServer]:
    server = ApiServer(tmp_path / "api.jsonl").start()
    yield server
    server.stop()


def register(h: Harness, name: str, entry: dict[str, Any]) -> None:
    api = OpenApi.model_validate(entry)
    specs = api_tools(name, api, load_document(name, api))
    h.registry = Registry().add_specs(*module_tools(TOOL_MODULES)).add_specs(*specs)


@pytest.fixture
def api(h: Harness, server: ApiServer) -> Path:
    """The test API's operations as ``api__*``, every request carrying the operator's
    ``Authorization``; the API's log of every request it received."""
    register(h, "api", server.entry(timeout_s=2, headers={"Authorization": OPERATOR}))
    return server.log


def only_done(h: Harness) -> ToolDone:
    [done] = h.events("tool_done")
    assert isinstance(done, ToolDone)
    return done


# -- OpenAPI path parameters ----------------------------------------------------------------


@pytest.mark.parametrize("value", ["..", ".", "", "%2e%2e", "%2E", ".%2e"])
def test_a_path_parameter_that_is_no_segment_is_an_error_and_nothing_is_sent(
    h: Harness, api: Path, value: str
) -> None:
    """``{"item_id": ".."}`` once reached ``GET /`` with the operator's Authorization."""
    h.start([step(("api__get_item", {"item_id": value})), DONE])
    assert h.run_to_end().status == "completed"
    done = only_done(h)
    assert done.is_error and "item_id: not a path segment" in done.result["error"]
    assert requests(api) == []


def test_a_path_value_with_slashes_and_dots_stays_inside_its_operations_path(
    h: Harness, api: Path
) -> None:
    """Its ``/`` is percent-encoded, so its dots are no segments httpx would remove: the
    server gets ``/items/a%2F..%2F..`` (which no route of its answers)."""
    h.start([step(("api__get_item", {"item_id": "a/../.."})), DONE])
    assert h.run_to_end().status == "completed"
    assert "HTTP 404" in only_done(h).result["error"]
    assert [(r["operation"], r["path"]) for r in requests(api)] == [("unrouted", "/items/a/../..")]


def dotted_document() -> dict[str, Any]:
    """An operation whose own path has a dot segment: ``/items/{item_id}/..``."""
    param = {"in": "path", "required": True, "schema": {"type": "string"}}
    return {
        "openapi": "3.0.3",
        "info": {"title": "dotted", "version": "1"},
        "paths": {
            "/items/{item_id}/..": {
                "get": {
                    "operationId": "get_parent",
                    "parameters": [{"name": "item_id", **param}],
                    "responses": {"200": {"description": "ok"}},
                }
            }
        },
    }


def test_a_request_that_would_leave_its_path_is_refused_naming_its_path_fields(
    h: Harness, server: ApiServer, tmp_path: Path
) -> None:
    """Beyond each value's own check, the URL httpx would send is compared with the path asked
    for: a path httpx would shorten (here the document's own ``..``) is never sent."""
    spec = tmp_path / "dotted.json"
    spec.write_text(json.dumps(dotted_document()))
    register(h, "dotted", {"spec": str(spec), "base_url": server.url})
    h.start([step(("dotted__get_parent", {"item_id": "x"})), DONE])
    assert h.run_to_end().status == "completed"
    done = only_done(h)
    assert done.is_error and "not sent: item_id: leaves the path" in done.result["error"]
    assert requests(server.log) == []


# -- OpenAPI headers and servers ------------------------------------------------------------


def test_a_header_the_operator_configured_is_no_input_and_is_sent_as_configured(
    h: Harness, api: Path
) -> None:
    """``read_note`` declares ``Authorization`` and ``X-Note-Key``: the model may give the
    note's key, never the credentials (an input naming them is refused: nothing sent)."""
    schema = h.registry.tools["api__read_note"].schema
    assert set(schema["properties"]) == {"note_id", "X-Note-Key"}
    theirs = {"note_id": "n1", "Authorization": "Bearer the-models"}
    h.start([step(("api__read_note", theirs), ("api__read_note", {"note_id": "n2"})), DONE])
    assert h.run_to_end().status == "completed"
    refused, answered = h.events("tool_done")
    assert isinstance(refused, ToolDone) and refused.is_error
    assert isinstance(answered, ToolDone) and answered.result["authorization"] == OPERATOR
    assert [(r["path"], r["auth"]) for r in requests(api)] == [("/notes/n2", OPERATOR)]


def test_a_fetched_document_without_base_url_is_refused_at_start_naming_the_entry() -> None:
    entry = {"shop": {"spec": "https://api.example.com/openapi.json", "headers": {"A": "b"}}}
    with pytest.raises(ConfigError) as refused:
        load_settings(openapi=json.dumps(entry))
    line = str(refused.value)
    assert "\n" not in line
    assert line.startswith("DRES_OPENAPI: API 'shop'") and "needs base_url" in line


def test_a_fetched_documents_servers_do_not_get_the_requests(
    h: Harness, server: ApiServer, tmp_path: Path
) -> None:
    """The document (served by the rig) says its server is elsewhere: the calls go to the
    entry's base_url all the same."""
    assert load_document("api", OpenApi.model_validate(server.entry()))["servers"] == [
        {"url": ELSEWHERE}
    ]
    register(h, "api", server.entry(headers={"Authorization": OPERATOR}))
    h.start([step(("api__get_item", {"item_id": "a"})), DONE])
    assert h.run_to_end().status == "completed"
    assert not only_done(h).is_error
    assert [r["auth"] for r in requests(server.log)] == [OPERATOR]


# -- results past DRES_MAX_RESULT_BYTES -----------------------------------------------------


def test_a_five_megabyte_result_is_stored_cut_with_its_marker_and_both_layers_use_it(
    h: Harness,
) -> None:
    """The write returns 5 MiB; its tool_done holds the marker within the cap; the model's
    next request carries the marker; after a soft limit the model re-issues the write, which
    layer 2 blocks with the stored (cut) result, and the journal note lists it."""
    write = ("big_report", {"megabytes": 5})
    h.start([step(write), PAUSE, DONE], on_resume="restart")
    assert h.run_next(soft_limit_after=5) is None
    assert h.run_to_end().status == "completed"

    done = next(e for e in h.events("tool_done") if e.tool == "big_report")  # type: ignore[attr-defined]
    assert isinstance(done, ToolDone) and not done.is_error
    result = done.result
    assert result["truncated"] is True and result["original_bytes"] > 5 * 1024 * 1024
    assert result["content"].startswith('{"report":"xxx')
    assert len(json.dumps(result, separators=(",", ":"))) <= MAX_RESULT_BYTES
    assert len(effects(h.client, "big_report")) == 1
    [blocked] = [e for e in h.events("tool_blocked") if isinstance(e, ToolBlocked)]
    assert (blocked.tool, blocked.reason) == ("big_report", "completed")
    assert blocked.result["result"] == result
    journal = build_journal(h.events())
    assert [e.result for e in journal.completed if e.tool == "big_report"] == [result]
    told = [
        m.content
        for r in h.requests
        for m in r.messages
        if isinstance(m, ToolResultMessage) and m.tool == "big_report"
    ]
    # the model reads the marker: as the result, or inside layer 2's "already completed"
    assert told and all(result in (seen, seen.get("result")) for seen in map(json.loads, told))


def test_the_cap_is_a_setting_and_a_result_within_it_is_stored_whole(
    h: Harness, tmp_path: Path
) -> None:
    h.settings = load_settings(journal_read_backoff_s=0, max_result_bytes=2048)
    h.lifecycle = h.lifecycle_for(h.ledger, h.cache)
    h.start([step(("big_report", {"megabytes": 1}), ("charge", {"amount": 3})), DONE])
    assert h.run_to_end().status == "completed"
    big, small = h.events("tool_done")
    assert isinstance(big, ToolDone) and isinstance(small, ToolDone)
    assert big.result["truncated"] and len(json.dumps(big.result)) <= 2048 + 64
    assert small.result == {"charged": 3, "key": small.result["key"]}


@pytest.mark.parametrize(
    "value",
    ["é" * 5000, {"q": '"\\' * 3000}, ["\u0001"] * 2000, "a" * 5000],
    ids=["two-byte characters", "escapes", "control characters", "a string"],
)
def test_a_cut_result_fits_its_cap_and_keeps_whole_characters(value: Any) -> None:
    cap = 1024
    marker = stored_result(value, cap)
    raw = json.dumps(marker, ensure_ascii=False, separators=(",", ":")).encode()
    assert marker["truncated"] is True and len(raw) <= cap
    assert marker["content"] and "\ufffd" not in marker["content"]
    if isinstance(value, str):
        assert value.startswith(marker["content"])
