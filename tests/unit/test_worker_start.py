"""``dres worker`` refuses a setting it cannot run with at start, naming it, before any chunk."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rigs.processes import ROOT, subprocess_env


@pytest.mark.parametrize(
    ("dres", "args", "said"),
    [
        ({"DRES_TOOLS": "no_such_module"}, [], "DRES_TOOLS: cannot import 'no_such_module'"),
        ({"DRES_TOOLS": "json"}, [], "DRES_TOOLS: module 'json' defines no @tool"),
        ({}, ["-P", "solo"], "the solo pool never raises soft time limits"),
        ({}, ["-P", "threads"], "the threads pool never raises soft time limits"),
        ({}, ["--pool=eventlet"], "the eventlet pool never raises soft time limits"),
        ({}, ["--bogus"], "celery worker options: No such option '--bogus'"),
        ({}, ["-c", "many"], "Invalid value for '-c' / '--concurrency'"),
        ({"DRES_APPROVAL": "no_such_tool"}, [], "DRES_APPROVAL names unknown tools"),
        ({"DRES_APPROVAL": "list_outbox"}, [], "DRES_APPROVAL names read-only tools"),
        ({"DRES_APPROVAL": "a b"}, [], "DRES_APPROVAL: must be none, writes"),
    ],
)
def test_a_worker_that_cannot_run_chunks_exits_2_at_start_naming_why(
    dres: dict[str, str], args: list[str], said: str
) -> None:
    # No broker is reachable at this URL: the refusal comes before any connection is tried.
    env = subprocess_env({"DRES_REDIS_URL": "redis://127.0.0.1:9/0", **dres}, ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "worker.edges.cli", "worker", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr
