"""Tools from MCP servers and OpenAPI documents through the real loop, ledger and executor, in
process (docs/tools.md, docs/semantics.md), against real servers: the official SDK's MCP server over
stdio and streamable HTTP, and a FastAPI app serving its OpenAPI document, each a subprocess.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from harness import TOOL_MODULES, Harness

from ledger.events import ToolBlocked, ToolDone, ToolStart
from ledger.journal import build_journal
from rigs.mcp_servers import McpHttpServer, calls, stdio_entry
from rigs.openapi_app import ApiServer, requests
from rigs.waiting import wait_until
from worker.base.errors import ConfigError
from worker.base.tool_sources import McpServer, OpenApi
from worker.engine.tools import Registry
from worker.engine.tools.context import idempotency_key
from worker.engine.tools.sources.mcp import Connection, McpTool, list_server, server_tools
from worker.engine.tools.sources.openapi import api_tools, load_document
from worker.engine.tools.sources.python import module_tools

PAUSE = {"delay_s": 10, "tool_calls": [{"name": "async_lookup", "input": {"key": "pause"}}]}
DONE = {"text": "Done."}


def step(*calls_: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": n, "input": d} for n, d in calls_]}


@pytest.fixture
def client(rdb: redis.Redis) -> redis.Redis:
    """A real redis-server only: these tests are about the tool sources, and the ledger's
    behaviour on fakeredis and a Cluster is the other contract tests' (each of those backends
    would run the same servers again)."""
    return rdb


@pytest.fixture
def h(client: redis.Redis, tmp_path: Path) -> Harness:
    return Harness(client, tmp_path)


@pytest.fixture(params=["stdio", "http"])
def mcp(request: pytest.FixtureRequest, h: Harness, tmp_path: Path) -> Iterator[Path]:
    """The harness's registry with the test MCP server's tools as ``t__*``; the server's log."""
    log = tmp_path / f"mcp-{request.param}.jsonl"
    http = McpHttpServer(log).start() if request.param == "http" else None
    entry = http.entry(timeout_s=2) if http else stdio_entry(log, timeout_s=2)
    yield from _registered(h, McpServer.model_validate(entry), log)
    if http:
        http.stop()


def _registered(h: Harness, server: McpServer, log: Path) -> Iterator[Path]:
    specs = server_tools("t", server, list_server("t", server))
    h.registry = Registry().add_specs(*module_tools(TOOL_MODULES)).add_specs(*specs)
    yield log
    tool = specs[0].fn
    assert isinstance(tool, McpTool)
    tool.connection.close()


@pytest.fixture
def api(h: Harness, tmp_path: Path) -> Iterator[Path]:
    """The harness's registry with the test API's operations as ``api__*``; the API's log."""
    log = tmp_path / "api.jsonl"
    server = ApiServer(log).start()
    entry = OpenApi.model_validate(server.entry(timeout_s=1))
    specs = api_tools("api", entry, load_document("api", entry))
    h.registry = Registry().add_specs(*module_tools(TOOL_MODULES)).add_specs(*specs)
    yield log
    server.stop()


def blocked(h: Harness) -> list[ToolBlocked]:
    return [e for e in h.events("tool_blocked") if isinstance(e, ToolBlocked)]


def starts(h: Harness, tool: str) -> list[ToolStart]:
    return [e for e in h.events("tool_start") if isinstance(e, ToolStart) and e.tool == tool]


# -- MCP ------------------------------------------------------------------------------------


def test_an_mcp_servers_tools_are_classified_by_their_hints(h: Harness, mcp: Path) -> None:
    specs = {n: s for n, s in h.registry.tools.items() if n.startswith("t__")}
    kinds = {n: (s.read_only, s.idempotent, s.source) for n, s in specs.items()}
    assert kinds == {
        "t__lookup": (True, False, "mcp t"),
        "t__send": (False, False, "mcp t"),
        "t__charge": (False, True, "mcp t"),
        "t__send_slowly": (False, False, "mcp t"),
        "t__charge_slowly": (False, True, "mcp t"),
    }
    assert specs["t__send"].schema["required"] == ["to", "text"]


