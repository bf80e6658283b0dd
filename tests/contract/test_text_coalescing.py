"""Coalesced streaming: the recorder writes a window's text deltas as one ``text`` event, before
anything else of the run, and an interrupt never leaves streamed text unwritten.

Each test runs on fakeredis and on a real redis-server (the ``client`` fixture), with the run's
own flusher thread (a prefork process's) and the process's shared one (a gevent worker's,
``worker.engine.flushes``, handed to each run as its runtime hands it).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
from harness import Harness
from sample_tools import SimulatedSoftLimit

from ledger.events import Event, ModelDone, ModelStart, Resumed, RunEnded, Text, ToolStart
from rigs import poll
from worker.base.settings import load_settings
from worker.engine.flushes import SharedFlusher
from worker.engine.history import Conversation
from worker.engine.loop import AgentLoop
from worker.engine.models import make_model
from worker.engine.models.base import AssistantMessage
from worker.engine.recorder import Recorder

#: a window no test waits out: text reaches the ledger only by size or before another event
NEVER_MS = 600_000
LONG = "".join(f"{i:04d}" for i in range(60))  # 240 characters, 60 deltas of 4


@pytest.fixture(params=["own", "shared"])
def flusher(request: pytest.FixtureRequest) -> SharedFlusher | None:
    """Who writes a window's text: the run's own flusher thread (None), or the process's shared
    one (as a gevent worker's runtime hands it to each run)."""
    return SharedFlusher() if request.param == "shared" else None


@pytest.fixture
def h(client: redis.Redis, tmp_path: Path, flusher: SharedFlusher | None) -> Harness:
    settings = load_settings(journal_read_backoff_s=0, text_flush_ms=NEVER_MS)
    harness = Harness(client, tmp_path, settings=settings)
    harness.flusher = flusher
    return harness


def recorder_of(h: Harness, *, flush_s: float, flush_chars: int = 512) -> Recorder:
    h.start([{"text": "unused"}])
    assert h.pending is not None
    run = h.lifecycle.claim(h.turn_id, h.pending)
    assert run is not None
    return Recorder(
        h.ledger,
        run,
        h.clock,
        h.ids,
        [],
        flush_s=flush_s,
        flush_chars=flush_chars,
        shared=h.flusher,
    )


def texts(h: Harness) -> list[str]:
    return [e.text for e in h.events("text") if isinstance(e, Text)]


def kinds(h: Harness) -> list[str]:
    return [e.type for e in h.events() if e.type in ("text", "model_done", "tool_start")]


def test_buffered_text_is_written_when_its_window_ends_with_nothing_else_recorded(
    h: Harness,
) -> None:
    recorder = recorder_of(h, flush_s=0.02)
    for delta in ("Hel", "lo, ", "world"):
        recorder.stream_text(delta)
    try:
        written = poll(lambda: "".join(texts(h)) or None, timeout=5)
    finally:
        recorder.close()
    assert written == "Hello, world"
    assert len(texts(h)) <= 3


def test_a_stream_that_goes_quiet_is_written_long_before_its_window_ends(h: Harness) -> None:
    """A steady stream, then silence (a tool call coming, the answer's end): its text is written
    once the stream has been quiet for a fifth of the window, not when the window ends; and the
    steady deltas before, whose gaps never reached that, are still one event."""
    window_s = 8.0
    recorder = recorder_of(h, flush_s=window_s)
    try:
        for delta in ("The ", "answer ", "is ", "42", "."):
            recorder.stream_text(delta)
            time.sleep(0.02)  # the stream's pace (its input), not a wait for state
        # the window ends 8 s after the first delta; the quiet, 1.6 s after the last one
        written = poll(lambda: texts(h) or None, timeout=window_s / 2)
    finally:
        recorder.close()
    assert written == ["The answer is 42."]


def test_buffered_text_is_written_at_its_size_bound_in_one_event(h: Harness) -> None:
    recorder = recorder_of(h, flush_s=NEVER_MS / 1000, flush_chars=10)
    for delta in ("abcd", "efgh", "ijkl", "mn"):
        recorder.stream_text(delta)
    recorder.close()
    assert texts(h) == ["abcdefghijkl"]
    assert recorder.buffered_chars == 2


@pytest.mark.parametrize("kind", ["model_done", "tool_start"])
def test_buffered_text_is_written_before_the_next_event_the_run_records(
    h: Harness, kind: str
) -> None:
    recorder = recorder_of(h, flush_s=NEVER_MS / 1000)
    for delta in ("I will ", "send it."):
        recorder.stream_text(delta)
    assert texts(h) == []
    if kind == "model_done":
        recorder.record(ModelDone, tool_calls=0)
    else:
        start = recorder.make(ToolStart, call_id="c1", tool="send_email", signature="s")
        recorder.record_many([start])
    recorder.close()
    assert kinds(h) == ["text", kind]
    assert texts(h) == ["I will send it."]
    assert [e.type for e in recorder.events] == ["text", kind]


def test_the_end_of_a_run_takes_its_held_events_and_buffered_text_in_order(h: Harness) -> None:
    recorder = recorder_of(h, flush_s=NEVER_MS / 1000)
    recorder.hold(Resumed, cause="next_chunk", note=None)
    recorder.stream_text("half an ans")
    recorder.stream_text("wer")
    unwritten = recorder.take_unwritten()
    assert [e.type for e in unwritten] == ["resumed", "text"]
    assert isinstance(unwritten[1], Text) and unwritten[1].text == "half an answer"
    recorder.stream_text("x" * 600)  # after the end nothing is written, even past the bound
    assert recorder.held == [] and texts(h) == []


def test_the_history_joins_a_responses_text_events_into_one_assistant_message() -> None:
    h_events: list[Event] = []
    base = {"turn_id": "t", "run_id": "r", "chunk": 0, "ts": 1.0}
    h_events.append(ModelStart(event_id="e1", step=0, **base))
    h_events += [Text(event_id=f"t{i}", text=part, **base) for i, part in enumerate(LONG[::60])]
    h_events.append(Text(event_id="tx", text=" and more", **base))
    h_events.append(ModelDone(event_id="e2", tool_calls=0, **base))
    messages = Conversation().feed(h_events).messages()
    assistant = [m for m in messages if isinstance(m, AssistantMessage)]
    assert [m.text for m in assistant] == [LONG[::60] + " and more"]


def cut_mid_stream(h: Harness, soft_limit_after: float, stop_after: float | None = None) -> str:
    """The first chunk, its scripted model streaming LONG a delta per fake second, cut by the
    (simulated) soft limit or a Stop; the chunk path's outcome."""
    h.start([{"text": LONG, "chunk_chars": 4, "stream_delay_s": 1}, {"text": "Done."}])
    assert h.pending is not None
    stop_at = h.clock.t + (stop_after if stop_after is not None else 10**9)
    loop = AgentLoop(
        is_cancelled=lambda turn_id: h.clock.t >= stop_at,
        ledger=h.ledger,
        registry=h.registry,
        make_model=lambda spec: make_model(spec, h.clock),  # streams as it goes, unlike Recording
        settings=h.settings,
        clock=h.clock,
        ids=h.ids,
        interrupts=(SimulatedSoftLimit,),
        flusher=h.flusher,
    )
    h.clock.limit_at = h.clock.t + soft_limit_after
    outcome = h.lifecycle.run_chunk(h.turn_id, h.pending, loop, interrupts=(SimulatedSoftLimit,))
    h.clock.limit_at = None
    h.pending = h.messages.sent[-1][1] if outcome == "chained" else None
    return outcome


def test_a_soft_limit_mid_stream_writes_the_buffered_text_before_the_hand_over(
    h: Harness,
) -> None:
    assert cut_mid_stream(h, soft_limit_after=10.5) == "chained"
    first = [e for e in h.events() if e.chunk == 0]
    # 11 deltas streamed before the limit cut the 11th pause; no window or size bound was reached
    assert [e.type for e in first][-3:] == ["model_start", "text", "run_ended"]
    assert isinstance(first[-1], RunEnded) and first[-1].reason == "soft_limit"
    assert texts(h) == [LONG[:44]]


def test_the_resumed_run_is_asked_with_the_partial_text_the_cut_chunk_streamed(
    h: Harness,
) -> None:
    cut_mid_stream(h, soft_limit_after=6.5)
    h.run_to_end()
    resumed = h.requests[-1]
    assistant = [m for m in resumed.messages if isinstance(m, AssistantMessage)]
    assert assistant[0].text == LONG[:28]
    # the interrupted step is asked again and streams in full after the partial text
    assert "".join(texts(h)) == LONG[:28] + LONG


def test_a_stop_mid_stream_writes_the_buffered_text_with_the_runs_end(h: Harness) -> None:
    assert cut_mid_stream(h, soft_limit_after=60, stop_after=5.5).startswith("stopped")
    tail = [e.type for e in h.events()][-3:]
    assert tail == ["text", "run_ended", "turn_ended"]
    assert texts(h) == [LONG[:28]]
