"""Many runs' heartbeats at once (``ledger.beats``, ``BatchedBeats``: a gevent worker's), run on
fakeredis, a real redis-server and a Redis Cluster: the same lease and Stop semantics as each
run's own beats, in one round trip per tick (one per run on a cluster)."""

from __future__ import annotations

import threading

import pytest
from test_turns import claim, conditions, create, step_events

from ledger.beats import Heartbeats
from ledger.lease import Lease
from ledger.store import Client, Ledger
from ledger.turn import Step
from ledger.turns import TurnStore
from rigs import wait_until
from worker.base.clock import SystemClock
from worker.engine.recorder import RunContext
from worker.lifecycle.heartbeat import BatchedBeats, Beats, Heartbeat

TURNS = [f"t{n}" for n in range(5)]


def take_over(store: TurnStore, turn_id: str) -> None:
    meta = store.meta(turn_id)
    store.transition(
        turn_id,
        Step.TAKE_OVER,
        expect=conditions(Step.TAKE_OVER, meta),
        events=step_events(Step.TAKE_OVER),
        fields={"next_run": "r2"},
    )


@pytest.fixture
def store(client: Client) -> TurnStore:
    return TurnStore(Ledger(client))


@pytest.fixture
def leases(store: TurnStore) -> dict[str, Lease]:
    held = {}
    for turn_id in TURNS:
        create(store, turn_id, conversation_id=f"c-{turn_id}")
        held[turn_id] = claim(store, "r1", turn_id, until_ms=1000)
    return held


def test_one_beat_renews_every_held_lease_and_refuses_one_taken_over(
    store: TurnStore, leases: dict[str, Lease]
) -> None:
    take_over(store, "t1")
    store.request_stop("t3")

    beat = Heartbeats(store).beat(
        [(lease, 5000 + n) for n, lease in enumerate(leases.values())], [*TURNS, "never"]
    )

    assert beat.held == [True, False, True, True, True]
    assert [store.meta(turn_id).lease_until for turn_id in TURNS] == [5000, 1000, 5002, 5003, 5004]
    assert beat.stopped == [False, False, False, True, False, False]


def test_a_turn_gone_is_no_longer_held_and_the_others_renew(
    store: TurnStore, leases: dict[str, Lease], client: Client
) -> None:
    client.delete(*[key for key in client.keys("*t2*")])

    beat = Heartbeats(store).beat([(lease, 7000) for lease in leases.values()], [])

    assert beat.held == [True, True, False, True, True]
    assert beat.stopped == []


# one server only: a cluster's renewals go one by one, through the turn store's own scripts
@pytest.mark.parametrize("backend", ["fakeredis", "redis-server"], indirect=True)
def test_a_beat_after_redis_lost_its_scripts_loads_them_again(
    store: TurnStore, leases: dict[str, Lease], client: Client
) -> None:
    client.script_flush()

    beat = Heartbeats(store).beat([(leases["t0"], 8000)], ["t0"])

    assert (beat.held, beat.stopped) == ([True], [False])
    assert store.meta("t0").lease_until == 8000


@pytest.fixture
def batched() -> BatchedBeats:
    """The process's heartbeat of a gevent worker (here a plain thread)."""
    return BatchedBeats()


def test_batched_beats_renew_each_lease_hand_stop_to_its_run_and_drop_a_run_taken_over(
    store: TurnStore, leases: dict[str, Lease], batched: BatchedBeats
) -> None:
    """Every lease renewed (every third of it), Stop handed to the one run it concerns, and a
    run whose turn was taken over stops beating while the others go on."""
    stops: dict[str, threading.Event] = {turn_id: threading.Event() for turn_id in TURNS}
    beats = {
        turn_id: Heartbeat(
            store,
            RunContext(lease),
            SystemClock(),
            beats=batched,
            lease_s=3.0,
            interval_s=0.05,
            poll_s=0.02,
            on_stop=stops[turn_id].set,
        )
        for turn_id, lease in leases.items()
    }
    for beat in beats.values():
        beat.__enter__()
    try:
        wait_until(lambda: all(beat.beats >= 2 for beat in beats.values()), what="renewals")
        assert all(store.meta(turn_id).lease_until > 1000 for turn_id in TURNS)

        store.request_stop("t3")
        take_over(store, "t1")
        wait_until(stops["t3"].is_set, what="the Stop handed to t3's run")
        wait_until(lambda: not beats["t1"].held, what="t1's lease found lost")
        assert not any(stops[turn_id].is_set() for turn_id in TURNS if turn_id != "t3")

        lost_at, others = beats["t1"].beats, {t: beats[t].beats for t in ("t0", "t2", "t4")}
        wait_until(
            lambda: all(beats[t].beats > n for t, n in others.items()), what="the others beat"
        )
        assert beats["t1"].beats == lost_at, "the run taken over renewed again"
    finally:
        for beat in beats.values():
            beat.__exit__(None, None, None)


class Interrupt(BaseException):
    """A signal handler's exception (a soft limit, a shutdown), as it lands in a run."""


def test_an_interrupt_landing_as_the_heartbeat_joins_leaves_no_heartbeat_beating(
    store: TurnStore, leases: dict[str, Lease], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupt that lands inside the heartbeat's ``__enter__``, once it joined the process's
    beats, reaches no ``__exit__``: the heartbeat must stop there, or it goes on renewing past
    its run's own hand-over and then says another run holds the turn (issue 46)."""
    beats = Beats()
    join = beats.join

    def interrupted(beat: Heartbeat) -> None:
        join(beat)
        raise Interrupt("soft time limit")  # lands just after the heartbeat joined

    monkeypatch.setattr(beats, "join", interrupted)
    beat = Heartbeat(
        store, RunContext(leases["t0"]), SystemClock(), beats=beats, lease_s=3.0, interval_s=0.05
    )
    with pytest.raises(Interrupt), beat:
        pytest.fail("the block never runs")
    assert beat.stopping.is_set()
    assert beat not in beats._runs
    assert not beat.tick(), "a heartbeat whose run never began renews nothing"
