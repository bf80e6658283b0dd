"""The agent loop: resume prompts, both layers on resume, model errors (docs/models.md,
docs/semantics.md-7.7)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from harness import Harness
from sample_tools import SimulatedSoftLimit
from structlog.testing import capture_logs

from ledger import keys
from ledger.codec import Envelope
from ledger.events import Resumed, Text, TurnEnded
from ledger.note import COMPLETED_HEADER, INTERRUPTED_HEADER
from ledger.store import Ledger
from rigs import DONE
from worker.base.settings import load_settings
from worker.demo_tools import outbox
from worker.engine.history import NUDGE, build_messages
from worker.engine.models.base import ModelRequest, TextDelta, UserMessage

EMAIL = {"to": "ada@example.com", "subject": "Launch", "body": "Friday at 10."}
SEND = {"text": "Sending.", "tool_calls": [{"name": "send_email", "input": EMAIL}]}
DIE = {"tool_calls": [{"name": "write_then_die", "input": {"label": "half"}}]}
PAUSE = {"delay_s": 10, "tool_calls": [{"name": "async_lookup", "input": {"key": "pause"}}]}


@pytest.fixture
def h(client: redis.Redis, tmp_path: Path) -> Harness:
    return Harness(client, tmp_path)


def resume_request(h: Harness) -> ModelRequest:
    """The first model request after the turn's (only) resume."""
    return next(
        r
        for r in h.requests
        if any(isinstance(m, UserMessage) and m.text.startswith(NUDGE) for m in r.messages)
    )


def test_with_an_empty_journal_the_resume_prompt_is_byte_for_byte_the_one_without_the_note(
    client: redis.Redis, tmp_path: Path
) -> None:
    prompts = []
    for note_on in (True, False):
        client.flushall()
        h = Harness(client, tmp_path, settings=load_settings(journal_note=note_on))
        h.start([PAUSE, DONE])
        h.run_next(soft_limit_after=5)
        h.run_to_end()
        prompts.append(resume_request(h))
    with_note, without = prompts
    assert with_note == without
    assert with_note.messages[-1] == UserMessage(NUDGE)


def test_with_a_journal_the_note_follows_the_nudge_and_lists_both_sections(h: Harness) -> None:
    h.start([SEND, DIE, DONE])
    h.run_next()  # send_email completes, then write_then_die is cut off
    h.run_to_end()
    last = resume_request(h).messages[-1]
    assert isinstance(last, UserMessage)
    nudge, note = last.text.split("\n\n", 1)
    assert nudge == NUDGE
    assert COMPLETED_HEADER in note and INTERRUPTED_HEADER in note
    assert note.index(COMPLETED_HEADER) < note.index("send_email") < note.index(INTERRUPTED_HEADER)
    assert note.index(INTERRUPTED_HEADER) < note.index("write_then_die")
    [resumed] = [e for e in h.events("resumed") if isinstance(e, Resumed)]
    assert resumed.note == note


def test_the_history_of_a_resumed_run_marks_an_interrupted_call(h: Harness) -> None:
    h.start([SEND, DIE, DONE])
    h.run_next()
    h.run_to_end()
    results = [m for m in resume_request(h).messages if type(m).__name__ == "ToolResultMessage"]
    assert [r.tool for r in results] == ["send_email", "write_then_die"]  # type: ignore[attr-defined]
    assert "interrupted" in results[1].content and results[1].is_error  # type: ignore[attr-defined]


class FlakyLedger(Ledger):
    """A ledger whose first ``failures`` reads of a turn fail like a dropped connection."""

    def __init__(self, client: redis.Redis, failures: int) -> None:
        super().__init__(client)
        self.failures = failures

    def _pages(self, turn_id: str, first: str, limit: int | None) -> Iterator[Envelope]:
        if self.failures:
            self.failures -= 1
            raise redis.ConnectionError("connection reset by peer")
        yield from super()._pages(turn_id, first, limit)


