"""A turn's token usage in ``GET /v1/turns/{id}`` and its budget (docs/http-api.md,
docs/semantics.md), on a real prefork worker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import redis
from api_support import Cli, post_turn, status_of

from ledger import keys
from ledger.store import Ledger
from ledger.usage import UsageFold
from rigs import Script, ended, of, show, wait_for
from tests.support.fixtures import StartWorker

LOOKUP = {"tool_calls": [{"name": "get_ticket", "input": {"ticket_id": "T-1"}}]}
#: what every step of the script reports as spent: 600 tokens a call
SPENT = {"input_tokens": 450, "output_tokens": 150}


def step(**fields: Any) -> dict[str, Any]:
    return {**fields, "usage": SPENT}


def test_a_1000_token_budget_stops_a_turn_after_two_600_token_calls_and_continue_completes_it(
    start_worker: StartWorker, http: httpx.Client, script: Script, ledger: Ledger, cli: Cli
) -> None:
    start_worker(overrides={"DRES_TURN_TOKEN_BUDGET": "1000"})
    steps = [step(**LOOKUP), step(**LOOKUP), step(text="Done.")]
    turn_id = post_turn(http, model=script(steps))["turn_id"]

    events = wait_for(ledger, turn_id, ended(), what="the turn's stop")
    [stop] = of(events, "turn_ended")
    assert (stop.status, stop.code, stop.can_continue) == ("stopped", "budget", True), show(events)
    assert [e.usage.total for e in of(events, "model_done")] == [600, 600]
    status = status_of(http, turn_id)
    assert (status["code"], status["can_continue"]) == ("budget", True)
    assert status["usage"] == {"input_tokens": 900, "output_tokens": 300}

    refused = http.post(f"/v1/turns/{turn_id}/continue", json={"auto": True})
    assert refused.status_code == 409, "a budget stop is never continued automatically"
    accepted = http.post(f"/v1/turns/{turn_id}/continue", json={"auto": False})
    assert accepted.status_code == 202, accepted.text

    events = wait_for(ledger, turn_id, ended("completed"), what="the continued turn's end")
    assert len(of(events, "model_done")) == 3, show(events)
    assert status_of(http, turn_id)["usage"] == {"input_tokens": 1350, "output_tokens": 450}
    done = cli("watch", turn_id, "--no-auto-continue")
    assert done.stdout.rstrip().splitlines()[-1] == "Completed · 1,350 tokens in, 450 out"


def commands_on(redis_url: str, key: str, during: Callable[[], object]) -> list[str]:
    """The commands any client sent naming ``key`` while ``during()`` ran, as the real server's
    MONITOR saw them (up to a marker sent after it)."""
    watcher = redis.Redis.from_url(redis_url)
    marker = f"end-of-{key}"
    with watcher.monitor() as monitor:
        during()
        watcher.echo(marker)
        seen: list[str] = []
        while marker not in (command := monitor.next_command()["command"]):
            if key in command:
                seen.append(command)
    watcher.close()
    return seen


def test_the_status_reports_usage_from_the_turns_metadata_without_reading_its_stream(
    start_worker: StartWorker, http: httpx.Client, script: Script, ledger: Ledger, redis_url: str
) -> None:
    start_worker()
    steps = [step(**LOOKUP), {**LOOKUP, "usage": {"input_tokens": 7, "output_tokens": 3}}]
    turn_id = post_turn(http, model=script([*steps, step(text="Done.")]))["turn_id"]
    events = wait_for(ledger, turn_id, ended("completed"), what="the turn's end")
    summed = UsageFold().feed(events).spent().model_dump()
    assert summed == {"input_tokens": 907, "output_tokens": 303}, show(events)

    answers: list[dict[str, Any]] = []
    stream = keys.turn_events(turn_id)
    read = commands_on(redis_url, stream, lambda: answers.append(status_of(http, turn_id)))
    assert answers[0]["usage"] == summed
    assert read == [], "the status read the turn's stream"

    # a turn recorded before its metadata kept the totals: summed from its stream, as before
    ledger.client.hdel(keys.turn_meta(turn_id), "input_tokens", "output_tokens")
    read = commands_on(redis_url, stream, lambda: answers.append(status_of(http, turn_id)))
    assert answers[1]["usage"] == summed
    assert any("XRANGE" in command for command in read), read
