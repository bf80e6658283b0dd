"""call_agent (docs/semantics.md) between two dres apps, on real processes.

App A is this test's Redis and its ``dres worker`` (DRES_AGENTS names app B); app B is another
redis-server with its own ``dres api`` (its own DRES_API_TOKEN) and ``dres worker``, whose default
model answers the delegated message. Whatever cuts the parent — its soft limit after the
delegation or while it waits, a SIGKILL of its pool process, a duplicate delivery, Stop — app B
ends up with exactly one child turn, and the parent's call returns that child's answer.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from ledger import keys
from ledger.events import Event
from ledger.journal import build_journal
from ledger.store import Ledger
from rigs import (
    ROOT,
    ApiProcess,
    WorkerProcess,
    ended,
    having,
    of,
    show,
    stop_all,
    subprocess_env,
    wait_for,
    wait_until,
    write_script,
)
from tests.support import DRES_ENV, TESTS
from tests.support.fixtures import started
from worker.base.settings import Settings
from worker.dev.redis_server import RedisServer
from worker.edges.celery.dispatch import CeleryDispatcher
from worker.edges.runtime import Runtime
from worker.lifecycle.dispatch import task_id

pytestmark = pytest.mark.redis_server

AGENT = "researcher"
QUESTION = "What is the capital of France?"
ANSWER = "Paris is the capital of France."
TOKEN_B = "app-b-token-0123456789-0123456789abcdef"
#: the parent's model: delegate, then answer from what came back
CALL: dict[str, Any] = {
    "text": "Asking the researcher.",
    "tool_calls": [{"name": "call_agent", "input": {"agent": AGENT, "message": QUESTION}}],
}
FINAL = "The researcher says: Paris."
#: seconds a slow child turn thinks before it answers (its first attempt)
SLOW_CHILD_S = 2.0
#: app B's limits: its child turns run as background turns, never cut here
APP_B_LIMITS = {
    "DRES_BG_SOFT_LIMIT_S": "8",
    "DRES_BG_HARD_LIMIT_S": "10",
    "DRES_VISIBILITY_TIMEOUT_S": "30",
}


def limits(soft: float, hard: float) -> dict[str, str]:
    """Both pairs of chunk limits of a worker (seconds), and a visibility timeout beyond them."""
    return {
        "DRES_SOFT_LIMIT_S": str(soft),
        "DRES_HARD_LIMIT_S": str(hard),
        "DRES_BG_SOFT_LIMIT_S": str(soft),
        "DRES_BG_HARD_LIMIT_S": str(hard),
        "DRES_VISIBILITY_TIMEOUT_S": str(hard * 3),
    }


@dataclass
class AppB:
    """The app the parent delegates to: its API, its worker and its Redis."""

    api: ApiProcess
    worker: WorkerProcess
    redis: redis.Redis

    @property
    def agents(self) -> str:
        """App A's DRES_AGENTS naming this app."""
        return json.dumps({AGENT: {"url": self.api.url, "token": TOKEN_B}})

    def turns(self) -> list[str]:
        """Every turn this app holds (its turns' metadata keys)."""
        found = self.redis.scan_iter(match=keys.turn_meta("*"), count=1000)
        return sorted(key.decode().split("{")[1].split("}")[0] for key in found)

    def events(self, turn_id: str) -> list[Event]:
        return Ledger(self.redis).events(turn_id)


StartApps = Callable[..., tuple[AppB, WorkerProcess]]


@pytest.fixture(scope="module")
def app_b_server(redis_server: RedisServer) -> Iterator[RedisServer]:
    """App B's own redis-server (app A's is the session's ``redis_server``)."""
    yield from started(lambda: RedisServer().start(), "a real redis-server")


