"""Tools from MCP servers and OpenAPI documents on a real prefork worker (docs/tools.md,
docs/semantics.md, docs/semantics.md): its pool process opens its own MCP session after the fork, a
chunk's soft limit cuts the turn after the writes, and the resumed chunk under a model that
re-issues everything runs the reads again and blocks the writes. The servers are real subprocesses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rigs import ROOT, WorkerProcess, of, show, wait_for, wait_until
from rigs.mcp_servers import McpHttpServer, calls, stdio_entry
from rigs.openapi_app import ApiServer, requests
from rigs.waiting import ended
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server

#: the chunk limits here (seconds): a stdio server's first start (a Python process importing the
#: SDK, about a second, more on a busy machine) happens inside the first chunk's first call,
#: before the writes the soft limit must come after; the pause below is what the limit cuts
#: the soft limit leaves the first chunk room to start its MCP server and make every call on a
#: loaded CI machine (4 s did not, once): the cut must land in the pause after the writes
LIMITS = {"DRES_SOFT_LIMIT_S": "8", "DRES_HARD_LIMIT_S": "20", "DRES_VISIBILITY_TIMEOUT_S": "30"}
PAUSE = {"delay_s": 20, "tool_calls": [{"name": "async_lookup", "input": {"key": "pause"}}]}
DONE = {"text": "Done."}


def step(*calls_: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": n, "input": d} for n, d in calls_]}


@pytest.fixture(params=["stdio", "http"])
def mcp_entry(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[dict[str, Any], Path]]:
    log = tmp_path / f"mcp-{request.param}.jsonl"
    if request.param == "stdio":
        yield stdio_entry(log, timeout_s=5), log
        return
    server = McpHttpServer(log).start()
    yield server.entry(timeout_s=5), log
    server.stop()


def test_a_cut_turn_reruns_the_mcp_read_and_blocks_the_writes_on_a_worker(
    runtime: Runtime,
    start_worker: Callable[..., WorkerProcess],
    script: Callable[..., str],
    mcp_entry: tuple[dict[str, Any], Path],
) -> None:
    entry, log = mcp_entry
    start_worker(overrides={**LIMITS, "DRES_MCP_SERVERS": json.dumps({"t": entry})})
    first = step(
        ("t__lookup", {"key": "a"}),
        ("t__send", {"to": "ada", "text": "hi"}),
        ("t__charge", {"amount": 5}),
    )
    turn = runtime.lifecycle.enqueue(
        "Do it", model=script([first, PAUSE, DONE], on_resume="restart")
    )

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=40, what="the turn's end")

    assert of(events, "turn_ended")[-1].status == "completed", show(events)
    assert of(events, "run_ended")[0].reason == "soft_limit", show(events)
    assert [c["tool"] for c in calls(log)] == ["lookup", "send", "charge", "lookup"]
    blocked = {e.tool: e.reason for e in of(events, "tool_blocked")}
    assert blocked == {"t__send": "completed", "t__charge": "completed"}, show(events)
    assert all(c["key"] and len(c["key"]) == 40 for c in calls(log))


def test_an_mcp_server_killed_mid_write_on_a_worker_leaves_it_interrupted(
    runtime: Runtime,
    start_worker: Callable[..., WorkerProcess],
    script: Callable[..., str],
    tmp_path: Path,
) -> None:
    log = tmp_path / "mcp.jsonl"
    servers = {"t": stdio_entry(log, timeout_s=30)}
    start_worker(overrides={**LIMITS, "DRES_MCP_SERVERS": json.dumps(servers)})
    model = script([step(("t__send_slowly", {"to": "ada"})), DONE], on_resume="restart")
    turn = runtime.lifecycle.enqueue("Send it", model=model)

    [row] = wait_until(lambda: calls(log, "send_slowly"), timeout=20, what="the write")
    os.kill(row["pid"], signal.SIGKILL)
    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=40, what="the turn's end")

    assert of(events, "turn_ended")[-1].status == "completed", show(events)
    assert not of(events, "tool_done", tool="t__send_slowly"), show(events)
    # refused each time the model re-issues it (a later chunk's restart re-issues it again)
    refused = of(events, "tool_blocked", tool="t__send_slowly")
    assert refused and all(r.reason == "interrupted" and r.is_error for r in refused), show(events)
    assert len(calls(log, "send_slowly")) == 1


def dres(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker.edges.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_worker_whose_mcp_server_is_missing_refuses_to_start_with_one_line(
    dres_env: dict[str, str], tmp_path: Path
) -> None:
    servers = {"gone": {"command": [str(tmp_path / "no-such-server")]}}
    done = dres({**dres_env, "DRES_MCP_SERVERS": json.dumps(servers)}, "worker")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "DRES_MCP_SERVERS: server 'gone'" in lines[0], done.stderr


#: a tool source's secrets: a password in its URL's userinfo, a token in its query, arguments
SEKRET_URL = "http://u:pw-SEKRET-1@127.0.0.1:{port}/{path}?token=SEKRET-2&api_key=SEKRET-3"


def secret_source(case: str, tmp_path: Path) -> tuple[str, dict[str, Any], Callable[[], None]]:
    """The setting of ``case``'s tool source with secrets in it (its variable, its value) and
    what stops the server it started: nothing listens at port 9; a real server answers 404 to
    a path it does not serve (httpx's status error repeats the request's URL)."""
    if case == "mcp-command":
        command = [str(tmp_path / "no-such-server"), "--api-key", "sk-SEKRET-4", "--token=SEKRET-5"]
        return "DRES_MCP_SERVERS", {"files": {"command": command}}, lambda: None
    if case.endswith("404"):
        server = (
            ApiServer(tmp_path / "api.jsonl")
            if case.startswith("openapi")
            else McpHttpServer(tmp_path / "mcp.jsonl")
        ).start()
        port, stop = server.port, server.stop
    else:
        port, stop = 9, lambda: None
    if case.startswith("openapi"):
        spec = SEKRET_URL.format(port=port, path="nope.json")
        entry = {"spec": spec, "base_url": f"http://127.0.0.1:{port}/?sig=SEKRET-6"}
        return "DRES_OPENAPI", {"shop": entry}, stop
    return "DRES_MCP_SERVERS", {"remote": {"url": SEKRET_URL.format(port=port, path="nope")}}, stop


@pytest.mark.parametrize(
    "case", ["openapi-closed", "openapi-404", "mcp-closed", "mcp-404", "mcp-command"]
)
def test_a_worker_s_start_up_error_names_its_tool_source_without_its_secrets(
    dres_env: dict[str, str], tmp_path: Path, case: str
) -> None:
    """A tool source that cannot be read stops the worker with one line naming it: its URL's
    host, port and query keys, its program; never its password, query values or arguments."""
    variable, value, stop = secret_source(case, tmp_path)
    try:
        done = dres({**dres_env, variable: json.dumps(value)}, "worker")
    finally:
        stop()
    assert done.returncode == 2, done.stderr
    assert "SEKRET" not in done.stdout + done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"dres: {variable}: "), done.stderr
    if case == "mcp-command":
        assert f"({tmp_path / 'no-such-server'} **** **** ****)" in lines[0], done.stderr
    else:
        assert "u:****@127.0.0.1:" in lines[0] and "?token=****&api_key=****" in lines[0], lines


def test_a_worker_s_log_names_no_secret_of_an_mcp_server_s_url_while_it_calls_it(
    runtime: Runtime,
    start_worker: Callable[..., WorkerProcess],
    script: Callable[..., str],
    tmp_path: Path,
) -> None:
    """The MCP SDK's HTTP client logs each request's URL at INFO (logger ``httpx2``): held at
    WARNING like httpx's, and any URL in a line masked."""
    log = tmp_path / "mcp.jsonl"
    server = McpHttpServer(log).start()
    try:
        url = f"http://u:pw-SEKRET-1@127.0.0.1:{server.port}/mcp?token=SEKRET-2"
        worker = start_worker(overrides={"DRES_MCP_SERVERS": json.dumps({"t": {"url": url}})})
        turn = runtime.lifecycle.enqueue(
            "Look it up", model=script([step(("t__lookup", {"key": "a"})), DONE])
        )
        events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=40, what="the end")
    finally:
        server.stop()
    assert of(events, "tool_done", tool="t__lookup"), show(events)
    assert [c["tool"] for c in calls(log)] == ["lookup"]
    assert "SEKRET" not in worker.log(), worker.log()[-4000:]


