"""GET /v1/turns/{id}/events (docs/http-api.md): every ledger event once, resumable, closing at the
end.

The turns run on a real prefork worker and span chunks (a 1 s step against a 0.5 s soft limit),
so the events a client misses while disconnected include a chunk boundary. Each stream is
compared with the ledger itself: the same stream ids, event types and event bodies, in order.
"""

from __future__ import annotations

import time

import httpx
import pytest
from api_support import Comment, Sse, as_ledger, ledger_form, post_turn, read_sse, serve, sse_events
from structlog.testing import capture_logs

from ledger import keys
from ledger.store import Ledger
from rigs import MULTI_CHUNK, Script, WorkerProcess, crashed_stop
from worker.base.settings import Settings
from worker.edges.http.app import create_api
from worker.edges.runtime import Runtime

ENDED = {"completed", "stopped"}


def events_url(turn_id: str) -> str:
    return f"/v1/turns/{turn_id}/events"


def read_until_first_tool_done(http: httpx.Client, turn_id: str) -> list[Sse]:
    """Follow the turn's stream until its first tool result, then drop the connection."""
    seen: list[Sse] = []
    with http.stream("GET", events_url(turn_id)) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for message in sse_events(response):
            seen.append(message)
            if message.event == "tool_done":
                break
    return seen


def assert_resumed_without_gap_or_duplicate(
    before: list[Sse], after: list[Sse], ledger: Ledger, turn_id: str
) -> None:
    assert as_ledger(before + after) == ledger_form(ledger.read_turn(turn_id))
    assert after[-1].event == "turn_ended" and after[-1].json["status"] == "completed"
    assert [m.event for m in before + after].count("turn_ended") == 1
    # What was missed crossed the chunk boundary and held text and tool calls.
    assert any(m.event == "run_ended" and m.json["reason"] == "soft_limit" for m in after)
    assert {"text", "tool_start", "tool_done"} <= {m.event for m in before}
    assert {"run_started", "text", "tool_start", "tool_done"} <= {m.event for m in after}
    assert max(m.json["chunk"] for m in after) >= 1


def test_a_client_reconnecting_with_last_event_id_gets_exactly_the_events_it_missed(
    worker: WorkerProcess, http: httpx.Client, script: Script, ledger: Ledger
) -> None:
    turn_id = post_turn(http, model=script(MULTI_CHUNK))["turn_id"]
    before = read_until_first_tool_done(http, turn_id)
    assert ledger.meta(turn_id).status not in ENDED, "the client left after the turn ended"

    with http.stream("GET", events_url(turn_id), headers={"Last-Event-ID": before[-1].id}) as r:
        assert r.status_code == 200
        after = list(sse_events(r))  # returns only because the server closes the stream

    assert_resumed_without_gap_or_duplicate(before, after, ledger, turn_id)


def test_a_client_reconnecting_with_the_after_parameter_gets_exactly_the_events_it_missed(
    worker: WorkerProcess, http: httpx.Client, script: Script, ledger: Ledger
) -> None:
    turn_id = post_turn(http, model=script(MULTI_CHUNK))["turn_id"]
    before = read_until_first_tool_done(http, turn_id)
    assert ledger.meta(turn_id).status not in ENDED, "the client left after the turn ended"

    with http.stream("GET", events_url(turn_id), params={"after": before[-1].id}) as r:
        assert r.status_code == 200
        after = list(sse_events(r))

    assert_resumed_without_gap_or_duplicate(before, after, ledger, turn_id)


def test_the_stream_closes_after_turn_ended_and_a_later_reconnect_replays_what_was_missed(
    worker: WorkerProcess, http: httpx.Client, script: Script, ledger: Ledger
) -> None:
    turn_id = post_turn(http, model=script(MULTI_CHUNK))["turn_id"]
    with http.stream("GET", events_url(turn_id)) as response:
        whole = list(sse_events(response))
    assert whole[-1].event == "turn_ended"
    assert as_ledger(whole) == ledger_form(ledger.read_turn(turn_id))

    cut = next(i for i, m in enumerate(whole) if m.event == "tool_done")
    with http.stream("GET", events_url(turn_id), headers={"Last-Event-ID": whole[cut].id}) as r:
        assert list(sse_events(r)) == whole[cut + 1 :]
    with http.stream("GET", events_url(turn_id), headers={"Last-Event-ID": whole[-1].id}) as r:
        assert r.status_code == 200
        assert list(sse_events(r)) == []


def test_an_idle_stream_sends_keepalive_comments_and_closes_when_the_turn_is_stopped(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In process, the keepalive interval cut from 15 s to 0.2 s; no worker, so it stays queued."""
    monkeypatch.setattr("worker.edges.http.sse.SSE_KEEPALIVE_S", 0.2)
    with serve(create_api(settings)) as url, httpx.Client(base_url=url, timeout=5) as http:
        turn_id = post_turn(http)["turn_id"]
        with http.stream("GET", events_url(turn_id)) as response:
            items = read_sse(response)
            first = next(items)
            assert isinstance(first, Sse) and first.event == "turn_started"
            started = time.monotonic()
            assert next(items) == Comment("keepalive")
            assert time.monotonic() - started < 2
            stop = http.post(f"/v1/turns/{turn_id}/stop")
            assert stop.status_code == 202, stop.text
            rest = [item for item in items if isinstance(item, Sse)]
    assert [m.event for m in rest] == ["turn_ended"]
    assert (rest[0].json["status"], rest[0].json["code"]) == ("stopped", "cancelled")


def test_the_stream_of_a_continued_turn_stays_open_past_its_earlier_stop(
    http: httpx.Client, runtime: Runtime, ledger: Ledger
) -> None:
    """A turn_ended that a Continue superseded does not end the stream; the final one does."""
    turn_id = crashed_stop(runtime)
    assert http.post(f"/v1/turns/{turn_id}/continue", json={"auto": False}).status_code == 202
    recorded = len(ledger.read_turn(turn_id))

    with http.stream("GET", events_url(turn_id)) as response:
        messages = sse_events(response)
        replayed = [next(messages) for _ in range(recorded)]
        assert replayed[-1].event == "turn_ended" and replayed[-1].json["status"] == "stopped"
        # The turn is queued again; no worker runs it, so Stop cancels it before it runs.
        assert http.post(f"/v1/turns/{turn_id}/stop").status_code == 202
        rest = list(messages)

    assert [(m.event, m.json["status"], m.json["code"]) for m in rest] == [
        ("turn_ended", "stopped", "cancelled")
    ]
    assert as_ledger(replayed + rest) == ledger_form(ledger.read_turn(turn_id))


def test_an_unreadable_entry_in_the_stream_is_skipped_with_a_warning_and_the_stream_goes_on(
    settings: Settings, runtime: Runtime, ledger: Ledger
) -> None:
    """In process, to read the API's log: an entry no event decodes from (docs/events.md)."""
    turn_id = crashed_stop(runtime)
    runtime.redis.xadd(keys.turn_events(turn_id), {"e": b'{"type": "text", "v": 1'})
    with (
        capture_logs() as logs,
        serve(create_api(settings)) as url,
        httpx.Client(base_url=url, timeout=5) as http,
        http.stream("GET", events_url(turn_id)) as response,
    ):
        streamed = list(sse_events(response))  # returns: the skipped entry still ends the stream

    assert as_ledger(streamed) == ledger_form(ledger.read_turn(turn_id))
    [skipped] = [e for e in logs if e["event"] == "skipped an unreadable entry"]
    assert (skipped["log_level"], skipped["turn_id"]) == ("warning", turn_id)
