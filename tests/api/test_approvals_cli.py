"""Approvals from the command line (docs/commands.md, docs/semantics.md, docs/http-api.md): ``dres
approvals``, ``dres approve``, ``dres deny``, what ``dres watch`` shows of a turn that waited, and
the start-up refusals of a bad DRES_APPROVAL. Turns are made to wait by the in-process harness on
the test's Redis (``api_support.Approvals``); the CLI runs as a subprocess.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import redis
from api_support import APPROVERS, Approvals, Cli

from ledger.events import ApprovalDecided
from rigs import EMAIL, ROOT
from worker.demo_tools import outbox

pytestmark = pytest.mark.redis_server

#: seconds a line of a live ``dres watch`` may take to come
LINE_S = 15.0


@pytest.fixture
def ap(rdb: redis.Redis, tmp_path: Path, dres_env: dict[str, str]) -> Approvals:
    return Approvals(rdb, tmp_path)


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def decided(ap: Approvals, turn_id: str) -> list[ApprovalDecided]:
    return [e for e in ap.events(turn_id, "approval_decided") if isinstance(e, ApprovalDecided)]


# -- dres approvals -------------------------------------------------------------------------------


def test_dres_approvals_lists_the_waiting_requests_newest_first_as_a_table_and_as_json(
    cli: Cli, ap: Approvals
) -> None:
    empty = cli("approvals")
    assert empty.returncode == 0, empty.stderr
    assert empty.stdout.strip() == "(no approval requests waiting)"
    assert json.loads(cli("approvals", "--json").stdout) == []

    made = [ap.wait() for _ in range(2)]

    table = cli("approvals")
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split() == ["turn_id", "approval_id", "tool", "input"]
    assert [row.split()[:3] for row in rows] == [
        [turn_id, request.approval_id, "send_email"] for turn_id, request in reversed(made)
    ]
    assert all(EMAIL["to"] in row for row in rows)

    listed = json.loads(cli("approvals", "--json").stdout)
    assert [(a["turn_id"], a["approval_id"]) for a in listed] == [
        (turn_id, request.approval_id) for turn_id, request in reversed(made)
    ]
    assert listed[0]["input"] == EMAIL and listed[0]["signature"] == made[-1][1].signature
    assert [
        a["approval_id"] for a in json.loads(cli("approvals", "--json", "--limit", "1").stdout)
    ] == [made[-1][1].approval_id]


# -- dres approve / dres deny ---------------------------------------------------------------------


def test_dres_approve_takes_the_decision_by_cli_and_the_turn_runs_the_call_once(
    cli: Cli, ap: Approvals, rdb: redis.Redis
) -> None:
    turn_id, request = ap.wait()

    done = cli("approve", turn_id, request.approval_id)

    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "approved; the turn resumes"
    (decision,) = decided(ap, turn_id)
    assert (decision.decision, decision.by, decision.reason) == ("approve", "cli", "")
    assert ap.finish(turn_id) == "completed"
    assert [m["to"] for m in outbox(rdb)] == [EMAIL["to"]]
    assert json.loads(cli("approvals", "--json").stdout) == []


def test_dres_deny_records_the_reason_and_who_and_nothing_runs(
    cli: Cli, ap: Approvals, rdb: redis.Redis
) -> None:
    turn_id, request = ap.wait()

    done = cli("deny", turn_id, request.approval_id, "--reason", "wrong list", "--by", "ada")

    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "denied; the turn resumes"
    (decision,) = decided(ap, turn_id)
    assert (decision.decision, decision.by, decision.reason) == ("deny", "ada", "wrong list")
    assert ap.finish(turn_id) == "completed"
    assert outbox(rdb) == []


def test_a_refused_decision_exits_1_saying_refused_and_why(cli: Cli, ap: Approvals) -> None:
    turn_id, request = ap.wait()
    assert cli("deny", turn_id, request.approval_id).returncode == 0

    again = cli("approve", turn_id, request.approval_id)
    assert again.returncode == 1, again.stdout + again.stderr
    assert again.stdout.strip() == (
        f"refused: approval {request.approval_id} was already decided: deny"
    )

    other = cli("approve", turn_id, request.approval_id, "--signature", "0" * 64)
    assert other.returncode == 1 and other.stdout.startswith("refused: "), other.stdout
    assert len(decided(ap, turn_id)) == 1


def test_a_decision_on_an_unknown_turn_or_request_exits_2_with_one_line(
    cli: Cli, ap: Approvals
) -> None:
    unknown = cli("approve", "turn_nope", "apr_1")
    assert unknown.returncode == 2, unknown.stdout + unknown.stderr
    line = one_line(unknown.stderr)
    assert line.startswith("dres: ") and "turn_nope" in line
    assert unknown.stdout == ""

    turn_id, _ = ap.wait()
    missing = cli("deny", turn_id, "apr_nope", "--reason", "no")
    assert missing.returncode == 2, missing.stdout + missing.stderr
    assert "apr_nope" in one_line(missing.stderr)
    assert missing.stdout == ""
    assert decided(ap, turn_id) == []


# -- dres watch -----------------------------------------------------------------------------------


def test_with_approvers_dres_approve_needs_an_approvers_token_and_records_its_name(
    cli: Cli, ap: Approvals
) -> None:
    """DRES_APPROVER_TOKENS set: no --token, an unknown one, or a --by naming another is exit 2
    with one line and decides nothing; an approver's --token decides, by its NAME."""
    turn_id, request = ap.wait()
    env = {"DRES_APPROVER_TOKENS": json.dumps(APPROVERS)}
    refused = {
        "--token": cli("approve", turn_id, request.approval_id, env=env),
        "approver": cli("approve", turn_id, request.approval_id, "--token", "n" * 40, env=env),
        "--by": cli(
            "approve",
            turn_id,
            request.approval_id,
            "--token",
            APPROVERS["ana"],
            "--by",
            "ops",
            env=env,
        ),
    }
    for named, done in refused.items():
        assert done.returncode == 2, (named, done.stdout, done.stderr)
        assert named in one_line(done.stderr), named
    assert decided(ap, turn_id) == []

    done = cli("approve", turn_id, request.approval_id, "--token", APPROVERS["ops"], env=env)

    assert done.returncode == 0, done.stdout + done.stderr
    (decision,) = decided(ap, turn_id)
    assert (decision.decision, decision.by) == ("approve", "ops")


