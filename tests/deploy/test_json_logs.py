"""``DRES_LOG_FORMAT=json`` (docs/configuration.md, issue 15): one JSON object per line on stderr,
dres's lines and Celery's alike, with ``turn_id``, ``run_id``, ``chunk`` and ``epoch`` on every line
logged while a chunk works on a turn; ``console`` (the default) stays text for a person."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog

from ledger.store import Ledger
from rigs import ROOT, ApiProcess, Script, WorkerProcess, ended, of, send, think, wait_for
from worker.base.logging import configure_logging, configure_logging_for
from worker.base.settings import load_settings
from worker.edges.runtime import Runtime

#: the loggers of what runs inside a chunk: the lifecycle's chunk path, the tool executor, and
#: Celery's trace of the task (its "succeeded" line)
CHUNK_LOGGERS = {"dres.lifecycle", "dres.executor", "celery.app.trace"}


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of ``text`` as a JSON object; fails naming the first line that is not one."""
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            pytest.fail(f"line {number} is not JSON: {line!r}")
        assert isinstance(value, dict), f"line {number} is not an object: {line!r}"
        lines.append(value)
    return lines


@pytest.fixture
def json_worker(dres_env: dict[str, str], tmp_path: Path) -> Iterator[WorkerProcess]:
    """A ``dres worker`` with DRES_LOG_FORMAT=json, its stderr and stdout in two files."""
    env = {**dres_env, "DRES_LOG_FORMAT": "json"}
    with (tmp_path / "stdout.log").open("wb") as out, (tmp_path / "stderr.log").open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "worker.edges.cli", "worker", "-c", "1", "--without-heartbeat"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    worker = WorkerProcess(process, tmp_path / "stderr.log")
    try:
        worker.wait_ready()
        yield worker
    finally:
        worker.stop()
        print(f"--- worker stderr ---\n{worker.log()[-8000:]}")


def test_a_json_worker_logs_objects_with_the_turn_run_chunk_and_epoch_of_its_chunk(
    json_worker: WorkerProcess, runtime: Runtime, ledger: Ledger, script: Script, tmp_path: Path
) -> None:
    """A turn cut by its soft limit (chunk 0) whose model then repeats its email (chunk 1)."""
    model = script([send("a@x.io", "Hi"), think(1.0), {"text": "Done."}], on_resume="restart")
    turn = runtime.lifecycle.enqueue("email Ada", model=model)
    events = wait_for(ledger, turn.turn_id, ended("completed"), what="the turn's end")
    runs = {e.run_id: e for e in of(events, "run_started")}
    assert len(runs) >= 2, "the turn never crossed a chunk boundary"

    json_worker.stop()
    lines = json_lines(json_worker.log())
    chunk_lines = [line for line in lines if line.get("logger") in CHUNK_LOGGERS]
    for line in chunk_lines:
        started = runs[line["run_id"]]
        assert line["turn_id"] == turn.turn_id, line
        assert (line["chunk"], line["epoch"]) == (started.chunk, started.epoch), line
    dres_chunks = {line["chunk"] for line in chunk_lines if line["logger"].startswith("dres.")}
    assert dres_chunks == {0, 1}, "chunk 0's hand-over and chunk 1's blocked email are logged"
    celery = [line for line in lines if line.get("logger", "").startswith("celery.")]
    assert any(line["event"].endswith("ready.") for line in celery)
    banner = (tmp_path / "stdout.log").read_text()
    assert "transport:" not in banner and "[queues]" not in banner, "a banner on stdout"


def test_a_json_api_logs_its_requests_as_objects(dres_env: dict[str, str], tmp_path: Path) -> None:
    env = {**dres_env, "DRES_LOG_FORMAT": "json"}
    api = ApiProcess.start(env, tmp_path / "api.log")
    try:
        assert httpx.get(f"{api.url}/v1/turns/turn_nope", timeout=5).status_code in {404, 422}
    finally:
        api.stop()
    lines = json_lines(api.log())
    assert any(line.get("logger") == "uvicorn.access" for line in lines)


def test_console_stays_the_default_for_a_person(
    dres_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging_for(load_settings())
    structlog.get_logger("dres.test").info("hello", turn_id="turn_1")
    err = capsys.readouterr().err
    assert "hello" in err and "turn_id=turn_1" in err
    with pytest.raises(json.JSONDecodeError):
        json.loads(err.splitlines()[-1])


def test_an_exception_logged_as_json_stays_one_object_with_its_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging(json=True)
    try:
        raise ValueError("boom")
    except ValueError:
        structlog.get_logger("dres.test").exception("chunk failed", turn_id="turn_1")
        logging.getLogger("celery.test").exception("task failed")
    first, second = json_lines(capsys.readouterr().err)
    assert first["event"] == "chunk failed" and first["turn_id"] == "turn_1"
    assert "ValueError: boom" in first["exception"]
    assert second["event"] == "task failed" and "ValueError: boom" in second["exception"]


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """The unit tests here configure this process's logging; the next test gets it back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    config = structlog.get_config()
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.captureWarnings(False)
    structlog.configure(**config)
    structlog.contextvars.clear_contextvars()