def test_a_resumed_turn_reruns_mcp_reads_and_blocks_its_completed_writes(
    h: Harness, mcp: Path
) -> None:
    """restart mode: the read runs twice, each write once; the server saw the call's
    idempotency key in ``_meta``."""
    first = step(
        ("t__lookup", {"key": "a"}),
        ("t__send", {"to": "ada", "text": "hi"}),
        ("t__charge", {"amount": 5}),
    )
    h.start([first, PAUSE, DONE], on_resume="restart")
    assert h.run_next(soft_limit_after=5) is None
    assert h.run_to_end().status == "completed"
    seen = calls(mcp)
    assert [c["tool"] for c in seen] == ["lookup", "send", "charge", "lookup"]
    assert {b.tool: b.reason for b in blocked(h)} == {
        "t__send": "completed",
        "t__charge": "completed",
    }
    [send] = starts(h, "t__send")
    assert seen[1]["key"] == idempotency_key(h.turn_id, "t__send", send.signature, 0)
    [done] = [e for e in h.events("tool_done") if isinstance(e, ToolDone) and e.tool == "t__send"]
    assert done.result == {"sent": True, "to": "ada"}
    block = next(b for b in blocked(h) if b.tool == "t__send")
    assert block.result["result"] == done.result


def test_invalid_input_for_an_mcp_tool_names_the_field_and_sends_nothing(
    h: Harness, mcp: Path
) -> None:
    h.start([step(("t__send", {"to": "ada"})), DONE])
    assert h.run_to_end().status == "completed"
    [done] = h.events("tool_done")
    assert isinstance(done, ToolDone) and done.is_error
    assert "t__send: text: Field required" in done.result["error"]
    assert calls(mcp, "send") == []


def test_an_mcp_server_killed_mid_write_leaves_it_interrupted_and_its_retry_refused(
    h: Harness, client: redis.Redis, tmp_path: Path
) -> None:
    log = tmp_path / "mcp-kill.jsonl"
    server = McpServer.model_validate(stdio_entry(log, timeout_s=30))
    registered = _registered(h, server, log)
    next(registered)

    def kill_when_called() -> None:
        import os
        import signal

        row = wait_until(lambda: calls(log, "send_slowly"), timeout=20, what="the write")
        os.kill(row[0]["pid"], signal.SIGKILL)

    killer = threading.Thread(target=kill_when_called)
    killer.start()
    h.start([step(("t__send_slowly", {"to": "ada"})), DONE], on_resume="restart")
    ended = h.run_to_end()
    killer.join()
    assert ended.status == "completed"
    journal = build_journal(h.events())
    assert [e.tool for e in journal.interrupted] == ["t__send_slowly"]
    assert [(b.tool, b.reason, b.is_error) for b in blocked(h)] == [
        ("t__send_slowly", "interrupted", True)
    ]
    assert len(calls(log, "send_slowly")) == 1
    assert [e.cause for e in h.events("resumed")] == ["transport_error"]  # type: ignore[attr-defined]
    next(registered, None)


def test_an_interrupted_idempotent_mcp_write_is_retried_with_the_same_key(
    h: Harness, mcp: Path
) -> None:
    """The first call times out (unknown outcome: interrupted); the resumed identical call runs
    again with the same key in ``_meta``, and the server's dedupe answers it."""
    h.start([step(("t__charge_slowly", {"amount": 7})), DONE], on_resume="restart")
    assert h.run_to_end().status == "completed"
    first, second = calls(mcp, "charge_slowly")
    assert first["key"] == second["key"] is not None
    journal = build_journal(h.events())
    assert [e.tool for e in journal.completed] == ["t__charge_slowly"] and not journal.interrupted
    assert journal.completed[0].result == {"charge_id": "ch_1", "amount": 7}
    assert blocked(h) == []


def test_an_mcp_server_that_cannot_be_started_is_named_in_one_line(tmp_path: Path) -> None:
    server = McpServer(command=(str(tmp_path / "no-such-server"),))
    with pytest.raises(ConfigError) as e:
        list_server("gone", server)
    assert "DRES_MCP_SERVERS: server 'gone'" in str(e.value)
    assert "\n" not in str(e.value)


def test_a_connection_is_reopened_after_its_server_went_away(tmp_path: Path) -> None:
    """A read after the stdio server died: the session is found gone and opened again."""
    log = tmp_path / "mcp.jsonl"
    server = McpServer.model_validate(stdio_entry(log))
    connection = Connection("t", server)
    assert connection.call("lookup", {"key": "a"}, "k1", True)["value"] == "value-of-a"
    import os
    import signal

    os.kill(calls(log)[0]["pid"], signal.SIGKILL)
    # the write pings first: the server found gone before the request left, a new one answers
    assert connection.call("send", {"to": "b", "text": "t"}, "k2", False) == {
        "sent": True,
        "to": "b",
    }
    first, second = calls(log)
    assert first["pid"] != second["pid"] and second["key"] == "k2"
    connection.close()


