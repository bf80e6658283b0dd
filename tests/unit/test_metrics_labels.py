"""What the metrics helpers make of the values they are given: the hand-over's seconds from the
ledger's record, and the labels of a chunk's end and of a reaper's action; and that a metric that
cannot be recorded never fails what records it."""

from __future__ import annotations

from pathlib import Path

import fakeredis
import pytest
from harness import Harness
from prometheus_client import REGISTRY, CollectorRegistry, Histogram
from structlog.testing import capture_logs

from ledger.events import Event, RunEnded, RunStarted, Text
from worker.base import metrics
from worker.base.metrics import chunk_end, handoff, reaper_action


def turn(*, ended_at: float, started_at: float, cause: str = "next_chunk") -> list[Event]:
    head = {"turn_id": "t1", "chunk": 0}
    return [
        Text(event_id="e1", run_id="r1", ts=ended_at - 1, text="Thinking.", **head),
        RunEnded(event_id="e2", run_id="r1", ts=ended_at, reason="soft_limit", **head),
        RunStarted(
            event_id="e3", run_id="r2", ts=started_at, cause=cause, epoch=2, turn_id="t1", chunk=1
        ),
    ]


def test_a_hand_over_lasts_from_the_previous_runs_end_to_this_runs_start() -> None:
    assert handoff("next_chunk", turn(ended_at=100.0, started_at=100.25)) == pytest.approx(0.25)


def test_only_a_next_chunk_run_read_whole_by_its_claim_measures_a_hand_over() -> None:
    events = turn(ended_at=100.0, started_at=100.25)
    assert handoff("reaper", events) is None, "a take-over is not a hand-over"
    assert handoff("next_chunk", None) is None, "a claim that did not read the turn"
    assert handoff("next_chunk", events[:-1]) is None, "the read must end at this run's start"
    assert handoff("next_chunk", events[2:]) is None, "no run ended before it"


def test_a_skewed_clock_never_makes_a_negative_hand_over() -> None:
    assert handoff("next_chunk", turn(ended_at=100.0, started_at=99.9)) == 0.0


@pytest.mark.parametrize(
    ("returned", "label"),
    [
        ("completed", "completed"),
        ("stopped: cancelled", "stopped"),
        ("stopped: max_chunks", "stopped"),
        ("chained", "chained"),
        ("chained (message dropped)", "chained"),
        ("ended", "ended"),
        ("fenced-out", "fenced_out"),
        ("failed", "failed"),
        (RuntimeError("raised"), "failed"),
        ("something new", "other"),
        ("not-claimed", None),
        ("holder alive", None),
        ("took over: resumed", None),
        ("bad-message", None),
    ],
)
def test_a_chunk_task_s_return_names_how_the_chunk_ended(
    returned: object, label: str | None
) -> None:
    assert chunk_end(returned) == label


@pytest.mark.parametrize(
    ("action", "label"),
    [
        ("alive", "alive"),
        ("queued", "queued"),
        ("redispatched", "redispatched"),
        ("resumed", "resumed"),
        ("stopped: crashed", "stopped"),
        ("stopped: handoff_lost", "stopped"),
        ("the turn changed", "changed"),
        ("changed", "changed"),
        ("gone", "gone"),
        ("whatever else", "other"),
    ],
)
def test_a_reaper_action_has_a_bounded_label(action: str, label: str) -> None:
    assert reaper_action(action) == label


def test_a_metric_that_cannot_be_recorded_is_logged_and_fails_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def full_disk() -> metrics.Metrics:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(metrics, "get", full_disk)
    with capture_logs() as logs:
        metrics.tool_blocked("completed")
        metrics.turn_ended("completed")
        metrics.observe_append(0.001)  # batched: recorded with the run's end, below
        metrics.flush_appends()

    assert [(e["event"], e["metric"]) for e in logs] == [
        ("metric not recorded", "tool_blocked"),
        ("metric not recorded", "turn_ended"),
        ("metric not recorded", "flush_appends"),
    ]


def test_every_turn_end_is_counted_once_where_the_lifecycle_closes_the_turn(
    tmp_path: Path,
) -> None:
    """A completed turn and one stopped from outside its run (a Stop before its chunk ran) each
    count one ``dres_turns_ended_total`` with their status and code."""

    def count(status: str, code: str = "") -> float:
        metrics.get()
        labels = {"status": status, "code": code}
        return REGISTRY.get_sample_value("dres_turns_ended_total", labels) or 0.0

    completed, cancelled = count("completed"), count("stopped", "cancelled")
    h = Harness(fakeredis.FakeRedis(), tmp_path)
    h.start([{"text": "Done."}])
    assert h.run_to_end().status == "completed"
    h.start([{"text": "Done."}])
    assert h.lifecycle.stop(h.turn_id).ok

    assert (count("completed"), count("stopped", "cancelled")) == (completed + 1, cancelled + 1)


def test_a_batch_of_observations_lands_in_the_buckets_and_sum_that_one_by_one_would() -> None:
    """``observe_many`` (one increment per bucket) against ``Histogram.observe`` per amount,
    with amounts on and beside the bounds, below the first and past the last."""
    bounds = (0.001, 0.01, 0.1)
    amounts = [0.0, 0.0005, 0.001, 0.0010001, 0.01, 0.05, 0.1, 0.2, 7.0, 0.001]
    one_by_one, batched = CollectorRegistry(), CollectorRegistry()
    for registry in (one_by_one, batched):
        histogram = Histogram("h_seconds", "h", buckets=bounds, registry=registry)
        if registry is batched:
            metrics.observe_many(histogram, amounts)
        else:
            for amount in amounts:
                histogram.observe(amount)

    def samples(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
        return {
            (s.name, s.labels.get("le", "")): s.value
            for family in registry.collect()
            for s in family.samples
            if not s.name.endswith("_created")
        }

    assert samples(batched) == pytest.approx(samples(one_by_one))
    assert samples(batched)[("h_seconds_bucket", "0.001")] == 4