@pytest.fixture
def start_apps(
    app_b_server: RedisServer,
    redis_url: str,
    tmp_path: Path,
    start_worker: Callable[..., WorkerProcess],
) -> Iterator[StartApps]:
    """``start(child_steps, a_env={}, a_concurrency=1)``: app B (API and worker, its default model
    the child script) and app A's worker delegating to it, started side by side."""
    client = redis.Redis.from_url(app_b_server.url, socket_timeout=30)
    client.flushall()
    apis: list[ApiProcess] = []

    def start(
        child_steps: list[dict[str, Any]],
        a_env: dict[str, str] | None = None,
        a_concurrency: int = 1,
    ) -> tuple[AppB, WorkerProcess]:
        child_model = write_script(tmp_path / "child.json", child_steps)
        b_env = {
            **DRES_ENV,
            **APP_B_LIMITS,
            "DRES_REDIS_URL": app_b_server.url,
            "DRES_MODEL": child_model,
        }
        api = ApiProcess.start(
            subprocess_env({**b_env, "DRES_API_TOKEN": TOKEN_B}, TESTS),
            tmp_path / "api-b.log",
            ready=False,
        )
        apis.append(api)
        b_worker = start_worker(ready=False, overrides=b_env)
        app_b = AppB(api, b_worker, client)
        a_worker = start_worker(
            concurrency=a_concurrency,
            ready=False,
            overrides={"DRES_AGENTS": app_b.agents, **(a_env or {})},
        )
        for process in (api, b_worker, a_worker):
            process.wait_ready()
        return app_b, a_worker

    yield start
    stop_all(apis)
    for api in apis:
        print(f"--- app B's api (pid {api.pid}) ---\n{api.log()[-6000:]}")
    client.close()


def parent_model(script: Callable[..., str]) -> str:
    """Delegate, then answer; a resumed run starts over (it re-issues the same call_agent)."""
    return script([CALL, {"text": FINAL}], on_resume="restart")


def child_outcome(events: list[Event]) -> dict[str, Any]:
    """The one successful result of the parent's call_agent (ran or closed by a retry)."""
    [done] = [
        e
        for e in of(events, "tool_done", tool="call_agent", is_error=False)
        if "superseded_by" not in e.result
    ]
    result: dict[str, Any] = done.result
    return result


def assert_one_child(app_b: AppB, events: list[Event]) -> str:
    """App B holds exactly one turn, completed with the answer the parent's call returned."""
    children = app_b.turns()
    assert len(children) == 1, f"app B's turns: {children}\n{show(events)}"
    [child] = children
    assert child_outcome(events) == {"turn_id": child, "status": "completed", "text": ANSWER}
    assert of(events, "turn_ended")[-1].status == "completed", show(events)
    assert final_answer(events) == FINAL
    return child


def final_answer(events: list[Event]) -> str:
    """The text of the parent's last model call."""
    last_call = max(i for i, e in enumerate(events) if e.type == "model_start")
    return "".join(e.text for e in events[last_call:] if e.type == "text")


def child_ended_at(app_b: AppB, child: str) -> float:
    [end] = of(app_b.events(child), "turn_ended")
    ts: float = end.ts
    return ts