def test_a_cut_turn_reruns_the_get_and_blocks_the_post_on_a_worker(
    runtime: Runtime,
    start_worker: Callable[..., WorkerProcess],
    script: Callable[..., str],
    tmp_path: Path,
) -> None:
    log = tmp_path / "api.jsonl"
    server = ApiServer(log).start()
    try:
        apis = json.dumps({"api": server.entry(timeout_s=5)})
        start_worker(overrides={**LIMITS, "DRES_OPENAPI": apis})
        first = step(("api__get_item", {"item_id": "x"}), ("api__create_item", {"name": "a"}))
        model = script([first, PAUSE, DONE], on_resume="restart")
        turn = runtime.lifecycle.enqueue("Do it", model=model)

        events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=40, what="the end")
    finally:
        server.stop()

    assert of(events, "turn_ended")[-1].status == "completed", show(events)
    assert [r["operation"] for r in requests(log)] == ["get_item", "create_item", "get_item"]
    assert [(e.tool, e.reason) for e in of(events, "tool_blocked")] == [
        ("api__create_item", "completed")
    ]


def test_dres_tools_lists_every_tool_with_its_source(
    dres_env: dict[str, str], tmp_path: Path
) -> None:
    server = ApiServer(tmp_path / "api.jsonl").start()
    try:
        env = {
            **dres_env,
            "DRES_MCP_SERVERS": json.dumps({"t": stdio_entry(tmp_path / "mcp.jsonl")}),
            "DRES_OPENAPI": json.dumps({"api": server.entry(operations=["create_order"])}),
            "DRES_APPROVAL": "t__send",
        }
        done = dres(env, "tools", "--json")
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    rows = {r["name"]: r for r in json.loads(done.stdout)}
    assert rows["t__lookup"] | {"name": ""} == {
        "name": "",
        "source": "mcp t",
        "kind": "read-only",
        "idempotent": "no",
        "identity": "-",
        "approval": "no",
    }
    assert (rows["t__send"]["kind"], rows["t__send"]["approval"]) == ("write", "yes")
    assert rows["t__charge"]["idempotent"] == "yes"
    assert rows["api__create_order"]["source"] == "openapi api"
    assert "api__create_item" not in rows  # not in the API's operations allow-list
    assert rows["send_email"]["source"] == "python"


