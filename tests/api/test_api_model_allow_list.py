"""POST /v1/turns serves the default model and DRES_MODELS' specs only (docs/configuration.md); the
CLI, a local user, may name any spec. A refusal never shows what is in a file on the server."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import httpx
import redis
from api_support import Cli, post_turn, redis_state, serve, turn_count

from ledger.events import TurnStarted
from ledger.store import Ledger
from rigs import DONE, write_script
from worker.base.settings import load_settings
from worker.edges.http.app import create_api

#: what a parser's position in a file looks like: "line 1 column 2", "char 5", "(char 0)"
PARSE_POSITION = re.compile(r"\b(line|column|char|col)\b|\d+:\d+", re.IGNORECASE)


def refused(http: httpx.Client, rdb: redis.Redis, model: str, status: int = 422) -> str:
    """Post a turn asking for ``model``: refused with ``status``, nothing written; the detail."""
    before = redis_state(rdb)
    response = http.post("/v1/turns", json={"message": "hi", "model": model})
    assert response.status_code == status, response.text
    assert redis_state(rdb) == before
    detail: str = response.json()["detail"]
    assert "\n" not in detail
    return detail


def test_an_unlisted_provider_model_is_refused_with_422_naming_it_and_dres_models(
    http: httpx.Client, rdb: redis.Redis
) -> None:
    detail = refused(http, rdb, "anthropic:x")
    assert "'anthropic:x'" in detail and "DRES_MODELS" in detail


def test_a_provider_model_is_accepted_when_dres_models_allows_the_providers_every_model(
    dres_env: dict[str, str], rdb: redis.Redis, ledger: Ledger
) -> None:
    importlib.import_module("anthropic")  # seconds on a busy machine: not inside the request
    app = create_api(load_settings(models="anthropic:*"))
    with serve(app) as url, httpx.Client(base_url=url, timeout=30) as http:
        created = post_turn(http, model="anthropic:x")
        assert "'openai:y' is not allowed" in refused(http, rdb, "openai:y")
    started = ledger.events(created["turn_id"])[0]
    assert isinstance(started, TurnStarted) and started.model == "anthropic:x"
    assert turn_count(rdb) == 1


def test_a_server_file_named_by_a_client_is_refused_without_a_line_of_it_or_a_parse_position(
    http: httpx.Client, rdb: redis.Redis
) -> None:
    detail = refused(http, rdb, "scripted:/etc/passwd")
    assert "DRES_MODELS" in detail
    assert not PARSE_POSITION.search(detail.replace("/etc/passwd", "")), detail
    for line in Path("/etc/passwd").read_text().splitlines():
        assert line.strip() not in detail


def test_a_listed_script_that_is_broken_is_refused_with_a_generic_line(
    dres_env: dict[str, str], rdb: redis.Redis, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"steps": [\n  {"text": "secret-token-123", "bogus": 1}\n')
    listed = f"scripted:{broken}"
    app = create_api(load_settings(models=listed))
    with serve(app) as url, httpx.Client(base_url=url, timeout=10) as http:
        detail = refused(http, rdb, listed)
    assert "cannot be loaded" in detail
    assert "secret-token-123" not in detail and "bogus" not in detail
    assert not PARSE_POSITION.search(detail.replace(str(broken), "")), detail


def test_a_listed_script_and_the_default_model_are_accepted(
    dres_env: dict[str, str], rdb: redis.Redis, tmp_path: Path
) -> None:
    listed = write_script(tmp_path / "listed.json", [DONE])
    app = create_api(load_settings(models=listed))
    with serve(app) as url, httpx.Client(base_url=url, timeout=10) as http:
        post_turn(http, model=listed)
        post_turn(http)
    assert turn_count(rdb) == 2


def test_dres_api_with_a_bad_dres_models_exits_2_with_one_line_naming_it(cli: Cli) -> None:
    result = cli("api", "--port", "0", env={"DRES_MODELS": "anthropic:*,claude"}, timeout=15)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "DRES_MODELS" in lines[0] and "'claude'" in lines[0]


def test_the_cli_may_name_a_script_no_list_allows(
    cli: Cli, tmp_path: Path, rdb: redis.Redis
) -> None:
    model = write_script(tmp_path / "local.json", [DONE])
    result = cli("enqueue", "hi", "--model", model)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith("turn_")
    assert turn_count(rdb) == 1