def test_a_failed_read_for_the_note_resumes_without_it_and_logs_a_warning(h: Harness) -> None:
    h.start([SEND, PAUSE, DONE], on_resume="restart")
    h.run_next(soft_limit_after=5)
    with capture_logs() as logs:
        result = h.run_next(ledger=FlakyLedger(h.client, failures=1))
    assert result is not None and result.status == "completed"
    warnings = [entry for entry in logs if entry["log_level"] == "warning"]
    assert [w["event"] for w in warnings] == ["journal note unavailable; resuming without it"]
    [resumed] = [e for e in h.events("resumed") if isinstance(e, Resumed)]
    assert resumed.note is None
    assert len(outbox(h.client)) == 1  # the hard-block still had its snapshot


def test_an_unreadable_journal_stops_the_resumed_run_with_journal_unreadable(h: Harness) -> None:
    h.start([SEND, PAUSE, DONE], on_resume="restart")
    h.run_next(soft_limit_after=5)
    attempts = h.settings.journal_read_attempts
    result = h.run_next(ledger=FlakyLedger(h.client, failures=1 + attempts))
    assert result is not None
    assert (result.status, result.code, result.can_continue) == (
        "stopped",
        "journal_unreadable",
        True,
    )
    [ended] = [e for e in h.events("turn_ended") if isinstance(e, TurnEnded)]
    assert (ended.status, ended.code, ended.can_continue) == ("stopped", "journal_unreadable", True)
    assert len(outbox(h.client)) == 1
    assert h.ledger.meta(h.turn_id).status == "stopped"


def test_a_fresh_turn_runs_with_an_empty_journal_and_no_resume_prompt(h: Harness) -> None:
    h.start([SEND, DONE])
    h.run_to_end()
    assert h.events("resumed") == []
    assert all(
        m == UserMessage("do the task") or not isinstance(m, UserMessage)
        for m in h.requests[-1].messages
    )


def test_a_gateway_timeout_resumes_in_the_same_run_with_the_nudge_and_note(h: Harness) -> None:
    h.start([SEND, {"fail": "gateway_timeout"}, DONE])
    assert h.run_to_end().status == "completed"
    assert len(h.events("run_started")) == 1
    [resumed] = [e for e in h.events("resumed") if isinstance(e, Resumed)]
    assert resumed.cause == "transport_error" and resumed.note and "send_email" in resumed.note
    assert h.requests[-1].messages[-1] == UserMessage(f"{NUDGE}\n\n{resumed.note}")


def test_an_auth_error_fails_the_turn_without_resuming(h: Harness) -> None:
    h.start([{"fail": "auth"}, DONE])
    result = h.run_to_end()
    assert (result.status, result.code, result.can_continue) == ("stopped", "auth", True)
    assert h.events("resumed") == []


def test_a_rate_limit_stops_a_foreground_turn_with_no_automatic_continuation(h: Harness) -> None:
    h.start([{"fail": "rate_limit"}, DONE])
    result = h.run_to_end()
    assert (result.status, result.code, result.can_continue) == ("stopped", "rate_limit", True)


def test_a_rate_limit_resumes_a_background_turn_once_after_the_cooldown(h: Harness) -> None:
    h.start([{"fail": "rate_limit"}, DONE], mode="background")
    before = h.clock.t
    assert h.run_to_end().status == "completed"
    assert h.clock.t - before == h.settings.rate_limit_cooldown_s
    assert [e.cause for e in h.events("resumed")] == ["rate_limit"]  # type: ignore[attr-defined]


def test_a_runaway_turn_stops_at_the_model_call_limit(
    h: Harness, client: redis.Redis, tmp_path: Path
) -> None:
    h = Harness(client, tmp_path, settings=load_settings(max_model_calls=3))
    h.start([PAUSE | {"delay_s": 0}] * 5)
    result = h.run_to_end()
    assert (result.status, result.code) == ("stopped", "loop_limit")


