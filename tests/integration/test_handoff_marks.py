"""A chunk message's mark in the broker (``worker.edges.celery.marks``): there while the message is
queued or held unacknowledged, gone with its acknowledgement, and what the reaper reads instead
of the queues. On the real broker (kombu's Redis transport, dres's channel), no worker process:
a message is taken and acknowledged here as a worker's consumer does (``basic_get``, ``ack``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
from harness import FakeClock, SeqIds

from ledger import keys
from rigs import DONE
from worker.base.settings import Settings
from worker.edges.celery.dispatch import CeleryDispatcher
from worker.edges.runtime import Runtime
from worker.lifecycle import Lifecycle
from worker.lifecycle import reaper as reaper_module
from worker.lifecycle.dispatch import run_ids
from worker.lifecycle.reaper import Reaper

pytestmark = pytest.mark.redis_server


class CountingDispatcher(CeleryDispatcher):
    """The real dispatcher, counting its full reads of the queues."""

    reads = 0

    def queued_runs(self) -> set[str] | None:
        self.reads += 1
        return super().queued_runs()


@pytest.fixture
def dispatcher(runtime: Runtime, settings: Settings) -> CountingDispatcher:
    return CountingDispatcher(runtime.app, settings)


@pytest.fixture
def lifecycle(runtime: Runtime, settings: Settings, dispatcher: CountingDispatcher) -> Lifecycle:
    return Lifecycle(runtime.ledger, settings, FakeClock(), SeqIds(), dispatcher)


@pytest.fixture
def taken(runtime: Runtime, settings: Settings) -> Iterator[Callable[[], Any]]:
    """``taken()``: the oldest foreground message, delivered and held unacknowledged."""
    with runtime.app.connection_for_read() as connection:
        channel = connection.default_channel
        yield lambda: channel.basic_get(settings.foreground_queue, no_ack=False)


def pending_turn(lifecycle: Lifecycle, script: Callable[..., str]) -> tuple[str, str]:
    turn = lifecycle.create("email Ada", model=script([DONE]))
    lifecycle.launch(turn.turn_id, turn.run_id, "foreground")
    return turn.turn_id, turn.run_id


def sweeps(lifecycle: Lifecycle, times: int) -> list[dict[str, str]]:
    reaper, clock = Reaper(lifecycle), lifecycle.clock
    assert isinstance(clock, FakeClock)
    done = []
    for _ in range(times):
        clock.t += lifecycle.settings.handoff_grace_s + 1
        done.append(reaper.sweep())
    return done


def test_a_chunk_message_is_marked_while_queued_or_held_and_unmarked_by_its_ack(
    rdb: redis.Redis,
    lifecycle: Lifecycle,
    dispatcher: CountingDispatcher,
    taken: Callable[[], Any],
    script: Callable[..., str],
) -> None:
    turn_id, run_id = pending_turn(lifecycle, script)
    mark = keys.chunk_message(turn_id, run_id)
    assert rdb.exists(mark) and dispatcher.marked(turn_id, run_id), "marked with its publish"
    assert rdb.ttl(mark) > 0

    message = taken()
    assert message.headers["id"].endswith(f":{run_id}")
    assert dispatcher.marked(turn_id, run_id), "held unacknowledged (prefetched): still there"
    message.reject(requeue=True)  # a killed pool child's message, delivered again
    assert dispatcher.marked(turn_id, run_id)

    taken().ack()  # the chunk ended, or failed before its claim
    assert not rdb.exists(mark) and not dispatcher.marked(turn_id, run_id)
    assert not dispatcher.marked("turn_x", "run_never_sent")


def queued(rdb: redis.Redis, queue: str) -> list[str]:
    """The run ids of a queue's messages, oldest first (kombu pushes at the head)."""
    return [run for raw in reversed(rdb.lrange(queue, 0, -1)) for run in run_ids([raw])]


def test_prepare_makes_the_message_dispatch_sends_and_sends_nothing(
    rdb: redis.Redis, runtime: Runtime, dispatcher: CountingDispatcher, settings: Settings
) -> None:
    queue = settings.foreground_queue
    prepared = dispatcher.prepare("turn_p", "run_p", "foreground")

    assert prepared is not None and dispatcher.shares_store
    assert rdb.llen(queue) == 0 and not rdb.exists(prepared.mark), "kept, not sent"
    dispatcher.dispatch("turn_p", "run_p", "foreground")
    [sent] = rdb.lrange(queue, 0, -1)
    assert (prepared.queue, prepared.mark) == (queue, keys.chunk_message("turn_p", "run_p"))
    assert prepared.mark_ttl_s == rdb.ttl(prepared.mark)
    kept, real = json.loads(prepared.message), json.loads(sent)
    for message in (kept, real):  # kombu's tag of each publish
        del message["properties"]["delivery_tag"]
    assert kept == real

    elsewhere = settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"})
    assert CeleryDispatcher(runtime.app, elsewhere).prepare("turn_p", "run_q", "foreground") is None


@pytest.mark.parametrize("mode", ["foreground", "background"])
def test_prepare_all_makes_each_message_as_celery_makes_it(
    runtime: Runtime, dispatcher: CountingDispatcher, mode: str
) -> None:
    """The tripwire of ``CeleryDispatcher.prepare_all``: the messages it makes from the first
    one Celery made are, but for kombu's delivery tag, the ones Celery makes for those runs, and
    they are taken and run by a worker's consumer as such (``run_ids``, the mark)."""
    runs = [(f"turn_{n}", f"run_{n}", mode) for n in range(3)]

    made = dispatcher.prepare_all(runs)

    assert all(m is not None for m in made)
    tags = set()
    for (turn_id, run_id, _), message in zip(runs, made, strict=True):
        assert message is not None
        own = dispatcher.prepare(turn_id, run_id, mode)
        assert own is not None
        assert (message.queue, message.mark, message.mark_ttl_s) == (
            own.queue,
            keys.chunk_message(turn_id, run_id),
            own.mark_ttl_s,
        )
        ours, celerys = json.loads(message.message), json.loads(own.message)
        tags.add(ours["properties"].pop("delivery_tag"))
        del celerys["properties"]["delivery_tag"]
        assert ours == celerys
        assert run_ids([message.message]) == {run_id}
    assert len(tags) == len(runs), "each message has a delivery tag of its own"


def test_a_soft_limit_hands_over_and_sends_the_successors_message_in_one_step(
    rdb: redis.Redis,
    lifecycle: Lifecycle,
    settings: Settings,
    taken: Callable[[], Any],
    script: Callable[..., str],
) -> None:
    """The hand-over's script queues the successor's message with its mark (kombu's own
    transaction, ``MULTI``, is not used) and the reaper's look; the message is the one a worker
    then takes and whose ack clears the mark."""
    turn_id, run_id = pending_turn(lifecycle, script)
    taken().ack()  # the first chunk's message, as its worker took it
    run = lifecycle.claim(turn_id, run_id)
    assert run is not None
    transactions = rdb.info("commandstats").get("cmdstat_multi", {}).get("calls", 0)

    assert lifecycle.chain(run) == "chained"

    successor = lifecycle.store.meta(turn_id).next_run
    assert queued(rdb, settings.foreground_queue) == [successor]
    assert rdb.info("commandstats").get("cmdstat_multi", {}).get("calls", 0) == transactions
    mark = keys.chunk_message(turn_id, successor)
    assert rdb.exists(mark)
    look = lifecycle.ms(settings.handoff_grace_s)
    assert rdb.zscore(keys.active_turns(), turn_id) == min(look, lifecycle.ms(settings.lease_s))
    message = taken()
    assert message.headers["id"] == f"{turn_id}:{successor}"
    message.ack()
    assert not rdb.exists(mark)


