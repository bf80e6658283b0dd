"""Sentinel failover (docs/faults.md, issue 23): a primary, a replica and three sentinels as real
processes (``rigs.redis_sentinel``), with passwords on the data nodes and on the
sentinels; dres's ledger, broker and this process's runtime all reach the master through the
sentinels (``DRES_REDIS_SENTINELS``, ``DRES_REDIS_MASTER``).

A failover in the middle of a foreground and a background turn, each writing, both ways an
operator or a crash makes one: ``SENTINEL FAILOVER`` (the old master stays up and writable for
seconds: a client that stayed on it would lose what it wrote there) and a SIGKILL of the master.
Both turns complete, each write ran once, the new master holds a well-formed ledger with no
record missing, and the same worker process serves new turns afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from sample_tools import outside_effects

from chaos.invariants import (
    each_run_started_once,
    no_fenced_out_events,
    nothing_after_turn_ended,
    runs_closed,
)
from ledger.codec import Envelope
from ledger.store import Ledger
from rigs import (
    DONE,
    ApiProcess,
    having,
    of,
    outside_write,
    show,
    wait_ended_through,
    wait_for,
    wait_until,
)
from rigs.redis_sentinel import MASTER, LocalSentinel
from tests.support.fixtures import StartWorker, outside_worker, show_logs, started
from worker.base.errors import ConfigError
from worker.base.settings import Settings
from worker.edges.redis.durability import check_durability
from worker.edges.redis.policy import check_stores
from worker.edges.runtime import Runtime

pytestmark = pytest.mark.redis_server

#: chunk limits long enough for a write of a few seconds and a failover beside it
LONG_CHUNKS = {
    "DRES_SOFT_LIMIT_S": "15",
    "DRES_HARD_LIMIT_S": "20",
    "DRES_BG_SOFT_LIMIT_S": "15",
    "DRES_BG_HARD_LIMIT_S": "20",
    "DRES_VISIBILITY_TIMEOUT_S": "60",
    "DRES_LEASE_S": "2",
}
#: seconds a turn may take to end after the fault (Celery's consumer may wait for the old
#: master to be reconfigured, ~11 s after SENTINEL FAILOVER, before it moves)
AFTER_S = 45.0
#: seconds each turn's first write works after its effect: the failover happens meanwhile
WRITE_S = 3.0


@pytest.fixture
def rig() -> Iterator[LocalSentinel]:
    """This test's own primary, replica and sentinels (a failover changes them for good)."""
    yield from started(
        lambda: LocalSentinel(password="m4ster-pw", sentinel_password="s3ntinel-pw").start(),
        "a primary, a replica and three sentinels (redis-server --sentinel)",
    )


@pytest.fixture
def store_env(rig: LocalSentinel) -> dict[str, str]:
    return rig.env()


@pytest.fixture
def long_worker(
    start_worker: StartWorker, effects_file: str, monkeypatch: pytest.MonkeyPatch
) -> StartWorker:
    return outside_worker(start_worker, effects_file, monkeypatch, LONG_CHUNKS)


@pytest.fixture
def api(dres_env: dict[str, str], tmp_path: Path) -> Iterator[ApiProcess]:
    """A ``dres api`` through the same sentinels."""
    process = ApiProcess.start(dres_env, tmp_path / "api.log")
    yield process
    process.kill_group()
    show_logs([process])


def well_formed(envelopes: list[Envelope]) -> list[str]:
    """The stream holds every record its runs wrote: within a lease epoch the sequence numbers
    run on with no gap (an event the old master took and lost leaves one), every
    call's tool_start has its tool_done, and chaos's structural invariants hold."""
    problems = [
        *nothing_after_turn_ended(envelopes),
        *runs_closed(envelopes),
        *each_run_started_once([env.event for env in envelopes]),
        *no_fenced_out_events(envelopes),
    ]
    expected: dict[int, int] = {}
    for env in envelopes:
        epoch, seq = (int(part) for part in env.stream_id.split("-"))
        if seq != expected.setdefault(epoch, seq):
            problems.append(f"{env.stream_id}: a gap before it in epoch {epoch}")
        expected[epoch] = seq + 1
    events = [env.event for env in envelopes]
    calls = {e.call_id for e in of(events, "tool_start")} - {
        e.call_id for e in of(events, "tool_done")
    }
    return problems + [f"call {call_id} has no tool_done" for call_id in sorted(calls)]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("fault", ["sentinel-failover", "sigkill"])