def test_without_approvers_a_token_given_to_dres_deny_is_exit_2(cli: Cli, ap: Approvals) -> None:
    turn_id, request = ap.wait()
    done = cli("deny", turn_id, request.approval_id, "--token", APPROVERS["ana"])
    assert done.returncode == 2, done.stdout + done.stderr
    assert "DRES_APPROVER_TOKENS" in one_line(done.stderr)
    assert decided(ap, turn_id) == []


def test_dres_watch_shows_the_waiting_line_and_the_decision_of_a_turn_that_waited(
    cli: Cli, ap: Approvals
) -> None:
    turn_id, request = ap.wait()
    assert cli("approve", turn_id, request.approval_id, "--by", "ada").returncode == 0
    assert ap.finish(turn_id) == "completed"

    person = cli("watch", turn_id)
    assert person.returncode == 0, person.stdout + person.stderr
    lines = person.stdout.splitlines()
    waiting = [line for line in lines if line.startswith("  [waiting] send_email")]
    assert len(waiting) == 1, lines
    assert f"dres approve {turn_id} {request.approval_id}" in waiting[0]
    assert f"  [approve] approval {request.approval_id} by ada" in lines
    assert "Resuming… (a person decided)" in lines
    assert lines[-1] == "Completed"

    raw = cli("watch", turn_id, "--events")
    assert raw.returncode == 0, raw.stdout + raw.stderr
    kinds = [line.split()[2] for line in raw.stdout.splitlines() if len(line.split()) > 2]
    at = kinds.index("approval_requested")
    assert kinds[at : at + 4] == [
        "approval_requested",
        "run_ended",
        "approval_decided",
        "run_started",
    ]


def test_dres_watch_shows_a_denied_call_as_refused_by_a_person_with_the_reason(
    cli: Cli, ap: Approvals
) -> None:
    turn_id, request = ap.wait()
    assert cli("deny", turn_id, request.approval_id, "--reason", "wrong list").returncode == 0
    assert ap.finish(turn_id) == "completed"

    person = cli("watch", turn_id)

    assert person.returncode == 0, person.stdout + person.stderr
    lines = person.stdout.splitlines()
    assert f"  [deny] approval {request.approval_id} by cli: wrong list" in lines
    (refused,) = [line for line in lines if line.startswith("  [refused] send_email")]
    assert refused.endswith("(denied by a person: wrong list), not run"), refused
    assert "matched" not in refused


def test_dres_watch_of_a_waiting_turn_says_so_and_follows_it_through_the_decision(
    dres_env: dict[str, str], cli: Cli, ap: Approvals
) -> None:
    turn_id, request = ap.wait()
    watching = subprocess.Popen(
        [sys.executable, "-m", "worker.edges.cli", "watch", turn_id],
        cwd=ROOT,
        env=dres_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert watching.stdout is not None
        for line in watching.stdout:
            lines.put(line.rstrip("\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        seen: list[str] = []
        while not any(line.startswith("  [waiting] send_email") for line in seen):
            seen.append(lines.get(timeout=LINE_S))
        assert watching.poll() is None, "dres watch ended while the turn waits"

        assert cli("approve", turn_id, request.approval_id).returncode == 0
        assert ap.finish(turn_id) == "completed"
        assert watching.wait(timeout=LINE_S) == 0
    finally:
        if watching.poll() is None:
            watching.kill()
            watching.wait()
    reader.join(timeout=LINE_S)
    while not lines.empty():
        seen.append(lines.get())
    assert seen[-1] == "Completed", seen


# -- bad DRES_APPROVAL ----------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["a b", "send_email,", "send_email;rm"])
def test_a_malformed_dres_approval_is_refused_at_start_with_one_line_naming_it(
    cli: Cli, value: str
) -> None:
    done = cli("approvals", env={"DRES_APPROVAL": value})
    assert done.returncode == 2, done.stdout + done.stderr
    line = one_line(done.stderr)
    assert "DRES_APPROVAL" in line and value in line