def test_a_due_run_behind_a_long_backlog_stays_queued_and_the_queues_are_never_read(
    rdb: redis.Redis,
    lifecycle: Lifecycle,
    dispatcher: CountingDispatcher,
    settings: Settings,
    script: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Behind a backlog longer than ``SHORT_BACKLOG`` (here 3) a mark is taken at its word
    however old: the wait is the backlog's, and reading it would cost O(backlog)."""
    monkeypatch.setattr(reaper_module, "SHORT_BACKLOG", 3)
    others = [pending_turn(lifecycle, script) for _ in range(3)]
    turn_id, run_id = pending_turn(lifecycle, script)
    due = {t for t, _ in [*others, (turn_id, run_id)]}

    for done in sweeps(lifecycle, 3 * (settings.max_redispatches + 1)):
        assert done == dict.fromkeys(due, "queued")
    assert dispatcher.reads == 0, "every due run answered by its mark"
    assert rdb.llen(settings.foreground_queue) == 4, "never a second message"
    assert lifecycle.store.meta(turn_id).redispatches == 0


def sweep_after(lifecycle: Lifecycle, seconds: float) -> dict[str, str]:
    clock = lifecycle.clock
    assert isinstance(clock, FakeClock)
    clock.t += seconds
    return Reaper(lifecycle).sweep()


@pytest.mark.parametrize("lost", [False, True], ids=["queued", "lost-with-its-mark"])
def test_an_old_mark_is_checked_against_short_queues(
    rdb: redis.Redis,
    lifecycle: Lifecycle,
    dispatcher: CountingDispatcher,
    settings: Settings,
    script: Callable[..., str],
    lost: bool,
) -> None:
    """A mark is trusted for ``MARK_TRUST_GRACES`` hand-off graces; then, the queues being short,
    one read of them decides. A message still queued is found and never sent twice. One lost
    with its mark left — a worker killed between taking it from its queue (BRPOP) and holding it
    unacknowledged; chaos met it at the ``decided`` point, a turn left resuming — is sent again."""
    turn_id, run_id = pending_turn(lifecycle, script)
    if lost:
        assert rdb.rpop(settings.foreground_queue) is not None  # taken, then the worker died
    assert dispatcher.marked(turn_id, run_id)
    grace = settings.handoff_grace_s
    assert sweep_after(lifecycle, grace * 1.5) == {turn_id: "queued"}
    assert dispatcher.reads == 0, "a fresh mark is taken at its word"
    trust = grace * reaper_module.MARK_TRUST_GRACES
    assert sweep_after(lifecycle, trust) == {turn_id: "redispatched" if lost else "queued"}
    assert dispatcher.reads == 1, "an old one is checked"
    assert rdb.llen(settings.foreground_queue) == 1, "one message, never two"
    assert lifecycle.store.meta(turn_id).redispatches == int(lost)


def test_a_message_acknowledged_without_a_claim_is_sent_again_then_left_queued(
    rdb: redis.Redis,
    lifecycle: Lifecycle,
    dispatcher: CountingDispatcher,
    taken: Callable[[], Any],
    settings: Settings,
    script: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A chunk that failed before its claim (the ledger out of reach): acked, the run pending.
    (Its new mark is taken at its word: ``SHORT_BACKLOG`` 0 keeps an old one from being checked.)"""
    monkeypatch.setattr(reaper_module, "SHORT_BACKLOG", 0)
    turn_id, run_id = pending_turn(lifecycle, script)
    taken().ack()

    assert sweeps(lifecycle, 1) == [{turn_id: "redispatched"}]
    assert dispatcher.reads == 1, "no mark: the queues are read before anything is sent again"
    assert rdb.llen(settings.foreground_queue) == 1 and dispatcher.marked(turn_id, run_id)
    assert sweeps(lifecycle, 2) == [{turn_id: "queued"}] * 2
    assert dispatcher.reads == 1
    assert lifecycle.store.meta(turn_id).redispatches == 1


def test_a_queued_message_without_a_mark_is_found_by_reading_the_queues(
    rdb: redis.Redis,
    lifecycle: Lifecycle,
    dispatcher: CountingDispatcher,
    settings: Settings,
    script: Callable[..., str],
) -> None:
    """A message an older dres (or kombu's own transport, ``rediss://``) queued: no mark."""
    turn_id, run_id = pending_turn(lifecycle, script)
    rdb.delete(keys.chunk_message(turn_id, run_id))

    assert sweeps(lifecycle, 2) == [{turn_id: "queued"}] * 2
    assert dispatcher.reads == 2, "one read of the queues per sweep"
    assert rdb.llen(settings.foreground_queue) == 1
    assert lifecycle.store.meta(turn_id).redispatches == 0


@contextmanager
def full(rdb: redis.Redis) -> Iterator[None]:
    """Redis at ``maxmemory`` under ``noeviction``: every write it is sent, refused."""
    rdb.config_set("maxmemory", 1)
    try:
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            rdb.set("probe", "x")
        yield
    finally:
        rdb.config_set("maxmemory", 0)


@pytest.mark.parametrize("answer", ["ack", "requeue"])
def test_a_full_redis_takes_a_held_messages_answer_without_raising(
    rdb: redis.Redis,
    lifecycle: Lifecycle,
    dispatcher: CountingDispatcher,
    taken: Callable[[], Any],
    script: Callable[..., str],
    answer: str,
) -> None:
    """A full Redis refuses every command of a ``MULTI``, also deletions. kombu sent the ack
    (the chunk ended) and the delivery again (``reject(requeue=True)``: a killed pool child's
    message) as one, and the error reached Celery's consumer, which shut the worker down: a
    full Redis that stopped a turn took its worker with it. The ack now goes through, mark and
    all; the message to deliver again stays held with its mark, restored after the visibility
    timeout."""
    turn_id, run_id = pending_turn(lifecycle, script)
    message = taken()
    with full(rdb):
        if answer == "ack":
            message.ack()
        else:
            message.reject(requeue=True)
    held = answer == "requeue"
    assert (rdb.hlen("unacked"), rdb.zcard("unacked_index")) == ((1, 1) if held else (0, 0))
    assert dispatcher.marked(turn_id, run_id) is held