def test_a_workers_json_log_holds_no_path_value_header_or_result_of_an_openapi_call(
    runtime: Runtime,
    start_worker: Callable[..., WorkerProcess],
    script: Callable[..., str],
    tmp_path: Path,
) -> None:
    """httpx logs every request's URL at INFO (``/notes/<the path value>``): held at WARNING,
    and dres's own lines name tools, never their input or result."""
    secrets = {"path": "path-s3cret-41", "header": "header-s3cret-42", "auth": "op-s3cret-43"}
    log = tmp_path / "api.jsonl"
    server = ApiServer(log).start()
    try:
        entry = server.entry(timeout_s=5, headers={"Authorization": f"Bearer {secrets['auth']}"})
        worker = start_worker(
            overrides={
                **LIMITS,
                "DRES_OPENAPI": json.dumps({"api": entry}),
                "DRES_LOG_FORMAT": "json",
            }
        )
        call = {"note_id": secrets["path"], "X-Note-Key": secrets["header"]}
        model = script([step(("api__read_note", call)), DONE])
        turn = runtime.lifecycle.enqueue("Read it", model=model)
        events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=40, what="the end")
    finally:
        server.stop()

    [done] = of(events, "tool_done", tool="api__read_note")
    assert done.result == {
        "note_id": secrets["path"],
        "note_key": secrets["header"],
        "authorization": f"Bearer {secrets['auth']}",
    }, show(events)
    lines = [json.loads(line) for line in worker.log().splitlines() if line.strip()]
    assert any(line.get("event") == "tools loaded" for line in lines)
    text = worker.log()
    for name, secret in secrets.items():
        assert secret not in text, f"the {name} was logged"
