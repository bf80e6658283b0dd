"""``/v1/schedules`` and ``dres schedule`` (docs/http-api.md "Schedules", docs/commands.md): made,
read, listed in pages and deleted; a malformed ``every``, a naive ``at`` and both or neither of
them refused with a 422 (exit 2, one line) naming them, nothing recorded. On the session's real
``dres api`` server and the CLI as a subprocess, no worker: no tick fires here."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest
import redis
from api_support import Cli, redis_state

pytestmark = pytest.mark.redis_server

LATER = "2099-01-01T09:00:00+02:00"


def make(http: httpx.Client, **body: object) -> dict[str, object]:
    reply = http.post("/v1/schedules", json={"message": "summarise the tickets", **body})
    assert reply.status_code == 201, reply.text
    made: dict[str, object] = reply.json()
    return made


def test_a_schedule_is_made_read_listed_and_deleted(http: httpx.Client) -> None:
    before = datetime.now(UTC).timestamp()
    made = make(http, every=3600, tenant="acme", catch_up="none")
    assert set(made) == {"schedule_id", "next_at"}
    next_at = datetime.fromisoformat(str(made["next_at"]))
    assert before + 3600 - 5 <= next_at.timestamp() <= datetime.now(UTC).timestamp() + 3600 + 5
    read = http.get(f"/v1/schedules/{made['schedule_id']}")
    assert read.status_code == 200, read.text
    assert read.json() == {
        "schedule_id": made["schedule_id"],
        "message": "summarise the tickets",
        "conversation_id": None,
        "model": None,
        "tenant": "acme",
        "at": None,
        "every": 3600,
        "catch_up": "none",
        "next_at": made["next_at"],
        "last_turn_id": None,
    }
    once = make(http, at=LATER, conversation_id="conv-9")
    assert once["next_at"] == "2099-01-01T07:00:00.000Z"
    cron = make(http, every="0 9 * * 1-5")
    assert http.delete(f"/v1/schedules/{make(http, every=274.0)['schedule_id']}").status_code == 204
    assert http.get(f"/v1/schedules/{cron['schedule_id']}").json()["every"] == "0 9 * * 1-5"
    listed = http.get("/v1/schedules").json()
    assert [s["schedule_id"] for s in listed["items"]] == [
        cron["schedule_id"],
        once["schedule_id"],
        made["schedule_id"],
    ]
    assert listed["next_cursor"] is None
    assert http.delete(f"/v1/schedules/{once['schedule_id']}").status_code == 204
    assert http.get(f"/v1/schedules/{once['schedule_id']}").status_code == 404
    assert http.delete(f"/v1/schedules/{once['schedule_id']}").status_code == 404
    assert len(http.get("/v1/schedules").json()["items"]) == 2


def test_the_list_pages_through_every_schedule_once(http: httpx.Client) -> None:
    made = [make(http, every=60)["schedule_id"] for _ in range(5)]
    seen: list[object] = []
    cursor = None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = http.get("/v1/schedules", params=params).json()
        seen += [s["schedule_id"] for s in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(map(str, seen)) == sorted(made) and len(seen) == 5


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"every": "61 * * * *"}, ["every", "minute field '61' is out of 0-59"]),
        ({"every": "0 0 * *"}, ["every", "5 fields"]),
        ({"every": 0}, ["every"]),
        ({"every": "-3"}, ["every"]),
        ({"at": "2099-01-01T09:00:00"}, ["at", "timezone"]),
        ({"at": "not a time"}, ["at"]),
        ({}, ["at", "every", "exactly one"]),
        ({"at": LATER, "every": 60}, ["at", "every", "exactly one"]),
        ({"at": None, "every": 60}, ["at", "leave it out"]),
        ({"at": 1893456000}, ["at"]),
        ({"every": True}, ["every"]),
        ({"every": 2.5}, ["every"]),
        ({"every": " 0 * * * *"}, ["every", "none before or after"]),
        ({"every": 60, "catch_up": "all"}, ["catch_up"]),
        ({"every": 60, "message": "   "}, ["message"]),
        ({"every": 60, "tenant": "a b"}, ["tenant"]),
        ({"every": 60, "conversation_id": ".."}, ["conversation_id"]),
    ],
)
def test_a_bad_schedule_is_a_422_naming_the_field_and_records_nothing(
    http: httpx.Client, rdb: redis.Redis, body: dict[str, object], words: list[str]
) -> None:
    before = redis_state(rdb)
    reply = http.post("/v1/schedules", json={"message": "tick", **body})
    assert reply.status_code == 422, reply.text
    detail = reply.json()["detail"]
    assert all(w.lower() in detail.lower() for w in words), detail
    assert redis_state(rdb) == before


def test_an_unknown_or_malformed_schedule_id_is_a_404_or_a_422(http: httpx.Client) -> None:
    assert http.get("/v1/schedules/sched_none").status_code == 404
    assert http.get("/v1/schedules/a%20b").status_code == 422


def test_the_cli_adds_lists_and_removes_a_schedule(cli: Cli, redis_url: str) -> None:
    added = cli("schedule", "add", "check the build", "--every", "*/5 * * * *", "--tenant", "t1")
    assert added.returncode == 0, added.stderr
    schedule_id, next_at = added.stdout.split()
    assert datetime.fromisoformat(next_at).minute % 5 == 0
    listed = cli("schedule", "list")
    assert listed.returncode == 0 and schedule_id in listed.stdout, listed.stderr
    assert "every */5 * * * *" in listed.stdout
    removed = cli("schedule", "rm", schedule_id)
    assert removed.returncode == 0, removed.stderr
    assert "(no schedules)" in cli("schedule", "list").stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--every", "0 25 * * *"], "every: hour field '25' is out of 0-23"),
        (["--at", "2099-01-01T09:00:00"], "at:"),
        ([], "one of the arguments --at --every is required"),
        (["--at", LATER, "--every", "60"], "not allowed with"),
    ],
)
def test_the_cli_refuses_bad_input_with_one_line_and_exit_2(
    cli: Cli, redis_url: str, args: list[str], words: str
) -> None:
    done = cli("schedule", "add", "tick", *args)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and words in done.stderr, done.stderr
    assert done.stdout == ""


def test_the_cli_rm_of_an_unknown_schedule_is_exit_2(cli: Cli, redis_url: str) -> None:
    done = cli("schedule", "rm", "sched_none")
    assert done.returncode == 2 and "unknown schedule" in done.stderr
