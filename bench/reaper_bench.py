"""The reaper under a backlog: one sweep's Redis bytes and time with 1k / 10k / 100k chunk
messages queued and one pending run due, before and after the messages' marks.

BEFORE is the old question "is this due run still queued or held?": every priority list of both
chunk queues (``LRANGE 0 -1``) and every unacknowledged message (``HVALS``) read and parsed, a
copy of the old ``CeleryDispatcher.queued_runs`` kept here (``old_queued_runs``). AFTER is the
code's own path: the due run's mark in the broker (``worker.edges.celery.marks``), one ``EXISTS``.

On a private redis-server (AOF off: the fill is not what is measured). The backlog is real
chunk messages: one sent by the dispatcher (dres's kombu transport), its body copied with other
``turn:run`` ids by pipelined ``LPUSH``, and a few held unacknowledged as a worker's prefetch
holds them. The due run is a real turn of the ledger whose first run was launched (recorded and
sent, so its message is the newest in the queue, behind the whole backlog) and whose hand-off
grace ran out on the lifecycle's clock. Bytes: the server's ``total_net_output_bytes`` across
the sweep, less what reading that counter itself costs. Both variants interleaved, medians,
each sweep after a ``gc.collect()``.

    .venv/bin/python -m bench.reaper_bench [--quick]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import redis

from ledger import keys
from ledger.store import Ledger
from worker.base.clock import RandomIds
from worker.base.settings import Settings, load_settings
from worker.dev.redis_server import RedisServer
from worker.edges.celery.app import create_app
from worker.edges.celery.dispatch import CeleryDispatcher
from worker.lifecycle import Lifecycle
from worker.lifecycle.dispatch import run_ids
from worker.lifecycle.reaper import Reaper

#: backlog sizes, in the order they are filled (each adds to the one before)
SIZES = (1_000, 10_000, 100_000)
#: messages delivered to a worker and held unacknowledged (its slots' prefetch)
HELD = 4
#: LPUSHes per pipeline round trip while filling
FILL_BATCH = 2_000
#: the ids the backlog's copies replace in the body of the one real message
TEMPLATE_TURN, TEMPLATE_RUN = "turn_backlog000000000000", "run_backlog0000000000000"
#: target of the issue: bytes one sweep reads with 100k queued, after
TARGET_BYTES = 1_000_000


class ManualClock:
    def __init__(self) -> None:
        self.t = time.time()

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def old_queued_runs(app: Any, settings: Settings) -> set[str] | None:
    """The old ``CeleryDispatcher.queued_runs``, as it was before the marks (the baseline)."""
    with app.connection_for_read() as connection:
        channel: Any = connection.default_channel
        client = getattr(channel, "client", None)
        if client is None or not hasattr(channel, "unacked_key"):
            return None
        names = [settings.foreground_queue, settings.background_queue]
        lists = [channel._q_for_pri(name, pri) for name in names for pri in channel.priority_steps]
        pipe = client.pipeline(transaction=False)
        for key in lists:
            pipe.lrange(key, 0, -1)
        pipe.hvals(channel.unacked_key)
        replies = pipe.execute()
    return run_ids(m for reply in replies for m in reply)


class OldDispatcher(CeleryDispatcher):
    """The dispatcher as the reaper used it before: no marks, the queues read on every sweep."""

    def marked(self, turn_id: str, run_id: str) -> bool:
        return False

    def queued_runs(self) -> set[str] | None:
        return old_queued_runs(self.app, self.settings)


class Backlog:
    """A private broker and ledger (one redis-server) with chunk messages queued."""

    def __init__(self, server: RedisServer) -> None:
        self.settings = load_settings(redis_url=server.url)
        self.client = redis.Redis.from_url(server.url)
        self.app = create_app(self.settings)
        self.ledger = Ledger(self.client)
        self.clock = ManualClock()
        self.queued = 0
        new = CeleryDispatcher(self.app, self.settings)
        self.dispatchers: dict[str, CeleryDispatcher] = {
            "before": OldDispatcher(self.app, self.settings),
            "after": new,
        }
        self.lifecycles = {
            name: Lifecycle(self.ledger, self.settings, self.clock, RandomIds(), dispatcher)
            for name, dispatcher in self.dispatchers.items()
        }
        self.body = self._template(new)
        self.turn_id = self._due_run()

    def _template(self, dispatcher: CeleryDispatcher) -> bytes:
        """The body of a real chunk message, taken back out of the queue."""
        dispatcher.dispatch(TEMPLATE_TURN, TEMPLATE_RUN, "foreground")
        body = self.client.rpop(self.settings.foreground_queue)
        assert isinstance(body, bytes) and TEMPLATE_RUN.encode() in body
        self.client.delete(keys.chunk_message(TEMPLATE_TURN, TEMPLATE_RUN))
        return body

    def _due_run(self) -> str:
        turn = self.lifecycles["after"].create("email Ada", model="scripted:none")
        self.lifecycles["after"].launch(turn.turn_id, turn.run_id, "foreground")
        with self.app.connection_for_read() as connection:  # held by a worker's prefetch
            self._held = connection  # kept open: closing it would restore what it holds
        return turn.turn_id

    def fill(self, size: int) -> None:
        """Queue copies of the real body, with their own ids, until ``size`` wait (older than
        the due run's message: a worker takes them first)."""
        queue = self.settings.foreground_queue
        old = f"{TEMPLATE_TURN}:{TEMPLATE_RUN}".encode()
        while self.queued < size:
            pipe = self.client.pipeline(transaction=False)
            for n in range(self.queued, min(size, self.queued + FILL_BATCH)):
                fresh = f"{TEMPLATE_TURN[:-8]}{n:08d}:{TEMPLATE_RUN[:-8]}{n:08d}".encode()
                pipe.rpush(queue, self.body.replace(old, fresh))
            self.queued += len(pipe.execute())

    def hold(self, count: int) -> None:
        channel = self._held.default_channel
        for _ in range(count):
            channel.basic_get(self.settings.foreground_queue, no_ack=False)
            self.queued -= 1

    def out_bytes(self) -> int:
        return int(self.client.info("stats")["total_net_output_bytes"])

    def sweep(self, variant: str) -> tuple[int, float]:
        """One sweep of a fresh reaper, the run just due; (bytes the server sent, seconds)."""
        reaper = Reaper(self.lifecycles[variant])
        self.clock.t += self.settings.handoff_grace_s + 1
        gc.collect()  # the other variant's garbage (100k messages) is not this one's time
        before = self.out_bytes()
        started = time.perf_counter()
        done = reaper.sweep()
        took = time.perf_counter() - started
        sent = self.out_bytes() - before
        assert done == {self.turn_id: "queued"}, done
        return sent, took

    def info_cost(self) -> int:
        """Bytes one read of the counter adds to the next (its own reply)."""
        gaps = []
        for _ in range(5):
            first = self.out_bytes()
            gaps.append(self.out_bytes() - first)
        return int(statistics.median(gaps))


def _label(size: int) -> str:
    return f"{size // 1000}k"


def measure(quick: bool) -> list[dict[str, Any]]:
    repeats = 3 if quick else 7
    rows: list[dict[str, Any]] = []
    with RedisServer(extra=("--appendonly", "no")) as server:
        backlog = Backlog(server)
        for variant in ("before", "after"):  # connections and scripts warm
            backlog.sweep(variant)
        for i, size in enumerate(SIZES):
            backlog.fill(size + (HELD if i == 0 else 0))
            if i == 0:
                backlog.hold(HELD)
            counter = backlog.info_cost()
            samples: dict[str, list[tuple[int, float]]] = {"before": [], "after": []}
            for _ in range(repeats):
                for variant in ("before", "after"):
                    samples[variant].append(backlog.sweep(variant))
            read = {v: statistics.median(b - counter for b, _ in s) for v, s in samples.items()}
            ms = {v: statistics.median(t * 1000 for _, t in s) for v, s in samples.items()}
            label = _label(size)
            rows.append(
                {
                    "row": f"reaper sweep, {label} queued: Redis bytes read",
                    "before": read["before"],
                    "after": read["after"],
                    "unit": "B",
                    "target": f"after <= {TARGET_BYTES:,} B" if size == SIZES[-1] else "",
                }
            )
            rows.append(
                {
                    "row": f"reaper sweep, {label} queued: wall time",
                    "before": round(ms["before"], 3),
                    "after": round(ms["after"], 3),
                    "unit": "ms",
                }
            )
        backlog._held.release()
        backlog.client.close()
    return rows


def table(rows: list[dict[str, Any]], out: Callable[[str], object] = print) -> None:
    out(f"{'row':<46} {'before':>14} {'after':>10} unit  ratio")
    for row in rows:
        before, after = row["before"], row["after"]
        ratio = f"{before / after:,.0f}x less" if after else "-"
        out(f"{row['row']:<46} {before:>14,} {after:>10,} {row['unit']:<5} {ratio}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args(argv)
    table(measure(args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
