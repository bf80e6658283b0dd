"""Approvals (docs/semantics.md) on real processes: a real ``dres api``, real ``dres worker``s and a
real redis-server; every decision is an HTTP POST, as a person's is.

A write that needs approval ends its run ``waiting``: no worker holds the turn, so the worker can
be stopped and another started before the decision, which still resumes the turn. An approval
authorises one execution: a SIGKILL right after its side effect, a model that re-issues the call,
a model that changes an argument, two people deciding at once — one effect, never a second. An
undecided request expires (the reaper) and Continue asks again. A person is told through
``DRES_APPROVAL_WEBHOOK``, best-effort. ``tests/contract/test_approvals.py`` is the in-process
counterpart of these tests.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from sample_tools import effects

from ledger import keys
from ledger.events import Event
from ledger.store import Ledger
from rigs import (
    DONE,
    ApiProcess,
    WorkerProcess,
    ended,
    having,
    of,
    send,
    show,
    slow_write,
    stop_all,
    subprocess_env,
    together,
    wait_for,
    wait_until,
)
from rigs.providers import DIALECTS, FakeProvider, blackhole, fake_provider
from rigs.scripts import Script, script_writer
from tests.support import DRES_ENV, TESTS, require_sdk
from tests.support.fixtures import BOTH_POOLS, StartWorker
from worker.demo_tools import outbox
from worker.dev.redis_server import RedisServer, free_port
from worker.edges.webhook import WEBHOOK_TIMEOUT_S

pytestmark = pytest.mark.redis_server

#: the tool whose calls wait for a person (DRES_APPROVAL) on the API and on every worker
APPROVAL = "send_email"
#: scripted-model files a test may hand the module's API (its DRES_MODELS lists each)
SCRIPT_SLOTS = 4
#: the email the tests' models send, and the step that sends it
ADA = send("ada@x.io", "Launch")
ADA_MAIL = ADA["tool_calls"][0]["input"]
#: seconds a turn may take to reach the awaited state
TURN_S = 20.0
#: a worker's chunk limits when its model is the fake provider: importing an SDK alone can take
#: longer than the tests' usual 0.5 s soft limit
SDK_LIMITS = {
    "DRES_SOFT_LIMIT_S": "30",
    "DRES_HARD_LIMIT_S": "40",
    "DRES_VISIBILITY_TIMEOUT_S": "90",
}
#: the base URL the webhook's turn URLs are made from (DRES_PUBLIC_URL)
PUBLIC_URL = "http://dres.example:8000"


# -- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def script_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("approval-scripts")


@pytest.fixture
def script(script_dir: Path) -> Script:
    """``script(steps, on_resume="continue")`` as everywhere, written where the API allows it."""
    return script_writer(script_dir)


@pytest.fixture(scope="module")
def api(
    redis_server: RedisServer, script_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiProcess]:
    """One ``dres api`` for the module, on the session's redis-server (emptied per test)."""
    slots = [f"scripted:{script_dir / f'script-{n}.json'}" for n in range(1, SCRIPT_SLOTS + 1)]
    dres = {
        **DRES_ENV,
        "DRES_REDIS_URL": redis_server.url,
        "DRES_MODELS": ",".join([*slots, "anthropic:*"]),
        "DRES_APPROVAL": APPROVAL,
    }
    log_path = tmp_path_factory.mktemp("approvals-api") / "api.log"
    process = ApiProcess.start(subprocess_env(dres, TESTS), log_path)
    yield process
    stop_all([process])
    print(f"--- api (pid {process.pid}) ---\n{process.log()[-6000:]}")


@pytest.fixture
def http(api: ApiProcess, redis_url: str) -> Iterator[httpx.Client]:
    """A client of the module's API; this test's Redis is emptied first (``redis_url``)."""
    with httpx.Client(base_url=api.url, timeout=10) as client:
        yield client


@pytest.fixture
def start(start_worker: StartWorker) -> StartWorker:
    """``start_worker`` with DRES_APPROVAL set; ``overrides`` add to it."""

    def start(overrides: dict[str, str] | None = None, **kwargs: Any) -> WorkerProcess:
        return start_worker(overrides={"DRES_APPROVAL": APPROVAL, **(overrides or {})}, **kwargs)

    return start


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    require_sdk("anthropic")
    with fake_provider() as provider:
        yield provider


Hook = list[dict[str, Any]]