# -- OpenAPI --------------------------------------------------------------------------------


def test_openapi_operations_are_classified_by_method_and_idempotency_key(
    h: Harness, api: Path
) -> None:
    kinds = {
        n: (s.read_only, s.idempotent) for n, s in h.registry.tools.items() if n.startswith("api__")
    }
    assert kinds == {
        "api__get_item": (True, False),
        "api__create_item": (False, False),
        "api__put_item": (False, True),
        "api__create_slowly": (False, False),
        "api__create_order": (False, True),
        "api__read_note": (True, False),
    }
    schema = h.registry.tools["api__create_order"].schema
    assert set(schema["properties"]) == {"sku"}  # Idempotency-Key is dres's, not the model's
    assert set(h.registry.tools["api__put_item"].schema["required"]) == {"item_id", "name"}


def test_a_resumed_turn_reruns_a_get_and_blocks_a_completed_post(h: Harness, api: Path) -> None:
    first = step(("api__get_item", {"item_id": "x"}), ("api__create_item", {"name": "a"}))
    h.start([first, PAUSE, DONE], on_resume="restart")
    assert h.run_next(soft_limit_after=5) is None
    assert h.run_to_end().status == "completed"
    assert [r["operation"] for r in requests(api)] == ["get_item", "create_item", "get_item"]
    assert [(b.tool, b.reason) for b in blocked(h)] == [("api__create_item", "completed")]
    [post] = requests(api, "create_item")
    assert post["key"] and post["body"] == {"name": "a", "qty": 1}
    assert requests(api, "get_item")[0]["key"] is None  # reads carry no Idempotency-Key


def test_an_interrupted_idempotent_put_is_retried_with_the_same_key(h: Harness, api: Path) -> None:
    """The first PUT does its work and answers too late (unknown outcome: interrupted); the
    resumed identical call runs again, and the server sees the same Idempotency-Key twice."""
    put = ("api__put_item", {"item_id": "i1", "name": "slow-one"})
    h.start([step(put), DONE], on_resume="restart")
    assert h.run_to_end().status == "completed"
    first, second = requests(api, "put_item")
    assert first["key"] == second["key"] is not None
    journal = build_journal(h.events())
    assert [e.tool for e in journal.completed] == ["api__put_item"] and not journal.interrupted
    assert blocked(h) == []


def test_a_post_answered_after_the_timeout_is_interrupted_not_an_error(
    h: Harness, api: Path
) -> None:
    h.start([step(("api__create_slowly", {"name": "s"})), DONE], on_resume="restart")
    assert h.run_to_end().status == "completed"
    journal = build_journal(h.events())
    assert [e.tool for e in journal.interrupted] == ["api__create_slowly"]
    assert not [e for e in h.events("tool_done") if e.tool == "api__create_slowly"]  # type: ignore[attr-defined]
    assert [(b.tool, b.reason) for b in blocked(h)] == [("api__create_slowly", "interrupted")]
    assert len(requests(api, "create_slowly")) == 1


def test_invalid_input_for_an_operation_names_the_field_and_sends_nothing(
    h: Harness, api: Path
) -> None:
    h.start([step(("api__create_item", {"name": "a", "qty": "many"})), DONE])
    assert h.run_to_end().status == "completed"
    [done] = h.events("tool_done")
    assert isinstance(done, ToolDone) and done.is_error
    assert "api__create_item: qty:" in done.result["error"]
    assert requests(api) == []


def test_a_non_2xx_answer_is_an_error_result_with_its_status(h: Harness, api: Path) -> None:
    h.start([step(("api__create_item", {"name": "conflict"})), DONE])
    assert h.run_to_end().status == "completed"
    [done] = h.events("tool_done")
    assert isinstance(done, ToolDone) and done.is_error
    assert "HTTP 409" in done.result["error"] and "conflict exists" in done.result["error"]


def test_a_request_that_cannot_connect_is_an_error_result(h: Harness, tmp_path: Path) -> None:
    server = ApiServer(tmp_path / "api.jsonl").start()
    entry = OpenApi.model_validate(server.entry())
    specs = api_tools("api", entry, load_document("api", entry))
    server.stop()
    h.registry = Registry().add_specs(*module_tools(TOOL_MODULES)).add_specs(*specs)
    h.start([step(("api__create_item", {"name": "a"})), DONE])
    assert h.run_to_end().status == "completed"
    [done] = h.events("tool_done")
    assert isinstance(done, ToolDone) and done.is_error
    assert "not sent" in done.result["error"]