def dres(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``dres ARGS…`` as a subprocess with exactly ``env``."""
    return subprocess.run(
        [sys.executable, "-m", "worker.edges.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_parent_cut_by_its_soft_limit_after_the_delegation_gets_the_same_child_on_resume(
    runtime: Runtime, dres_env: dict[str, str], start_apps: StartApps, script: Callable[..., str]
) -> None:
    """The soft limit lands after call_agent completed; the resumed model re-issues the call,
    which is blocked with the recorded child turn: app B never sees a second one."""
    app_b, _ = start_apps([{"text": ANSWER}], a_env=limits(soft=2, hard=5))
    model = script([CALL, {"delay_s": 4, "text": FINAL}], on_resume="restart")
    turn = runtime.lifecycle.enqueue("Ask the researcher", model=model)

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=30, what="the parent's end")

    child = assert_one_child(app_b, events)
    first_run, second_run = of(events, "run_started")
    [done] = of(events, "tool_done", tool="call_agent")
    assert done.run_id == first_run.run_id, show(events)
    assert of(events, "run_ended", run_id=first_run.run_id)[0].reason == "soft_limit"
    [blocked] = of(events, "tool_blocked", tool="call_agent")
    assert (blocked.run_id, blocked.reason) == (second_run.run_id, "completed")
    assert blocked.result["result"] == {"turn_id": child, "status": "completed", "text": ANSWER}
    journal = dres(dres_env, "journal", turn.turn_id)
    assert journal.returncode == 0 and child in journal.stdout, journal.stdout + journal.stderr


def test_a_soft_limit_while_waiting_for_a_slow_child_interrupts_the_call_and_resume_follows_it(
    runtime: Runtime, start_apps: StartApps, script: Callable[..., str]
) -> None:
    """Waiting for the child does not hold off the soft limit: the chunk ends with the call
    interrupted (a tool_start without tool_done) long before the child ends; each resumed run
    re-runs the call with the same key and follows the same child until it ends."""
    app_b, _ = start_apps([{"delay_s": SLOW_CHILD_S, "text": ANSWER}])  # parent: 0.5 s chunks
    turn = runtime.lifecycle.enqueue("Ask the researcher", model=parent_model(script))

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=30, what="the parent's end")

    child = assert_one_child(app_b, events)
    first_run = of(events, "run_started")[0]
    [first_end] = of(events, "run_ended", run_id=first_run.run_id)
    assert first_end.reason == "soft_limit", show(events)
    [first_call] = of(events, "tool_start", tool="call_agent", run_id=first_run.run_id)
    assert not of(events, "tool_done", run_id=first_run.run_id), "the call stayed interrupted"
    assert first_end.ts < child_ended_at(app_b, child), "the limit waited for the child"
    starts = of(events, "tool_start", tool="call_agent")
    assert len(starts) >= 2 and all(s.signature == first_call.signature for s in starts)
    closed = of(events, "tool_done", call_id=first_call.call_id)
    assert [d.result.get("superseded_by") is not None for d in closed] == [True], show(events)
    journal = build_journal(events)
    assert len(journal.completed) == 1 and not journal.interrupted, "one call, one effect"


def test_a_background_parent_killed_while_its_child_runs_resumes_and_follows_the_same_child(
    runtime: Runtime, start_apps: StartApps, script: Callable[..., str]
) -> None:
    """SIGKILL of the parent's pool process after app B accepted the child turn and before the
    parent's tool_done: the picked-up run re-runs call_agent with the same key, gets the same
    child and completes with its answer."""
    app_b, a_worker = start_apps(
        [{"delay_s": SLOW_CHILD_S, "text": ANSWER}], a_env=limits(soft=10, hard=14)
    )
    turn = runtime.lifecycle.enqueue(
        "Ask the researcher", mode="background", model=parent_model(script)
    )
    wait_for(runtime.ledger, turn.turn_id, having("tool_start", tool="call_agent"), what="call")
    wait_until(app_b.turns, timeout=10, what="app B accepting the child turn")
    os.kill(a_worker.pool_child(), signal.SIGKILL)

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=30, what="the parent's end")

    child = assert_one_child(app_b, events)
    first, second = of(events, "run_started")
    assert of(events, "run_ended", run_id=first.run_id)[0].reason == "crashed", show(events)
    assert second.cause in {"reaper", "redelivery"}
    assert not of(events, "tool_done", run_id=first.run_id), "killed before its tool_done"
    assert child_outcome(events)["turn_id"] == child
    assert of(events, "tool_done", tool="call_agent", is_error=False)[0].run_id == second.run_id


def test_a_duplicate_delivery_of_the_parents_chunk_starts_no_second_child(
    runtime: Runtime, settings: Settings, start_apps: StartApps, script: Callable[..., str]
) -> None:
    """The same chunk message delivered again while its run waits for the child claims nothing
    and calls nothing: one run, one call, one child."""
    app_b, a_worker = start_apps(
        [{"delay_s": SLOW_CHILD_S, "text": ANSWER}], a_env=limits(soft=10, hard=14), a_concurrency=2
    )
    turn = runtime.lifecycle.enqueue("Ask the researcher", model=parent_model(script))
    wait_until(app_b.turns, timeout=10, what="app B accepting the child turn")
    CeleryDispatcher(runtime.app, settings).dispatch(turn.turn_id, turn.run_id, "foreground")
    received = f"[{task_id(turn.turn_id, turn.run_id)}] received"
    wait_until(lambda: a_worker.log().count(received) == 2, timeout=10, what="the duplicate")

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=30, what="the parent's end")

    assert_one_child(app_b, events)
    assert len(of(events, "run_started")) == 1, show(events)
    assert len(of(events, "tool_start", tool="call_agent")) == 1


def test_stop_while_waiting_for_the_child_ends_the_parent_within_two_seconds(
    runtime: Runtime, start_apps: StartApps, script: Callable[..., str]
) -> None:
    """Stop is not held off by the wait either: the parent stops (cancelled, the call
    interrupted) while the child still works."""
    app_b, _ = start_apps([{"delay_s": 4.0, "text": ANSWER}], a_env=limits(soft=10, hard=14))
    turn = runtime.lifecycle.enqueue("Ask the researcher", model=parent_model(script))
    wait_until(app_b.turns, timeout=10, what="app B accepting the child turn")
    asked = time.time()
    assert runtime.lifecycle.stop(turn.turn_id).ok

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=10, what="the stop")

    [end] = of(events, "turn_ended")
    assert (end.status, end.code) == ("stopped", "cancelled"), show(events)
    print(f"Stop -> the parent's turn_ended: {end.ts - asked:.2f} s (the child thinks 4 s)")
    assert end.ts - asked < 2.0, f"stopped {end.ts - asked:.2f} s after Stop"
    assert of(events, "tool_start", tool="call_agent")
    assert not of(events, "tool_done", tool="call_agent"), "the call stayed interrupted"
    [child] = app_b.turns()
    assert not of(app_b.events(child), "turn_ended"), "the child was still working"


def test_a_child_that_stops_is_reported_with_its_status_and_code(
    runtime: Runtime, start_apps: StartApps, script: Callable[..., str]
) -> None:
    app_b, _ = start_apps([{"fail": "auth"}], a_env=limits(soft=10, hard=14))
    turn = runtime.lifecycle.enqueue("Ask the researcher", model=parent_model(script))

    events = wait_for(runtime.ledger, turn.turn_id, ended(), timeout=30, what="the parent's end")

    [child] = app_b.turns()
    [done] = of(events, "tool_done", tool="call_agent")
    stopped = {"turn_id": child, "status": "stopped", "text": "", "code": "auth"}
    assert (done.result, done.is_error) == (stopped, False), show(events)
    assert of(events, "turn_ended")[-1].status == "completed"


def test_an_unknown_agent_gets_an_error_result_naming_the_known_agents(
    runtime: Runtime,
    start_worker: Callable[..., WorkerProcess],
    script: Callable[..., str],
) -> None:
    agents = json.dumps({AGENT: {"url": "http://127.0.0.1:9"}, "planner": {"url": "http://x"}})
    start_worker(overrides={"DRES_AGENTS": agents})
    call = {"name": "call_agent", "input": {"agent": "nobody", "message": QUESTION}}
    model = script([{"tool_calls": [call]}, {"text": FINAL}])
    turn = runtime.lifecycle.enqueue("Ask nobody", model=model)

    events = wait_for(runtime.ledger, turn.turn_id, ended("completed"), what="the turn's end")

    [done] = of(events, "tool_done", tool="call_agent")
    assert done.is_error, show(events)
    assert "unknown agent 'nobody'; known agents: planner, researcher" in done.result["error"]


def test_a_worker_with_a_bad_dres_agents_exits_at_start_with_one_line_naming_it(
    dres_env: dict[str, str],
) -> None:
    bad = json.dumps({AGENT: {"url": "ftp://example.org"}})
    done = dres({**dres_env, "DRES_AGENTS": bad}, "worker")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "DRES_AGENTS" in lines[0] and "url" in lines[0], done.stderr
