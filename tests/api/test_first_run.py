"""A person's first run (docs/commands.md): every ``dres`` command, run as a
subprocess, turns a bad setting, a tools module that cannot be imported and (but for ``dres
worker`` and ``dres api``) an unreachable Redis into one line on stderr naming the variable or
module, exit 2, no traceback and no secret; ``dres worker`` waits for its Redis, one line a look,
and ``dres api`` answers 503 meanwhile; ``dres up`` prints the line to export.

Several commands run at once in each test (their starts overlap): what they share is the check.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx
import pytest
import redis

from ledger.store import Ledger
from rigs import ROOT, ApiProcess, Script, stop_all, wait_for, wait_until
from rigs.scripts import DONE
from rigs.waiting import ended
from tests.support.fixtures import StartWorker
from worker.dev.redis_server import RedisServer, free_port

pytestmark = pytest.mark.redis_server

#: what no line may show: the password in each URL below
SECRET = "s3cret-pw"
#: seconds a command may take to start and give up
RUN_S = 90
#: a line of ``dres worker`` while its Redis is away
WAITING = "Redis unreachable: waiting for it"
EXPORT = re.compile(r"^dres up: .*export DRES_REDIS_URL=redis://127\.0\.0\.1:\d+/0$", re.M)

Case = tuple[Sequence[str], Mapping[str, str]]


def run_all(
    env: Mapping[str, str], cases: Sequence[Case]
) -> list[subprocess.CompletedProcess[str]]:
    """``dres ARGS`` of each case with ``env`` and its own settings, all started at once."""
    started = [
        (
            args,
            subprocess.Popen(
                [sys.executable, "-m", "worker.edges.cli", *args],
                cwd=ROOT,
                env={**env, **settings},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
        for args, settings in cases
    ]
    done = []
    for args, process in started:
        out, err = process.communicate(timeout=RUN_S)
        done.append(subprocess.CompletedProcess(args, process.returncode, out, err))
    return done


def one_line_exit_2(done: subprocess.CompletedProcess[str], *named: str) -> str:
    """Exit 2, one line on stderr naming each of ``named``, no traceback, no secret."""
    shown = f"dres {' '.join(done.args)}: exit {done.returncode}\n{done.stderr}{done.stdout}"
    assert done.returncode == 2, shown
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, shown
    assert "Traceback" not in done.stderr, shown
    assert SECRET not in done.stderr + done.stdout, shown
    for name in named:
        assert name in lines[0], shown
    return lines[0]


def test_a_bad_setting_is_one_line_naming_its_variable_exit_2_from_every_command(
    dres_env: dict[str, str],
) -> None:
    schemeless = {"DRES_REDIS_URL": f"app:{SECRET}@localhost:6379"}
    cases: list[Case] = [
        (["worker"], schemeless),
        (["api"], schemeless),
        (["up", "--port", str(free_port())], schemeless),
        (["enqueue", "hi"], schemeless),
        (["config"], schemeless),
        (["approvals"], schemeless),
        (["worker"], {"DRES_REDIS_URL": f"redis://:{SECRET}@localhost:abc/0"}),
        (["enqueue", "hi"], {"DRES_REDIS_URL": f"redis://:{SECRET}@localhost:6379/zero"}),
        (["worker"], {"DRES_BROKER_URL": "localhost:6379"}),
        (["api"], {"DRES_SOFT_LIMIT_S": "soon"}),
    ]
    for (_, settings), done in zip(cases, run_all(dres_env, cases), strict=True):
        one_line_exit_2(done, "dres: ", *settings)


def test_a_tools_module_that_cannot_be_imported_is_one_line_naming_it_its_file_and_line(
    dres_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "badsyntax.py").write_text("from worker.tools import tool\n\ndef f(:\n")
    (tmp_path / "badimport.py").write_text("import os\n\nraise KeyError('OPENAI_API_KEY')\n")
    env = {**dres_env, "PYTHONPATH": f"{tmp_path}:{dres_env['PYTHONPATH']}"}
    syntax, raising, listing = run_all(
        env,
        [
            (["worker"], {"DRES_TOOLS": "worker.demo_tools,badsyntax"}),
            (["worker"], {"DRES_TOOLS": "badimport"}),
            (["tools"], {"DRES_TOOLS": "badsyntax"}),
        ],
    )
    at = f"({tmp_path / 'badsyntax.py'}, line 3)"
    one_line_exit_2(syntax, "DRES_TOOLS", "'badsyntax'", "invalid syntax", at)
    one_line_exit_2(listing, "DRES_TOOLS", "'badsyntax'", at)
    one_line_exit_2(
        raising, "DRES_TOOLS", "'badimport'", "KeyError: 'OPENAI_API_KEY'", "badimport.py, line 3"
    )


def test_an_unreachable_redis_is_one_line_naming_its_masked_url_exit_2_from_up_and_the_cli(
    dres_env: dict[str, str],
) -> None:
    url = f"redis://:{SECRET}@127.0.0.1:{free_port()}/0"  # nothing listens there
    masked = url.replace(SECRET, "****")
    cases: list[Case] = [
        (args, {"DRES_REDIS_URL": url})
        for args in (
            ["enqueue", "hi"],
            ["watch", "turn_x"],
            ["approvals"],
            ["up", "--port", str(free_port())],
        )
    ]
    for done in run_all(dres_env, cases):
        one_line_exit_2(done, "cannot reach Redis", masked)


def test_dres_up_prints_the_line_to_export_and_a_worker_failing_at_start_in_one_line(
    dres_env: dict[str, str],
) -> None:
    env = {k: v for k, v in dres_env.items() if k != "DRES_REDIS_URL"}  # it starts its own
    (done,) = run_all(
        env, [(["up", "--port", str(free_port())], {"DRES_TOOLS": "no_such_tools_module"})]
    )
    assert EXPORT.search(done.stdout), done.stdout
    one_line_exit_2(done, "the worker exited at start", "DRES_TOOLS", "'no_such_tools_module'")


def test_dres_worker_waits_for_its_redis_one_line_a_look_and_dres_api_answers_503_meanwhile(
    start_worker: StartWorker, dres_env: dict[str, str], tmp_path: Path, script: Script
) -> None:
    port = free_port()  # no Redis there yet
    settings = {"DRES_REDIS_URL": f"redis://127.0.0.1:{port}/0"}
    worker = start_worker(ready=False, overrides=settings)
    api = ApiProcess.start({**dres_env, **settings}, tmp_path / "api.log", ready=False)
    server: RedisServer | None = None
    try:
        looks = wait_until(
            lambda: (n := worker.log().count(WAITING)) >= 2 and n,
            timeout=60,
            what="the worker's second look",
        )
        lines = [line for line in worker.log().splitlines() if WAITING in line]
        assert len(lines) == looks and all(settings["DRES_REDIS_URL"] in x for x in lines)
        for path in ("/healthz", "/v1/turns/turn_x"):
            away = wait_until(lambda p=path: _answer(api, p), timeout=60, what="the API's answer")
            assert away.status_code == 503, away.text
            assert away.json()["detail"], away.text

        server = RedisServer(port=port).start()
        worker.wait_ready(timeout=60)
        wait_until(api.healthy, 30, "a healthy API")
        unknown = _answer(api, "/v1/turns/turn_x")
        assert unknown is not None and unknown.status_code == 404, unknown
        (enqueued,) = run_all(
            {**dres_env, **settings}, [(["enqueue", "hi", "--model", script([DONE])], {})]
        )
        assert enqueued.returncode == 0, enqueued.stderr
        turn = enqueued.stdout.strip()
        ledger = Ledger(redis.Redis.from_url(settings["DRES_REDIS_URL"]))
        wait_for(ledger, turn, ended("completed"), timeout=30, what="the turn's end")
        log = worker.log()
        # Celery never met an unreachable broker: dres waited for it first
        assert "Cannot connect" not in log and "Trying again" not in log, log
        assert "Traceback" not in log, log
    finally:
        stop_all([api])
        if server is not None:
            server.cleanup()


def _answer(api: ApiProcess, path: str) -> httpx.Response | None:
    try:
        return httpx.get(f"{api.url}{path}", timeout=5)
    except httpx.TransportError:
        return None


def test_a_loop_that_cannot_run_is_one_line_naming_it_exit_2_from_worker_api_up_and_the_cli(
    dres_env: dict[str, str], tmp_path: Path
) -> None:
    """DRES_LOOP (docs/loops.md): a malformed entry in every command; a framework loop whose
    module is not there from ``dres worker`` (which loads its agent), ``dres api`` and ``dres up``
    (which find it without importing it); a module that cannot be imported from the worker, with
    its file and line."""
    (tmp_path / "badloop.py").write_text("from pydantic_ai import Agent\n\nagent = Agent(:\n")
    env = {**dres_env, "PYTHONPATH": f"{tmp_path}:{dres_env['PYTHONPATH']}"}
    missing = {"DRES_LOOP": "dres,pydantic_ai:no_such_agents:agent"}
    malformed = {"DRES_LOOP": "dres,pydantic_ai:no_attr"}
    cases: list[Case] = [
        (["worker"], missing),
        (["api", "--port", str(free_port())], missing),
        (["up", "--port", str(free_port())], missing),
        (["worker"], {"DRES_LOOP": "openai_agents:badloop:agent"}),
        (["enqueue", "hi"], malformed),
        (["api"], malformed),
    ]
    worker, api, up, syntax, enqueue, api_malformed = run_all(env, cases)
    for done in (worker, api, up):
        one_line_exit_2(
            done, "dres: DRES_LOOP: pydantic_ai:no_such_agents:agent", "'no_such_agents'"
        )
    one_line_exit_2(
        syntax, "DRES_LOOP: openai_agents:badloop:agent", "'badloop'", f"({tmp_path}/badloop.py"
    )
    for done in (enqueue, api_malformed):
        one_line_exit_2(done, "dres: DRES_LOOP: 'pydantic_ai:no_attr' is not dres, pydantic_ai:")


@pytest.mark.parametrize("command", ["worker", "api"])
def test_a_loop_whose_framework_is_not_installed_is_one_line_naming_its_extra_exit_2(
    dres_env: dict[str, str], command: str
) -> None:
    # the framework's import fails for real: its name is None in sys.modules
    code = (
        "import sys; sys.modules['agents'] = None\n"
        "from worker.edges.cli.main import main\n"
        f"sys.exit(main([{command!r}]))\n"
    )
    spec = "openai_agents:openai_agents_agent:agent"
    env = {**dres_env, "DRES_LOOP": f"dres,{spec}"}
    env["PYTHONPATH"] = f"{ROOT / 'examples'}:{env['PYTHONPATH']}"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_S,
    )
    said = one_line_exit_2(done)
    assert said == f"dres: DRES_LOOP: {spec} needs openai-agents: pip install 'dres[openai-agents]'"