def test_a_failover_during_a_foreground_and_a_background_turn_loses_neither(
    fault: str,
    rig: LocalSentinel,
    runtime: Runtime,
    api: ApiProcess,
    long_worker: StartWorker,
    script: Callable[..., str],
    effects_file: str,
) -> None:
    worker = long_worker(concurrency=2)
    turns = {
        label: runtime.lifecycle.enqueue(
            f"write {label}",
            mode=mode,
            model=script(
                [outside_write(label, WRITE_S), outside_write(f"{label}2", 0.0), DONE],
                on_resume="restart",
            ),
        )
        for label, mode in (("f", "foreground"), ("g", "background"))
    }
    for label, turn in turns.items():
        wait_for(runtime.ledger, turn.turn_id, having("tool_start"), what=f"{label}'s call")
        wait_until(lambda label=label: outside_effects(effects_file, label), 5, f"{label}'s effect")

    old = rig.failover() if fault == "sentinel-failover" else rig.kill_master()
    new = rig.wait_master(other_than=old)

    for label, turn in turns.items():
        events = wait_ended_through(runtime.ledger, turn.turn_id, AFTER_S)
        assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
        for written in (label, f"{label}2"):
            assert len(outside_effects(effects_file, written)) == 1, f"{written} ran once"
        with rig.node(new) as client:  # the new master itself, not through the sentinels
            envelopes = Ledger(client).read_turn(turn.turn_id)
        assert well_formed(envelopes) == [], show([env.event for env in envelopes])
        assert [env.event for env in envelopes] == events, "the new master holds it all"
        # the API (its asyncio reader) follows the new master too
        status = httpx.get(f"{api.url}/v1/turns/{turn.turn_id}", timeout=10)
        assert status.json()["status"] == "completed", status.text

    pid = worker.pid
    for mode, label in (("foreground", "n"), ("background", "m")):
        turn = runtime.lifecycle.enqueue(
            f"write {label}", mode=mode, model=script([outside_write(label, 0.0), DONE])
        )
        events = wait_ended_through(runtime.ledger, turn.turn_id, AFTER_S)
        assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
        assert len(outside_effects(effects_file, label)) == 1
    assert worker.alive() and worker.pid == pid, "the same worker serves after the failover"
    assert api.healthy()


def test_the_eviction_check_at_start_reads_the_master_the_sentinels_name(
    rig: LocalSentinel, settings: Settings
) -> None:
    """Not DRES_REDIS_URL's host (unused under Sentinel): the master, found through them."""
    port = rig.master_port()
    with rig.node(port) as master:
        master.config_set("maxmemory-policy", "allkeys-lru")
    with pytest.raises(ConfigError) as refused:
        check_stores(settings)
    assert f"the ledger's Redis at 127.0.0.1:{port} (master {MASTER} via Sentinels" in str(
        refused.value
    )
    with rig.node(port) as master:
        master.config_set("maxmemory-policy", "noeviction")
    [reading] = check_stores(settings)
    assert (reading.policy, reading.reached) == ("noeviction", True)


def test_the_durability_check_at_start_reads_the_master_the_sentinels_name(
    rig: LocalSentinel, settings: Settings
) -> None:
    """DRES_DURABILITY is checked on the master the Sentinels name (DRES_REDIS_URL's host is not
    a server there): it has its replica, and this redis-server (7.0) has no WAITAOF."""
    port = rig.master_port()
    where = f"127.0.0.1:{port} (master {MASTER} via Sentinels"
    [server] = check_durability(settings.model_copy(update={"durability": "replica"}))
    assert (server.reached, server.role, server.replicas) == (True, "master", 1), server
    assert server.address.startswith(where)
    with pytest.raises(ConfigError, match="needs WAITAOF") as refused:
        check_durability(settings.model_copy(update={"durability": "fsync"}))
    assert f"the ledger's Redis at {where}" in str(refused.value)


@pytest.mark.timeout(240)
def test_a_worker_with_a_free_slot_stays_up_through_two_master_kills_while_chunks_run(
    rig: LocalSentinel,
    runtime: Runtime,
    long_worker: StartWorker,
    script: Callable[..., str],
    effects_file: str,
) -> None:
    """A pool slot is free, so Celery's consumer waits in BRPOP on the master when it dies while
    a chunk's message is unacknowledged, and reconnects by going round the Sentinels' URLs. Two
    SIGKILLs in a row (the old master back as a replica in between): each turn completes, each
    write runs once, and the same worker process serves afterwards."""
    worker = long_worker(concurrency=2)
    pid = worker.pid
    for label in ("a", "b"):
        model = script([outside_write(label, WRITE_S), DONE], on_resume="restart")
        turn = runtime.lifecycle.enqueue(f"write {label}", mode="background", model=model)
        wait_for(runtime.ledger, turn.turn_id, having("tool_start"), what=f"{label}'s call")
        wait_until(lambda label=label: outside_effects(effects_file, label), 5, f"{label}'s effect")

        rig.restore(rig.kill_master())  # the new master named, the old one its replica again

        events = wait_ended_through(runtime.ledger, turn.turn_id, AFTER_S)
        assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
        assert len(outside_effects(effects_file, label)) == 1, f"{label} ran once"
    after = runtime.lifecycle.enqueue(
        "write c", mode="background", model=script([outside_write("c", 0.0), DONE])
    )
    events = wait_ended_through(runtime.ledger, after.turn_id, AFTER_S)
    assert [e.status for e in of(events, "turn_ended")] == ["completed"], show(events)
    assert worker.alive() and worker.pid == pid, "the worker exited after a failover"
