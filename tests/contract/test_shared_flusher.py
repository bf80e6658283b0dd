"""The shared flusher of a process of many runs (``worker.engine.flushes``, a gevent worker's):
the text of every run lands whole and in order while they stream at once; an append whose answer
was lost is found at its stream id, not written twice; a run fenced out meets its error at its
next write while the others' text still lands.

On a real redis-server and a real three-master Redis Cluster (where the round trip is one
pipeline per node): pipelines and stream ids are what is tested.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from harness import Harness
from redis.cluster import RedisCluster

from ledger.appends import append_each
from ledger.errors import FencedOut
from ledger.events import Text
from ledger.store import Client
from rigs import poll
from rigs.redis_cluster import LocalCluster
from worker.base.settings import load_settings
from worker.engine.flushes import SharedFlusher
from worker.engine.recorder import Recorder

RUNS = 40
DELTAS = 30


@pytest.fixture(params=["redis-server", "cluster"])
def h(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    if request.param == "cluster":
        cluster: LocalCluster = request.getfixturevalue("redis_cluster")
        cluster.flushall()
        client: Client = cluster.client(socket_timeout=30)
    else:
        client = redis.Redis.from_url(request.getfixturevalue("redis_url"), socket_timeout=30)
    harness = Harness(client, tmp_path, settings=load_settings(journal_read_backoff_s=0))
    harness.flusher = SharedFlusher()  # the process's, as a gevent worker's runtime hands it
    yield harness
    client.close()


def recorders(h: Harness, n: int, flush_s: float) -> list[tuple[str, Recorder]]:
    out = []
    for _ in range(n):
        h.start([{"text": "unused"}])
        assert h.pending is not None
        run = h.lifecycle.claim(h.turn_id, h.pending)
        assert run is not None
        recorder = Recorder(h.ledger, run, h.clock, h.ids, [], flush_s=flush_s, shared=h.flusher)
        out.append((h.turn_id, recorder))
    return out


def text_of(h: Harness, turn_id: str) -> list[str]:
    return [e.text for e in h.ledger.events(turn_id) if isinstance(e, Text)]


def test_many_runs_streaming_at_once_each_land_their_whole_text_in_order(h: Harness) -> None:
    runs = recorders(h, RUNS, flush_s=0.02)
    assert all(r._shared is not None for _, r in runs)  # the process's flusher, not their own
    try:
        for k in range(DELTAS):
            for i, (_, recorder) in enumerate(runs):
                recorder.stream_text(f"{i}.{k} ")
            time.sleep(0.002)  # the streams' pace (their input), not a wait for state
        want = {
            turn: "".join(f"{i}.{k} " for k in range(DELTAS)) for i, (turn, _) in enumerate(runs)
        }
        poll(lambda: all("".join(text_of(h, t)) == w for t, w in want.items()) or None, timeout=10)
    finally:
        for _, recorder in runs:
            recorder.close()
    for turn, recorder in runs:
        events = text_of(h, turn)
        assert 1 <= len(events) < DELTAS  # coalesced by its window
        assert [e.text for e in recorder.events if isinstance(e, Text)] == events


def test_an_append_whose_answer_was_lost_is_found_at_its_id_not_written_twice(
    h: Harness,
) -> None:
    [(turn, recorder)] = recorders(h, 1, flush_s=60)
    lease = recorder.run.lease
    event = recorder.make(Text, text="once")
    seq, last = lease.seq, lease.last
    [made] = append_each(h.ledger, [(event, lease)])
    assert made == f"{lease.epoch}-{seq}"
    lease.seq, lease.last = seq, last  # its answer lost: the run does not know it landed
    [again] = append_each(h.ledger, [(event, lease)])
    assert isinstance(again, redis.ResponseError)  # refused at its id: left to ``append``
    assert h.ledger.append(event, lease=lease) == made
    assert text_of(h, turn) == ["once"]
    recorder.close()


def test_a_run_fenced_out_meets_it_at_its_next_write_while_the_others_text_lands(
    h: Harness,
) -> None:
    rdb = h.ledger.client
    (fenced_turn, fenced), (turn, other) = recorders(h, 2, flush_s=0.02)
    lease = fenced.run.lease
    # a newer run of the turn wrote after it (a takeover): its next stream id is refused
    rdb.xadd(lease.stream, {"e": b"{}"}, id=f"{lease.epoch + 1}-0")
    try:
        fenced.stream_text("lost ")
        other.stream_text("kept")
        poll(lambda: text_of(h, turn) or None, timeout=10)
        with pytest.raises(FencedOut):
            poll(lambda: fenced.stream_text(".") and None, timeout=10)
    finally:
        fenced.close()
        other.close()
    assert text_of(h, turn) == ["kept"]
    assert rdb.xrange(lease.stream, min=f"{lease.epoch}-{lease.seq}", max="+") == [
        (f"{lease.epoch + 1}-0".encode(), {b"e": b"{}"})
    ]
    assert fenced_turn != turn


def test_the_text_of_runs_on_every_node_is_made_by_the_one_round_trip(h: Harness) -> None:
    """On a cluster the pipeline goes to each node with the appends of its slots (redis-py's
    ``ClusterPipeline``); none is left to be made alone, round trip by round trip."""
    runs = recorders(h, 12, flush_s=60)
    items = [(r.make(Text, text=f"run {i}"), r.run.lease) for i, (_, r) in enumerate(runs)]
    counts = xadds(h.ledger.client)
    made = append_each(h.ledger, items)
    assert made == [f"{lease.epoch}-{lease.seq - 1}" for _, lease in items]
    for i, (turn, recorder) in enumerate(runs):
        assert text_of(h, turn) == [f"run {i}"]
        recorder.close()
    if isinstance(h.ledger.client, RedisCluster):
        added = {node: n - counts.get(node, 0) for node, n in xadds(h.ledger.client).items()}
        assert sum(added.values()) == len(items) and len([n for n in added.values() if n]) > 1


def xadds(client: Client) -> dict[str, int]:
    """XADDs each master has run (INFO commandstats): the runs' turns live on several."""
    if not isinstance(client, RedisCluster):
        return {}
    found: dict[str, int] = {}
    for node in client.get_primaries():  # type: ignore[no-untyped-call]
        stats: Any = client.info("commandstats", target_nodes=node)  # type: ignore[arg-type]
        found[node.name] = int(stats.get("cmdstat_xadd", {}).get("calls", 0))
    return found