def test_a_stop_request_ends_the_turn_as_cancelled_at_a_safe_point(h: Harness) -> None:
    h.start([SEND, SEND, DONE])
    run_loop = h.loop
    h.loop = lambda ledger=None: _cancelling(run_loop(ledger))  # type: ignore[method-assign]
    result = h.run_to_end()
    assert (result.status, result.code) == ("stopped", "cancelled")
    assert h.ledger.meta(h.turn_id).status == "stopped"


def _cancelling(loop: Any) -> Any:
    calls = iter([False, False, True])
    loop.is_cancelled = lambda turn_id: next(calls, True)
    return loop


class CutMidStream:
    """Streams part of its text, then the soft limit lands inside the stream."""

    name = "cut"

    def stream(self, request: ModelRequest) -> Iterator[Any]:
        yield TextDelta("Here is the first half")
        raise SimulatedSoftLimit("soft limit mid-stream")


def test_text_an_interrupted_attempt_streamed_is_carried_into_the_resumed_history(
    h: Harness,
) -> None:
    h.start([DONE])
    loop = h.loop()
    loop.make_model = lambda spec: CutMidStream()

    run = h.lifecycle.claim(h.turn_id, h.pending or "")
    assert run is not None
    with pytest.raises(SimulatedSoftLimit):
        loop.run(run)
    h.pending = h.lifecycle.hand_over(run)
    h.run_to_end()
    texts = [m.text for m in resume_request(h).messages if type(m).__name__ == "AssistantMessage"]  # type: ignore[union-attr]
    assert texts == ["Here is the first half"]


def test_a_clear_drops_the_streamed_text_from_the_history() -> None:
    from factories import base, clear, text, turn_started

    from ledger.events import ModelStart

    events = [
        turn_started(),
        ModelStart(**base(), step=0),
        text("abandoned"),
        clear(),
        text("kept"),
    ]
    assert [getattr(m, "text", None) for m in build_messages(events)] == ["hello", "kept"]


def test_streamed_text_is_recorded_in_several_text_events(h: Harness) -> None:
    long = "word " * 300  # over DRES_TEXT_FLUSH_CHARS: written in several events
    h.start([{"text": long}])
    h.run_to_end()
    texts = [e.text for e in h.events("text") if isinstance(e, Text)]
    assert len(texts) > 1 and "".join(texts) == long


def test_a_chunk_that_reads_through_the_process_cache_blocks_the_repeat_the_same(
    h: Harness,
) -> None:
    # A soft limit cuts the first chunk after send_email landed; the next chunk of the same
    # process reads only the new entries, and its snapshot still has the completed call.
    h.start([SEND, PAUSE, DONE], on_resume="restart")
    h.run_next(soft_limit_after=5)
    h.cache.events(h.turn_id)  # the process read the turn before the handover was recorded
    result = h.run_next()
    assert result is not None and result.status == "completed"
    assert h.cache.hits >= 1
    assert len(outbox(h.client)) == 1
    assert [e.type for e in h.events("tool_blocked")] == ["tool_blocked"]


def test_a_resumed_run_writes_resumed_with_its_first_model_start_in_that_order(
    h: Harness,
) -> None:
    h.start([PAUSE, DONE])
    h.run_next(soft_limit_after=5)
    h.run_to_end()
    types = [e.type for e in h.events()]
    resumed = types.index("resumed")
    assert types[resumed - 1 : resumed + 2] == ["run_started", "resumed", "model_start"]


def test_a_stop_flag_set_before_the_claim_ends_the_run_at_once_with_resumed_recorded(
    h: Harness,
) -> None:
    # The claim's metadata read sees the flag: no model call, no tool, and the held resumed
    # event is written before the run's end.
    h.start([PAUSE, DONE])
    h.run_next(soft_limit_after=5)
    h.client.set(keys.turn_cancel(h.turn_id), "1")
    asked = len(h.requests)
    result = h.run_to_end()
    assert (result.status, result.code) == ("stopped", "cancelled")
    assert len(h.requests) == asked
    types = [e.type for e in h.events()]
    assert types[-4:] == ["run_started", "resumed", "run_ended", "turn_ended"]