@pytest.fixture
def hook() -> Iterator[tuple[str, Hook]]:
    """A local HTTP server that keeps the JSON body of every POST: its URL and the bodies."""
    bodies: Hook = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            bodies.append(json.loads(self.rfile.read(length)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", bodies
    server.shutdown()
    server.server_close()
    thread.join(10)


# -- a person at the API ------------------------------------------------------------------------


def enqueue(
    http: httpx.Client, model: str, mode: str = "foreground", conversation_id: str | None = None
) -> str:
    body = {"message": "email Ada", "mode": mode, "model": model}
    if conversation_id is not None:
        body["conversation_id"] = conversation_id
    answer = http.post("/v1/turns", json=body)
    assert answer.status_code == 202, answer.text
    turn_id: str = answer.json()["turn_id"]
    return turn_id


def turn(http: httpx.Client, turn_id: str) -> dict[str, Any]:
    answer = http.get(f"/v1/turns/{turn_id}")
    assert answer.status_code == 200, answer.text
    state: dict[str, Any] = answer.json()
    return state


def waiting(http: httpx.Client, ledger: Ledger, turn_id: str, times: int = 1) -> dict[str, Any]:
    """Once the turn's run ended ``waiting`` for the ``times``-th time: its state, waiting."""
    wait_for(ledger, turn_id, having("run_ended", times, reason="waiting"), TURN_S, "waiting")
    state = turn(http, turn_id)
    assert state["status"] == "waiting", state
    return state


def pending(http: httpx.Client) -> list[dict[str, Any]]:
    answer = http.get("/v1/approvals", params={"status": "pending"})
    assert answer.status_code == 200, answer.text
    items: list[dict[str, Any]] = answer.json()["items"]
    return items


def decide(
    url: str, turn_id: str, request: dict[str, Any], decision: str, **body: Any
) -> httpx.Response:
    """POST a decision on ``request`` (as listed: its id and signature) to the API at ``url``."""
    return httpx.post(
        f"{url}/v1/turns/{turn_id}/approvals/{request['approval_id']}",
        json={"decision": decision, "signature": request["signature"], **body},
        timeout=10,
    )


def completed(ledger: Ledger, turn_id: str, *, stops: int = 0) -> list[Event]:
    """Once the turn ended after its ``stops`` earlier stops: its events, the end completed."""
    events = wait_for(ledger, turn_id, having("turn_ended", stops + 1), TURN_S, "turn end")
    assert [e.status for e in of(events, "turn_ended")][stops:] == ["completed"], show(events)
    return events


def sent_to(rdb: redis.Redis) -> list[str]:
    return [mail["to"] for mail in outbox(rdb)]


# -- tests --------------------------------------------------------------------------------------


# under gevent, the SIGKILL only: a gevent worker's SIGTERM hand-over has its own test
# (test_gevent_pool.py)
@pytest.mark.parametrize(
    ("decision", "stop", "pool"),
    [
        ("approve", "sigkill", "prefork"),
        ("deny", "sigterm", "prefork"),
        ("approve", "sigkill", "gevent"),
    ],
    ids=["approve-after-sigkill", "deny-after-sigterm", "gevent-approve-after-sigkill"],
)
def test_a_decision_after_a_worker_restart_runs_the_write_once_or_tells_the_model_why_not(
    decision: str,
    stop: str,
    http: httpx.Client,
    api: ApiProcess,
    ledger: Ledger,
    rdb: redis.Redis,
    start: StartWorker,
    fake: FakeProvider,
) -> None:
    """The request is made on one worker, which is stopped while the turn waits; the decision
    comes over HTTP and a new worker resumes the turn. The model (a real SDK against a fake
    provider) gets the call's result, or the person's reason for the denial."""
    dialect = DIALECTS[0]
    fake.script(dialect.tool_call("toolu_1", "send_email", ADA_MAIL), dialect.text("Done."))
    env = {**SDK_LIMITS, **dialect.env(fake.url)}
    first = start(overrides=env)
    turn_id = enqueue(http, f"{dialect.kind}:claude-test")

    state = waiting(http, ledger, turn_id)
    [request] = state["approvals"]
    assert (request["tool"], request["input"], request["decision"]) == (
        "send_email",
        ADA_MAIL,
        None,
    )
    assert [r["approval_id"] for r in pending(http)] == [request["approval_id"]]
    assert sent_to(rdb) == [] and len(fake.received) == 1
    if stop == "sigkill":
        first.kill_group()
    else:
        first.stop()
    assert not first.alive()
    start(overrides=env)

    reason = "fine" if decision == "approve" else "not before the launch"
    answer = decide(api.url, turn_id, request, decision, reason=reason, by="ops@x.io")

    assert answer.status_code == 202, answer.text
    assert answer.json()["run_id"]
    events = completed(ledger, turn_id)
    assert [e.cause for e in of(events, "run_started")] == ["first", "approval"], show(events)
    [second_request] = fake.wait_requests(2)[1:]
    told = json.dumps(second_request.body["messages"])
    if decision == "approve":
        assert sent_to(rdb) == ["ada@x.io"]
        [start_event] = of(events, "tool_start", tool="send_email")
        assert (start_event.approval_id, start_event.input) == (request["approval_id"], ADA_MAIL)
        assert start_event.call_id == request["call_id"]
        assert '\\"sent\\": true' in told or '"sent": true' in told, told
    else:
        assert sent_to(rdb) == [] and not of(events, "tool_start")
        [blocked] = of(events, "tool_blocked")
        assert (blocked.reason, blocked.is_error) == ("denied", True)
        assert f"denied by a person: {reason}" in told, told
    [listed] = turn(http, turn_id)["approvals"]
    assert (listed["approval_id"], listed["decision"], listed["reason"], listed["by"]) == (
        request["approval_id"],
        decision,
        reason,
        "ops@x.io",
    )
    assert pending(http) == []


# Two of the four pairs: each mode and each kill once (the CI run's time is bounded); under
# gevent the chunks run in the worker's own process, so killing "the child" is killing the worker
@pytest.mark.parametrize(
    ("mode", "action", "pool"),
    [
        ("background", "kill_worker", "prefork"),
        ("foreground", "kill_child", "prefork"),
        ("background", "kill_worker", "gevent"),
    ],
)
def test_a_sigkill_right_after_the_approved_effect_resumes_with_one_effect(
    mode: str,
    action: str,
    http: httpx.Client,
    api: ApiProcess,
    ledger: Ledger,
    rdb: redis.Redis,
    start: StartWorker,
    script: Script,
) -> None:
    """The approved call's side effect lands and a failpoint SIGKILLs the pool process, or the
    whole worker (then another is started), before its ``tool_done``. A background turn is taken
    over and resumes; a foreground one stops ``crashed`` and is continued. The model re-issues
    the call: the interrupted-write guard refuses it, and no new approval is asked."""
    failpoints = {"DRES_FAILPOINTS": "1"}
    first = start(overrides=failpoints)
    turn_id = enqueue(http, script([ADA, DONE], on_resume="restart"), mode)
    [request] = waiting(http, ledger, turn_id)["approvals"]
    rdb.hset(
        keys.chaos_fault(),
        mapping={"point": "tool.after_effect", "action": action, "skip": 0},
    )

    assert decide(api.url, turn_id, request, "approve").status_code == 202

    if action == "kill_worker":
        wait_until(lambda: not first.alive(), TURN_S, "the worker's death")
        start(overrides=failpoints)
    if mode == "foreground":
        events = wait_for(ledger, turn_id, ended(), TURN_S, "the crash's stop")
        [stop] = of(events, "turn_ended")
        assert (stop.status, stop.code, stop.can_continue) == ("stopped", "crashed", True)
        again = http.post(f"/v1/turns/{turn_id}/continue", json={"auto": False})
        assert again.status_code == 202, again.text
        events = completed(ledger, turn_id, stops=1)
        causes = ["first", "approval", "continue"]
    else:
        events = completed(ledger, turn_id)
        causes = [e.cause for e in of(events, "run_started")]
        assert causes[:2] == ["first", "approval"] and causes[2] in {"reaper", "redelivery"}
    assert rdb.hget(keys.chaos_fault(), "fired") == b"tool.after_effect"
    assert [e.cause for e in of(events, "run_started")] == causes, show(events)
    assert sent_to(rdb) == ["ada@x.io"], "the approved write ran once"
    assert not of(events, "tool_done", tool="send_email"), show(events)
    [blocked] = of(events, "tool_blocked")
    assert (blocked.reason, blocked.run_id) == ("interrupted", of(events, "run_started")[2].run_id)
    assert len(of(events, "approval_requested")) == 1, "the repeat was not asked about again"
    assert turn(http, turn_id)["status"] == "completed"


def test_an_idempotent_approved_call_cut_after_its_effect_is_retried_with_the_same_key(
    http: httpx.Client,
    api: ApiProcess,
    ledger: Ledger,
    rdb: redis.Redis,
    start: StartWorker,
    script: Script,
) -> None:
    """``charge`` (``idempotent=True``) is approved, charges and is SIGKILLed before its
    ``tool_done``. The resumed model asks for it again: the retry runs without a new request
    (the approval covered the call), with the approved run's idempotency key, so the provider
    dedupes it."""
    start(overrides={"DRES_FAILPOINTS": "1", "DRES_APPROVAL": "charge"})
    charge = {"tool_calls": [{"name": "charge", "input": {"amount": 500}}]}
    turn_id = enqueue(http, script([charge, DONE], on_resume="restart"), "background")
    [request] = waiting(http, ledger, turn_id)["approvals"]
    rdb.hset(
        keys.chaos_fault(),
        mapping={"point": "tool.after_effect", "action": "kill_child", "skip": 0},
    )

    assert decide(api.url, turn_id, request, "approve").status_code == 202

    events = completed(ledger, turn_id)
    first, retry = effects(rdb, "charge")
    assert first["key"] == retry["key"], "one key: the provider charges once"
    cut, ran = of(events, "tool_start", tool="charge")
    assert (cut.approval_id, ran.approval_id) == (request["approval_id"], None)
    assert ran.call_id != cut.call_id and ran.signature == cut.signature
    assert len(of(events, "approval_requested")) == 1, "the retry was not asked about again"


@pytest.mark.parametrize("mode", ["background", "foreground"])
def test_a_sigkill_after_the_decision_before_the_approved_call_started_runs_it_on_resume(
    mode: str,
    http: httpx.Client,
    api: ApiProcess,
    ledger: Ledger,
    rdb: redis.Redis,
    start: StartWorker,
    script: Script,
) -> None:
    """The run of cause ``approval`` dies before the approved call's ``tool_start``: nothing of
    the call is recorded, so the approval still stands and the resumed run (a takeover, or a
    Continue of the foreground turn's ``crashed`` stop) runs it, once, without asking again."""
    start(overrides={"DRES_FAILPOINTS": "1"})
    turn_id = enqueue(http, script([ADA, DONE]), mode)
    [request] = waiting(http, ledger, turn_id)["approvals"]
    rdb.hset(
        keys.chaos_fault(),
        mapping={"point": "tool.before_start", "action": "kill_child", "skip": 0},
    )

    assert decide(api.url, turn_id, request, "approve").status_code == 202

    stops = 0
    if mode == "foreground":
        events = wait_for(ledger, turn_id, ended(), TURN_S, "the crash's stop")
        assert [e.code for e in of(events, "turn_ended")] == ["crashed"], show(events)
        again = http.post(f"/v1/turns/{turn_id}/continue", json={"auto": False})
        assert again.status_code == 202, again.text
        stops = 1
    events = completed(ledger, turn_id, stops=stops)
    assert rdb.hget(keys.chaos_fault(), "fired") == b"tool.before_start"
    runs = of(events, "run_started")
    assert [r.cause for r in runs[:2]] == ["first", "approval"] and len(runs) == 3, show(events)
    assert sent_to(rdb) == ["ada@x.io"], "the approved write ran once"
    [ran] = of(events, "tool_start", tool="send_email")
    assert (ran.run_id, ran.approval_id) == (runs[2].run_id, request["approval_id"])
    assert len(of(events, "approval_requested")) == 1
    assert not of(events, "tool_blocked")


@BOTH_POOLS
def test_an_approved_call_longer_than_the_soft_limit_is_recorded_once_and_not_run_again(
    http: httpx.Client,
    api: ApiProcess,
    ledger: Ledger,
    rdb: redis.Redis,
    start: StartWorker,
    script: Script,
) -> None:
    """The approved ``slow_write`` works 1 s, twice the 0.5 s soft limit: the limit is deferred
    past its ``tool_done``, the chunk hands over, and the next chunk's model, which asks for the
    same call again (``on_resume: restart``), gets the recorded result."""
    start(overrides={"DRES_APPROVAL": "slow_write"})
    turn_id = enqueue(http, script([slow_write("report"), DONE], on_resume="restart"))
    [request] = waiting(http, ledger, turn_id)["approvals"]

    assert decide(api.url, turn_id, request, "approve").status_code == 202

    events = completed(ledger, turn_id)
    assert len(effects(rdb, "slow_write")) == 1, show(events)
    runs = of(events, "run_started")
    assert [r.cause for r in runs[:2]] == ["first", "approval"], show(events)
    [ran] = of(events, "tool_start", tool="slow_write")
    [done] = of(events, "tool_done", tool="slow_write")
    assert (ran.approval_id, done.run_id, done.is_error) == (
        request["approval_id"],
        runs[1].run_id,
        False,
    )
    assert of(events, "run_ended", run_id=runs[1].run_id)[0].reason == "soft_limit"
    assert [b.reason for b in of(events, "tool_blocked")] == ["completed"]
    assert len(of(events, "approval_requested")) == 1


def test_a_model_that_reissues_the_approved_call_after_the_resume_is_blocked_not_asked(
    http: httpx.Client,
    api: ApiProcess,
    ledger: Ledger,
    rdb: redis.Redis,
    start: StartWorker,
    script: Script,
) -> None:
    """``on_resume: restart``: the approved call runs before the model, which then asks for the
    very same call again; layer 2 returns the approved execution's result."""
    start()
    turn_id = enqueue(http, script([ADA, DONE], on_resume="restart"))
    [request] = waiting(http, ledger, turn_id)["approvals"]

    assert decide(api.url, turn_id, request, "approve").status_code == 202

    events = completed(ledger, turn_id)
    assert sent_to(rdb) == ["ada@x.io"], "one effect"
    [ran] = of(events, "tool_start", tool="send_email")
    [blocked] = of(events, "tool_blocked", tool="send_email")
    assert ran.approval_id == request["approval_id"]
    assert (blocked.reason, blocked.signature) == ("completed", request["signature"])
    assert len(of(events, "approval_requested")) == 1


def test_a_call_changed_after_its_approval_is_asked_about_again(
    http: httpx.Client,
    api: ApiProcess,
    ledger: Ledger,
    rdb: redis.Redis,
    start: StartWorker,
    script: Script,
) -> None:
    """After the approved email to Ada the model sends it to Bob instead (one argument, ``to``,
    changed): a new request with a new signature; the approval of Ada's email is not used for it
    and cannot decide the new one."""
    start()
    bob = send("bob@x.io", "Launch")
    turn_id = enqueue(http, script([ADA, bob, DONE]))
    [first] = waiting(http, ledger, turn_id)["approvals"]
    assert decide(api.url, turn_id, first, "approve").status_code == 202

    state = waiting(http, ledger, turn_id, times=2)

    old, new = state["approvals"]
    assert (old["approval_id"], old["decision"]) == (first["approval_id"], "approve")
    assert new["decision"] is None and new["input"] == bob["tool_calls"][0]["input"]
    assert new["approval_id"] != first["approval_id"]
    assert new["signature"] != first["signature"] and new["call_id"] != first["call_id"]
    assert [r["approval_id"] for r in pending(http)] == [new["approval_id"]]
    assert sent_to(rdb) == ["ada@x.io"], "Bob's email waits"
    stale = decide(api.url, turn_id, {**new, "signature": first["signature"]}, "approve")
    assert stale.status_code == 409 and "signature" in stale.json()["detail"], stale.text

    assert decide(api.url, turn_id, new, "approve").status_code == 202

    events = completed(ledger, turn_id)
    assert sent_to(rdb) == ["ada@x.io", "bob@x.io"]
    starts = of(events, "tool_start", tool="send_email")
    assert [(s.input["to"], s.approval_id) for s in starts] == [
        ("ada@x.io", first["approval_id"]),
        ("bob@x.io", new["approval_id"]),
    ]


def test_a_stale_signature_is_refused_and_of_two_decisions_at_once_one_wins(
    http: httpx.Client,
    api: ApiProcess,
    ledger: Ledger,
    rdb: redis.Redis,
    start: StartWorker,
    script: Script,
) -> None:
    """Three waiting turns; on each, an approval and a denial POSTed at the same moment (a
    barrier): one 202, one 409 whose detail names the decision that came first."""
    start()
    turn_ids = [enqueue(http, script([send(f"{n}@x.io", "Launch"), DONE])) for n in range(3)]
    requests = {t: waiting(http, ledger, t)["approvals"][0] for t in turn_ids}

    stale = decide(api.url, turn_ids[0], {**requests[turn_ids[0]], "signature": "0" * 64}, "deny")
    assert stale.status_code == 409 and "signature" in stale.json()["detail"], stale.text
    assert turn(http, turn_ids[0])["status"] == "waiting", "a refused decision changes nothing"

    winners = {}
    for turn_id, request in requests.items():
        approve, deny = together(
            [
                lambda t=turn_id, r=request: decide(api.url, t, r, "approve"),  # type: ignore[misc]
                lambda t=turn_id, r=request: decide(api.url, t, r, "deny"),  # type: ignore[misc]
            ]
        )
        answers = {"approve": approve, "deny": deny}
        assert sorted(a.status_code for a in answers.values()) == [202, 409], answers
        [won] = [d for d, a in answers.items() if a.status_code == 202]
        [lost] = [a for a in answers.values() if a.status_code == 409]
        assert f"already decided: {won}" in lost.json()["detail"], lost.text
        winners[turn_id] = won

    for n, turn_id in enumerate(turn_ids):
        events = completed(ledger, turn_id)
        [decided] = of(events, "approval_decided")
        assert decided.decision == winners[turn_id], show(events)
        sends = 1 if winners[turn_id] == "approve" else 0
        assert sent_to(rdb).count(f"{n}@x.io") == sends
    print(f"winners: {sorted(winners.values())}")


def test_two_requests_approved_at_once_resume_the_turn_once(
    http: httpx.Client,
    api: ApiProcess,
    ledger: Ledger,
    rdb: redis.Redis,
    start: StartWorker,
    script: Script,
) -> None:
    """Two calls of one step wait; two people approve one each at the same moment: both
    decisions are taken, exactly one of them is the last and resumes the turn, in one run."""
    start()
    bob = {**ADA_MAIL, "to": "bob@x.io"}
    both = {"tool_calls": [{"name": "send_email", "input": m} for m in (ADA_MAIL, bob)]}
    turn_id = enqueue(http, script([both, DONE]))
    ada_request, bob_request = waiting(http, ledger, turn_id)["approvals"]

    answers = together(
        [
            lambda: decide(api.url, turn_id, ada_request, "approve"),
            lambda: decide(api.url, turn_id, bob_request, "approve"),
        ]
    )

    assert [a.status_code for a in answers] == [202, 202], answers
    resumed_by = [a.json()["run_id"] for a in answers if a.json()["run_id"]]
    assert len(resumed_by) == 1, [a.json() for a in answers]
    events = completed(ledger, turn_id)
    runs = of(events, "run_started")
    assert [(r.cause, r.run_id) for r in runs[1:]] == [("approval", resumed_by[0])], show(events)
    assert sorted(sent_to(rdb)) == ["ada@x.io", "bob@x.io"]
    starts = of(events, "tool_start", tool="send_email")
    assert {s.approval_id for s in starts} == {
        ada_request["approval_id"],
        bob_request["approval_id"],
    }


@BOTH_POOLS
def test_stop_and_a_new_message_end_a_waiting_turn_and_void_its_request(
    http: httpx.Client,
    api: ApiProcess,
    ledger: Ledger,
    rdb: redis.Redis,
    start: StartWorker,
    script: Script,
) -> None:
    """No run holds a waiting turn: Stop ends it at once (``cancelled``), a new message in its
    conversation ends it ``superseded``; either way its request is voided and a late decision
    is refused, and nothing is sent."""
    start()
    stopped = enqueue(http, script([ADA, DONE]))
    [first] = waiting(http, ledger, stopped)["approvals"]
    superseded = enqueue(http, script([ADA, DONE]), conversation_id="conv-approvals")
    [second] = waiting(http, ledger, superseded)["approvals"]

    assert http.post(f"/v1/turns/{stopped}/stop").status_code == 202
    newer = enqueue(http, script([DONE]), conversation_id="conv-approvals")

    for turn_id, request, code in (
        (stopped, first, "cancelled"),
        (superseded, second, "superseded"),
    ):
        events = wait_for(ledger, turn_id, ended(), TURN_S, f"the {code} stop")
        [end] = of(events, "turn_ended")
        assert (end.status, end.code) == ("stopped", code), show(events)
        [voided] = of(events, "approval_decided")
        assert (voided.approval_id, voided.decision) == (request["approval_id"], "voided")
        state = turn(http, turn_id)
        assert (state["status"], state["code"]) == ("stopped", code)
        assert [a["decision"] for a in state["approvals"]] == ["voided"]
        late = decide(api.url, turn_id, request, "approve")
        assert late.status_code == 409 and "already decided: voided" in late.json()["detail"]
    assert turn(http, superseded)["can_continue"] is False
    completed(ledger, newer)
    assert pending(http) == [] and sent_to(rdb) == []


def test_after_a_stop_between_two_decisions_continue_runs_the_approved_call_and_asks_again(
    http: httpx.Client,
    api: ApiProcess,
    ledger: Ledger,
    rdb: redis.Redis,
    start: StartWorker,
    script: Script,
) -> None:
    """Two calls of one step wait; one is approved, then Stop voids the other. Continue runs
    the approved call (its decision stands) and asks again for the voided one only; each email
    is sent once."""
    start()
    bob = {**ADA_MAIL, "to": "bob@x.io"}
    both = {"tool_calls": [{"name": "send_email", "input": m} for m in (ADA_MAIL, bob)]}
    turn_id = enqueue(http, script([both, DONE]))
    ada_request, bob_request = waiting(http, ledger, turn_id)["approvals"]
    assert decide(api.url, turn_id, ada_request, "approve").json()["run_id"] is None

    assert http.post(f"/v1/turns/{turn_id}/stop").status_code == 202
    wait_for(ledger, turn_id, ended(), TURN_S, "the stop")
    assert [a["decision"] for a in turn(http, turn_id)["approvals"]] == ["approve", "voided"]
    assert http.post(f"/v1/turns/{turn_id}/continue", json={"auto": False}).status_code == 202

    state = waiting(http, ledger, turn_id, times=2)
    assert sent_to(rdb) == ["ada@x.io"]
    asked = state["approvals"][-1]
    assert (asked["call_id"], asked["decision"]) == (bob_request["call_id"], None)
    assert [r["approval_id"] for r in pending(http)] == [asked["approval_id"]]
    assert decide(api.url, turn_id, asked, "approve").status_code == 202
    events = completed(ledger, turn_id, stops=1)
    assert sent_to(rdb) == ["ada@x.io", "bob@x.io"]
    starts = of(events, "tool_start", tool="send_email")
    assert [s.approval_id for s in starts] == [ada_request["approval_id"], asked["approval_id"]]
    causes = [r.cause for r in of(events, "run_started")]
    assert causes == ["first", "continue", "approval"], show(events)


def test_an_expired_request_stops_the_turn_and_continue_asks_again(
    http: httpx.Client,
    api: ApiProcess,
    ledger: Ledger,
    rdb: redis.Redis,
    start: StartWorker,
    script: Script,
) -> None:
    """DRES_APPROVAL_TTL_S=1 and the tests' 0.2 s reaper: the turn stops ``approval_expired``.
    Continue runs on a worker whose TTL is the default, so the request asked again waits for
    the test's decision however loaded the machine is."""
    short = start(overrides={"DRES_APPROVAL_TTL_S": "1"})
    turn_id = enqueue(http, script([ADA, DONE]))
    [first] = waiting(http, ledger, turn_id)["approvals"]

    events = wait_for(ledger, turn_id, ended(), TURN_S, "the expiry")

    [stop] = of(events, "turn_ended")
    assert (stop.status, stop.code, stop.can_continue) == ("stopped", "approval_expired", True)
    [expired] = of(events, "approval_decided")
    assert (expired.approval_id, expired.decision, expired.by) == (
        first["approval_id"],
        "expired",
        "dres",
    )
    assert stop.ts >= first["expires_at"]
    state = turn(http, turn_id)
    assert (state["status"], state["code"], state["can_continue"]) == (
        "stopped",
        "approval_expired",
        True,
    )
    assert [a["decision"] for a in state["approvals"]] == ["expired"]
    assert pending(http) == []
    late = decide(api.url, turn_id, first, "approve")
    assert late.status_code == 409 and "already decided: expired" in late.json()["detail"]
    auto = http.post(f"/v1/turns/{turn_id}/continue", json={"auto": True})
    assert auto.status_code == 409, "an expiry is never continued automatically"

    short.kill_group()
    start()
    again = http.post(f"/v1/turns/{turn_id}/continue", json={"auto": False})
    assert again.status_code == 202, again.text
    state = waiting(http, ledger, turn_id, times=2)

    old, new = state["approvals"]
    assert (old["decision"], new["decision"]) == ("expired", None)
    assert new["call_id"] == first["call_id"] and new["approval_id"] != first["approval_id"]
    assert (new["input"], new["signature"]) == (ADA_MAIL, first["signature"])
    assert [r["approval_id"] for r in pending(http)] == [new["approval_id"]]
    assert decide(api.url, turn_id, new, "approve").status_code == 202
    events = completed(ledger, turn_id, stops=1)
    assert sent_to(rdb) == ["ada@x.io"]
    assert [e.cause for e in of(events, "run_started")] == ["first", "continue", "approval"]
    assert len(of(events, "model_start")) == 2, "asked again without a model call"
    [ran] = of(events, "tool_start", tool="send_email")
    assert ran.approval_id == new["approval_id"]


def test_the_webhook_gets_each_request_as_json_with_the_turns_url(
    http: httpx.Client,
    api: ApiProcess,
    ledger: Ledger,
    rdb: redis.Redis,
    start: StartWorker,
    script: Script,
    hook: tuple[str, Hook],
) -> None:
    """Two calls of one step wait: the webhook gets two POSTs; the first decision leaves the
    turn waiting, the second resumes it."""
    url, bodies = hook
    start(overrides={"DRES_APPROVAL_WEBHOOK": url, "DRES_PUBLIC_URL": PUBLIC_URL})
    mails = [ADA_MAIL, {**ADA_MAIL, "to": "bob@x.io"}]
    both = {"tool_calls": [{"name": "send_email", "input": m} for m in mails]}
    turn_id = enqueue(http, script([both, DONE]))
    requests = waiting(http, ledger, turn_id)["approvals"]

    wait_until(lambda: len(bodies) >= 2, TURN_S, "two webhook POSTs")

    assert len(bodies) == 2
    by_id = {b["approval_id"]: b for b in bodies}
    assert set(by_id) == {r["approval_id"] for r in requests}
    for request in requests:
        body = by_id[request["approval_id"]]
        for field in ("approval_id", "turn_id", "call_id", "tool", "input", "signature"):
            assert body[field] == request[field], field
        assert body["turn_url"] == f"{PUBLIC_URL}/v1/turns/{turn_id}"
        assert body["decide_url"] == f"{body['turn_url']}/approvals/{request['approval_id']}"
    one = decide(api.url, turn_id, requests[0], "deny", reason="Ada knows")
    assert one.status_code == 202 and one.json()["run_id"] is None, one.text
    assert turn(http, turn_id)["status"] == "waiting"
    two = decide(api.url, turn_id, requests[1], "approve")
    assert two.status_code == 202 and two.json()["run_id"], two.text
    completed(ledger, turn_id)
    assert sent_to(rdb) == ["bob@x.io"]


def test_a_webhook_that_refuses_connections_does_not_stop_the_turn(
    http: httpx.Client,
    api: ApiProcess,
    ledger: Ledger,
    rdb: redis.Redis,
    start: StartWorker,
    script: Script,
) -> None:
    """Nothing listens on the webhook's port: the request waits, is listed, is approved, and
    the turn completes; the worker logs the failed POST."""
    refused = f"http://127.0.0.1:{free_port()}/hook"
    worker = start(overrides={"DRES_APPROVAL_WEBHOOK": refused})
    turn_id = enqueue(http, script([ADA, DONE]))
    [request] = waiting(http, ledger, turn_id)["approvals"]
    assert [r["approval_id"] for r in pending(http)] == [request["approval_id"]]

    wait_until(lambda: "approval webhook failed" in worker.log(), TURN_S, "the failed POST")
    assert decide(api.url, turn_id, request, "approve").status_code == 202

    completed(ledger, turn_id)
    assert sent_to(rdb) == ["ada@x.io"]
    assert worker.alive()


def test_a_webhook_that_never_answers_does_not_hold_the_turn(
    http: httpx.Client,
    api: ApiProcess,
    ledger: Ledger,
    rdb: redis.Redis,
    start: StartWorker,
    script: Script,
) -> None:
    """The webhook's TCP connect never completes (a blackhole): the run still ends waiting at
    once, and the approved call runs and the turn completes while the POST still hangs (it
    gives up after 5 s)."""
    with blackhole() as url:
        start(overrides={"DRES_APPROVAL_WEBHOOK": f"{url}/hook"})
        turn_id = enqueue(http, script([ADA, DONE]))
        [request] = waiting(http, ledger, turn_id)["approvals"]
        decided_at = time.monotonic()
        assert decide(api.url, turn_id, request, "approve").status_code == 202

        completed(ledger, turn_id)

        assert time.monotonic() - decided_at < WEBHOOK_TIMEOUT_S
    assert sent_to(rdb) == ["ada@x.io"]


def test_the_turn_and_the_pending_list_show_a_request_and_its_decision(
    http: httpx.Client,
    api: ApiProcess,
    ledger: Ledger,
    start: StartWorker,
    script: Script,
) -> None:
    """``GET /v1/approvals?status=pending`` lists the open request (newest first) until it is
    decided; ``GET /v1/turns/{id}`` lists the turn's requests with their decisions."""
    start()
    older = enqueue(http, script([ADA, DONE]))
    [old] = waiting(http, ledger, older)["approvals"]
    newer = enqueue(http, script([send("bob@x.io", "Hi"), DONE]))
    [new] = waiting(http, ledger, newer)["approvals"]

    listed = pending(http)
    assert [(r["turn_id"], r["approval_id"]) for r in listed] == [
        (newer, new["approval_id"]),
        (older, old["approval_id"]),
    ]
    for item, request in zip(listed, (new, old), strict=True):
        assert item["decision"] is None
        for field in ("tool", "input", "signature", "requested_at", "expires_at"):
            assert item[field] == request[field], field
        assert item["expires_at"] > item["requested_at"]

    assert decide(api.url, newer, new, "deny", reason="no", by="ops").status_code == 202

    assert [r["approval_id"] for r in pending(http)] == [old["approval_id"]]
    completed(ledger, newer)
    [decided] = turn(http, newer)["approvals"]
    assert (decided["decision"], decided["reason"], decided["by"]) == ("deny", "no", "ops")
    assert decided["decided_at"] >= decided["requested_at"]
    assert turn(http, older)["approvals"][0]["decision"] is None
