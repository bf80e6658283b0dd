"""Row M3 of ``make bench`` (issue 37): many watchers of live turns on one API process.

1,000 SSE clients watch 100 turns, ten each, on one ``dres api``. The turns stream text as a
worker records it: one ``text`` event per turn each pace (50 ms, a worker's text flush window
when the provider streams fast; and 200 ms), each turn on its own schedule, written through the
ledger by a process of the bench's that plays the turns' runs (no worker, no model: the figure
is the API's). Figures: from the write of each turn's last token to each of its watchers
receiving it, the p99 over the 1,000 watchers (target <= 100 ms), and the most Redis
connections the API process held while the turns streamed, counted from ``/proc`` (target <=
20: one reader fans out, where each watcher held a connection before). The clients are lean
HTTP/1.1 readers (``lean_watch``) in one asyncio loop, so that the bench's own cost stays small.
``python -m bench --only fanout`` (or ``python -m bench.fanout_bench``) runs it alone.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx

from bench.celery_worker import bench_settings, process_env
from bench.harness import (
    Group,
    Row,
    info_line,
    loadavg,
    percentile,
    private_redis,
)
from rigs import ApiProcess, say
from rigs.watchers import Watcher, all_started, playing, redis_connections
from worker.edges.runtime import Runtime
from worker.engine.loop import RunResult
from worker.engine.recorder import RunContext

#: milliseconds from a turn's last token to a watcher, p99 over the watchers (issue 37)
DELAY_LIMIT_MS = 100.0
#: Redis connections the API may hold while it serves them (issue 37)
CONNECTIONS_LIMIT = 20


@dataclass(frozen=True)
class FanoutPlan:
    turns: int
    watchers: int
    tokens: int
    #: seconds between two tokens of a turn, one case each: a worker's text flush window
    #: (50 ms: a provider as fast as it streams), and a slower stream
    paces: tuple[float, ...]
    trials: int


FULL = FanoutPlan(turns=100, watchers=1000, tokens=40, paces=(0.05, 0.2), trials=3)
QUICK = FanoutPlan(turns=100, watchers=1000, tokens=10, paces=(0.05, 0.2), trials=1)


class Sampler(threading.Thread):
    """The API's Redis connections, read every ``interval`` seconds until ``stop``."""

    def __init__(self, pid: int, port: int, interval: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.pid, self.port, self.interval = pid, port, interval
        self.seen: list[int] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            self.seen.append(redis_connections(self.pid, self.port))
            self.halt.wait(self.interval)


def cpu_s(pid: int) -> float:
    """CPU seconds the process has used (user and system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stream(rt: Runtime, runs: list[RunContext], tokens: int, pace_s: float) -> dict[str, float]:
    """Each run says ``tokens`` tokens, one per ``pace_s``, each turn on its own schedule
    (turn i a fraction i/turns of a pace after turn 0, as independent turns are); then each
    completes. The ``time.time()`` of each turn's last token, before its write."""
    last_at: dict[str, float] = {}
    start = time.monotonic()
    for n in range(tokens):
        for i, run in enumerate(runs):
            # on the schedule, not after a sleep per write: a slow write does not shift the rest
            delay = start + (n + i / len(runs)) * pace_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if n == tokens - 1:
                last_at[run.turn_id] = time.time()
            say(rt, run, f"tok{n} ")
    for run in runs:
        rt.lifecycle.finish(run, RunResult("completed"))
    return last_at


async def lean_watch(url: str, watcher: Watcher, last: bytes) -> Watcher:
    """A lean HTTP/1.1 client of the turn's event stream: it notes when ``last`` arrives and
    reads the rest of the stream as it comes, leaving the parsing to ``parsed``, after it
    ends. A thousand of these in one process cost little, so the figure is the server's."""
    parts = httpx.URL(url)
    reader, writer = await asyncio.open_connection(parts.host, parts.port)
    writer.write(
        f"GET /v1/turns/{watcher.turn_id}/events HTTP/1.1\r\nHost: {parts.netloc.decode()}\r\n"
        "Accept: text/event-stream\r\nConnection: close\r\n\r\n".encode()
    )
    received = bytearray()
    try:
        while chunk := await reader.read(65536):
            if not watcher.text_at and last in bytes(received[-len(last) :]) + chunk:
                watcher.text_at = time.time()
            received += chunk
            if b"event: " in chunk:
                watcher.started.set()
    finally:
        watcher.started.set()
        writer.close()
    return parsed(watcher, bytes(received))


def parsed(watcher: Watcher, received: bytes) -> Watcher:
    """``received`` (an HTTP response, its body chunked) read into the watcher."""
    head, _, body = received.partition(b"\r\n\r\n")
    watcher.status = int(head.split(b" ", 2)[1])
    data = bytearray()
    while body:
        size, _, body = body.partition(b"\r\n")
        length = int(size, 16)
        data += body[:length]
        body = body[length + 2 :]
    event = ""
    for line in data.decode().splitlines():
        name, _, value = line.partition(": ")
        if name == "id":
            watcher.ids.append(value)
        elif name == "event":
            event = value
        elif name == "data":
            watcher.types.append(event)
            if event == "text":
                watcher.text += json.loads(value)["text"]
    return watcher


async def watched(
    url: str, turns: list[str], plan: FanoutPlan, live: Callable[[], dict[str, float]]
) -> tuple[list[Watcher], dict[str, float]]:
    """The watchers, spread over ``turns``; once each has its first event, ``live`` (on a
    thread) streams the turns and answers when each one's last token was written."""
    last = f'"text":"tok{plan.tokens - 1} "'.encode()
    clients = [Watcher(turns[i % len(turns)]) for i in range(plan.watchers)]
    tasks = [asyncio.create_task(lean_watch(url, w, last)) for w in clients]
    await all_started(clients, timeout=60)
    last_at = await asyncio.to_thread(live)
    async with asyncio.timeout(120):
        return list(await asyncio.gather(*tasks)), last_at


def play(redis_url: str, plan: FanoutPlan, pace_s: float, conn: Connection) -> None:
    """The turns' runs, in a process of their own (no GIL shared with the watchers): make the
    turns and send their ids, stream them once told to, send when each last token was written."""
    rt = Runtime.from_settings(bench_settings(redis_url))
    runs = playing(rt, plan.turns, "stream to many")
    conn.send([run.turn_id for run in runs])
    conn.recv()
    conn.send(stream(rt, runs, plan.tokens, pace_s))
    rt.redis.close()


def trial(
    redis_url: str, api: ApiProcess, port: int, plan: FanoutPlan, pace_s: float
) -> dict[str, Any]:
    spawn = multiprocessing.get_context("spawn")
    ours, theirs = spawn.Pipe()
    player = spawn.Process(target=play, args=(redis_url, plan, pace_s, theirs), daemon=True)
    player.start()
    sampler = Sampler(api.pid, port)
    spent: dict[str, float] = {}

    def live() -> dict[str, float]:
        sampler.start()
        api_cpu, own_cpu, wall = cpu_s(api.pid), time.process_time(), time.monotonic()
        ours.send("go")
        last_at: dict[str, float] = ours.recv()
        spent["stream_s"] = time.monotonic() - wall
        spent["api_cpu_s"] = cpu_s(api.pid) - api_cpu
        spent["bench_cpu_s"] = time.process_time() - own_cpu
        return last_at

    try:
        turns: list[str] = ours.recv()
        watchers, last_at = asyncio.run(watched(api.url, turns, plan, live))
    finally:
        sampler.halt.set()
        if sampler.is_alive():
            sampler.join()
        player.join(timeout=30)
    whole = "".join(f"tok{n} " for n in range(plan.tokens))
    broken = [w for w in watchers if w.status != 200 or w.text != whole]
    if broken:
        raise RuntimeError(f"{len(broken)} watchers did not get the whole text: {broken[0]}")
    delays = [(w.text_at - last_at[w.turn_id]) * 1000 for w in watchers]
    ns = [int(d * 1e6) for d in delays]
    return {
        "p50_ms": percentile(ns, 0.50) / 1e6,
        "p99_ms": percentile(ns, 0.99) / 1e6,
        "max_ms": max(delays),
        "connections_max": max(sampler.seen),
        "connections_samples": len(sampler.seen),
        **spent,
    }


def measure(plan: FanoutPlan) -> tuple[list[Row], dict[str, Any]]:
    """Row M3 on a redis-server and a ``dres api`` of its own; the paces alternate."""
    trials: dict[float, list[dict[str, Any]]] = {pace: [] for pace in plan.paces}
    load = {"loadavg_start": loadavg()}  # the machine is shared: its load moves the delays
    with private_redis() as server, tempfile.TemporaryDirectory(prefix="dres-bench-") as tmp:
        api = ApiProcess.start(process_env(server.url), Path(tmp) / "api.log")
        try:
            # the API's first thousand streams run code paths cold: a short trial, not counted
            trial(server.url, api, server.port, replace(plan, tokens=5), plan.paces[0])
            for _ in range(plan.trials):
                for pace in plan.paces:
                    trials[pace].append(trial(server.url, api, server.port, plan, pace))
        finally:
            api.stop()
    what = f"{plan.watchers:,} watchers of {plan.turns} streaming turns, one API process"
    rows = []
    for pace, done in trials.items():
        extra = {
            "p50_ms": statistics.median(t["p50_ms"] for t in done),
            "max_ms": max(t["max_ms"] for t in done),
            "tokens_per_turn": plan.tokens,
            "pace_s": pace,
        }
        rows.append(
            Row(f"{what}, a token each {pace * 1000:g} ms: last token -> watcher, p99", "ms",
                [t["p99_ms"] for t in done], [], extra=extra, number="M3",
                limit=DELAY_LIMIT_MS)
        )  # fmt: skip
    held = [float(t["connections_max"]) for done in trials.values() for t in done]
    rows.append(
        Row(f"{what}: Redis connections the API holds", "conn", held, [], number="M3",
            limit=CONNECTIONS_LIMIT)
    )  # fmt: skip
    load["loadavg_end"] = loadavg()
    return rows, {"plan": asdict(plan), **load, "trials": {str(p): t for p, t in trials.items()}}


GROUP = Group(
    "fanout",
    "row M3: 1,000 watchers of 100 streaming turns on one API process (issue 37)",
    measure, FULL, QUICK, __doc__,
    summary=info_line,
)  # fmt: skip
main = GROUP.main


if __name__ == "__main__":
    sys.exit(main())
