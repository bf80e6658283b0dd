"""Issue 16's rows of ``make bench``: what one more worker buys, and what a turn costs in Redis.

S1. Throughput with one worker process vs two: N short turns (background mode; a scripted model
    answering at once) enqueued by this process as fast as it can, once to one ``dres worker
    -c 1`` and once to two of them on the same queues (two hosts' workers, as far as one machine
    shows it); turns/s from the first enqueue to the last ``turn_ended`` ``ts``, and the p99 of
    each turn's ``turn_started`` -> ``turn_ended`` (``ts``; a burst queues, so it grows with N).
S2. A streamed 2,000-token answer (4-character tokens, 8 KB) from a local fake provider speaking
    the OpenAI streaming format to the official SDK in a real worker, watched by an SSE client of
    a real ``dres api``: the delay from the provider writing the last token to the client
    receiving it, beside the same stream read by the same SDK without dres (the stream
    alone). The provider pauses after the last token before it finishes the response, so the
    delay is the flush window's, not that of ``model_done``. Then the turn's Redis bytes
    (``MEMORY USAGE`` of its keys) per byte of the answer's text, for the whole turn and for the
    text's share (the turn's bytes minus those of a one-step short turn, S3), and its ``text``
    events; once as fast as the provider can send, once at a provider's pace, and once with
    ``DRES_TEXT_FLUSH_MS=0`` (one event per delta, as before coalescing).
S3. Redis per recorded tool call and per ended turn (``MEMORY USAGE`` of the turn's keys) beside
    the raw size of its events' JSON, and what ``finished_ttl_s`` keeps at a million turns a day.

Every group runs on the private redis-server ``python -m bench`` hands it. Run alone:
``python -m bench --only scale [--quick] [--turns N]``.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import openai

from bench.celery_bench import WORKER_ARGS, bench_settings, throughput_script, worker_env
from bench.celery_bench import wait_turns as wait_ended
from bench.ledger_bench import Row
from ledger import keys
from ledger.events import Text, TurnEnded, TurnStarted
from tests.support import ROOT, ApiProcess, WorkerProcess, write_script
from tests.support.providers import chunk
from worker.edges.client import enqueue
from worker.edges.runtime import Runtime

#: bytes of Redis per byte of streamed text, for a 2,000-token answer (issue 16)
BYTES_TARGET = 2.0
#: milliseconds from the provider's last token to an SSE client (issue 16: ~100 ms, median)
DELAY_LIMIT_MS = 100.0
#: seconds the provider waits after the last token before it ends the response
PAUSE_AFTER_LAST_S = 0.3
TOKEN = "tok "
MILLION = 1_000_000


@dataclass(frozen=True)
class ScalePlan:
    #: short turns per throughput round, and rounds (each: one worker, then two)
    turns: int
    rounds: int
    #: tokens of the streamed answer, trials per streaming case, seconds between paced tokens
    tokens: int
    trials: int
    pace_s: float
    #: turns measured per cost case, tool calls of a tool turn
    cost_turns: int
    calls: int


FULL = ScalePlan(turns=1000, rounds=2, tokens=2000, trials=3, pace_s=0.01, cost_turns=20, calls=10)
QUICK = ScalePlan(turns=100, rounds=1, tokens=2000, trials=1, pace_s=0.005, cost_turns=5, calls=5)


# -- processes ----------------------------------------------------------------------------------


def process_env(redis_url: str, **extra: str) -> dict[str, str]:
    env = {**os.environ, **worker_env(redis_url), **extra}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    return env


@contextlib.contextmanager
def workers(rt: Runtime, count: int, env: dict[str, str], tmp: Path) -> Iterator[None]:
    """``count`` workers of one pool process each, ready when each answers a ping."""
    names = [f"scale{i}-{os.getpid()}@bench" for i in range(count)]
    started: list[WorkerProcess] = []
    try:
        for name in names:
            log = tmp / f"{name}-{time.monotonic_ns()}.log"
            extra = (*WORKER_ARGS, "-n", name)
            started.append(WorkerProcess.start(env, log, concurrency=1, extra=extra, ready=False))
        deadline = time.monotonic() + 90
        while True:
            replies = rt.app.control.ping(timeout=0.5) or []
            if set(names) <= {name for reply in replies for name in reply}:
                break
            if time.monotonic() > deadline:
                logs = "\n".join(w.log()[-2000:] for w in started)
                raise TimeoutError(f"workers {names} did not answer a ping:\n{logs}")
        yield
    finally:
        for worker in started:
            worker.stop()


def turn_bytes(rt: Runtime, turn_id: str) -> int:
    """``MEMORY USAGE`` (every element sampled) of the keys of one turn."""
    names = (keys.turn_events(turn_id), keys.turn_meta(turn_id), keys.turn_cancel(turn_id))
    return sum(int(rt.redis.memory_usage(name, samples=0) or 0) for name in names)


def events_json_bytes(rt: Runtime, turn_id: str) -> int:
    """The raw size of the turn's events: their JSON payloads as stored."""
    entries = rt.redis.xrange(keys.turn_events(turn_id))
    return sum(len(fields[b"e"]) for _, fields in entries)


# -- S1 and S3: short turns on one or two workers -------------------------------------------------


def turn_batch(rt: Runtime, model: str, turns: int) -> tuple[float, float]:
    """(turns/s, p99 seconds turn_started -> turn_ended) of ``turns`` turns enqueued at once."""
    t0 = time.time()
    ids = [enqueue(rt, f"short {i}", mode="background", model=model).turn_id for i in range(turns)]
    wait_ended(rt, ids, 120 + turns * 1.0)
    last, latencies = 0.0, []
    for turn_id in ids:
        events = rt.ledger.events(turn_id)
        start, end = events[0], events[-1]
        assert isinstance(start, TurnStarted) and isinstance(end, TurnEnded), turn_id
        last = max(last, end.ts)
        latencies.append(end.ts - start.ts)
    return turns / (last - t0), statistics.quantiles(latencies, n=100)[98]


def measure_throughput(
    rt: Runtime, env: dict[str, str], tmp: Path, plan: ScalePlan
) -> tuple[list[Row], dict[str, Any]]:
    model = write_script(tmp / "short.json", [{"text": "done"}])
    rates: dict[int, list[float]] = {1: [], 2: []}
    p99s: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(plan.rounds):
        for count in (1, 2):
            with workers(rt, count, env, tmp):
                turn_batch(rt, model, 10)  # warm-up: imports, connections
                rate, p99 = turn_batch(rt, model, plan.turns)
            rates[count].append(rate)
            p99s[count].append(p99 * 1000)
    base = f"one dres worker (-c 1), {plan.turns} short turns"
    extra = {"turns": plan.turns, "rounds": plan.rounds}
    rows = [
        Row("turns/s, two workers vs one", "turns/s", rates[2], rates[1], None, extra,
            higher_is_better=True, number="S1", baseline=base),
        Row("p99 turn_started -> turn_ended, two workers vs one", "ms", p99s[2], p99s[1], None,
            extra, number="S1", baseline=base),
    ]  # fmt: skip
    return rows, {"turns_per_s": rates, "p99_ms": p99s}


def measure_costs(
    rt: Runtime, env: dict[str, str], tmp: Path, plan: ScalePlan
) -> tuple[list[Row], dict[str, Any]]:
    short = write_script(tmp / "cost-short.json", [{"text": "done"}])
    tools = write_script(tmp / "cost-tools.json", throughput_script(plan.calls))
    with workers(rt, 1, env, tmp):
        cases = {}
        for name, model in (("short", short), ("tools", tools)):
            ids = [
                enqueue(rt, "what does a turn cost", mode="background", model=model).turn_id
                for _ in range(plan.cost_turns)
            ]
            wait_ended(rt, ids, 120)
            cases[name] = ids
    mem = {k: [float(turn_bytes(rt, t)) for t in ids] for k, ids in cases.items()}
    raw = {k: [float(events_json_bytes(rt, t)) for t in ids] for k, ids in cases.items()}
    per_call = [(t - s) / plan.calls for t, s in zip(mem["tools"], mem["short"], strict=True)]
    raw_call = [(t - s) / plan.calls for t, s in zip(raw["tools"], raw["short"], strict=True)]
    ttl_days = rt.settings.finished_ttl_s / 86400
    held_gb = statistics.median(mem["short"]) * MILLION * ttl_days / 1e9
    extra = {
        "turns": plan.cost_turns,
        "calls": plan.calls,
        "finished_ttl_days": ttl_days,
        "gb_held_per_million_short_turns_a_day": held_gb,
        "events_per_short_turn": rt.redis.xlen(keys.turn_events(cases["short"][0])),
    }
    rows = [
        Row("Redis per recorded tool call", "B", per_call, raw_call, None, extra,
            number="S3", baseline="its events' JSON (tool_start + tool_done)"),
        Row("Redis per ended short turn", "B", mem["short"], raw["short"], None, extra,
            number="S3", baseline="its events' JSON"),
    ]  # fmt: skip
    return rows, extra


# -- S2: a streamed answer ------------------------------------------------------------------------


class PacedProvider(ThreadingHTTPServer):
    """The OpenAI chat-completions stream of ``tokens``, one chunk each ``pace_s``; it starts
    when ``go`` is set and notes when the last token left (``last_token_at``, ``time.time()``)."""

    daemon_threads = True

    def __init__(self, tokens: int, pace_s: float) -> None:
        super().__init__(("127.0.0.1", 0), _PacedHandler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.tokens, self.pace_s = tokens, pace_s
        self.go = threading.Event()
        self.last_token_at = 0.0

    def reset(self) -> None:
        """Before a trial: hold the next stream until ``go``."""
        self.go.clear()
        self.last_token_at = 0.0

    def body(self) -> Iterator[bytes]:
        for i in range(self.tokens):
            if i and self.pace_s:
                time.sleep(self.pace_s)
            yield f"data: {json.dumps(chunk({'content': TOKEN}))}\n\n".encode()
        yield b""  # the last token has been written
        time.sleep(PAUSE_AFTER_LAST_S)
        yield f"data: {json.dumps(chunk({}, finish='stop'))}\n\ndata: [DONE]\n\n".encode()


class _PacedHandler(BaseHTTPRequestHandler):
    server: PacedProvider

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.go.wait(60)
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for part in self.server.body():
            if part:
                self.wfile.write(part)
                self.wfile.flush()
            else:
                self.server.last_token_at = time.time()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@contextlib.contextmanager
def provider(tokens: int, pace_s: float) -> Iterator[PacedProvider]:
    server = PacedProvider(tokens, pace_s)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.go.set()
        server.shutdown()
        server.server_close()


def stream_alone(server: PacedProvider) -> float:
    """Seconds from the last token's write to its receipt by the official SDK reading the same
    stream directly (what a worker's model adapter gets, without dres)."""
    total = len(TOKEN) * server.tokens
    server.reset()
    server.go.set()
    got = 0
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="fake-key", max_retries=0)
    with client:
        stream = client.chat.completions.create(
            model="bench-model", messages=[{"role": "user", "content": "go"}], stream=True
        )
        for part in stream:
            got += len(part.choices[0].delta.content or "") if part.choices else 0
            if got >= total:
                return time.time() - server.last_token_at
    raise RuntimeError("the provider's stream ended early")


def streamed_turn(rt: Runtime, api_url: str, server: PacedProvider) -> dict[str, float]:
    """One turn of a streamed answer watched over SSE: its delay, events and Redis bytes."""
    total = len(TOKEN) * server.tokens
    server.reset()
    turn_id = enqueue(rt, "answer at length", mode="background", model="openai:bench-model").turn_id
    got, received_at, event = 0, 0.0, ""
    with (
        httpx.Client(timeout=120) as http,
        http.stream("GET", f"{api_url}/v1/turns/{turn_id}/events") as response,
    ):
        for line in response.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif not line.startswith("data:"):
                continue
            elif event == "model_start":
                server.go.set()  # the watcher is live: the provider may start
            elif event == "text":
                got += len(json.loads(line[5:])["text"])
                if got >= total and not received_at:
                    received_at = time.time()
            elif event == "turn_ended":
                break
    if got != total or not server.last_token_at:
        raise RuntimeError(f"the watcher saw {got} of {total} characters")
    events = rt.ledger.events(turn_id)
    texts = [e for e in events if isinstance(e, Text)]
    return {
        "delay_ms": (received_at - server.last_token_at) * 1000,
        "text_events": len(texts),
        "events": len(events),
        "redis_bytes": turn_bytes(rt, turn_id),
        "text_bytes": sum(len(e.text.encode()) for e in texts),
        "json_bytes": events_json_bytes(rt, turn_id),
    }


def streaming_case(
    rt: Runtime, redis_url: str, tmp: Path, server: PacedProvider, trials: int, **env: str
) -> tuple[list[dict[str, float]], list[float]]:
    """``trials`` streamed turns on a worker and an API of their own, and as many reads of the
    same stream alone, alternating."""
    env = process_env(
        redis_url,
        OPENAI_BASE_URL=f"{server.url}/v1",
        OPENAI_API_KEY="fake-key",
        DRES_MODELS="openai:*",
        **env,
    )
    turns: list[dict[str, float]] = []
    alone: list[float] = []
    with workers(rt, 1, env, tmp):
        api = ApiProcess.start(env, tmp / f"api-{time.monotonic_ns()}.log")
        try:
            for _ in range(trials):
                turns.append(streamed_turn(rt, api.url, server))
                alone.append(stream_alone(server) * 1000)
        finally:
            api.stop()
    return turns, alone


def measure_streaming(
    rt: Runtime, redis_url: str, tmp: Path, plan: ScalePlan
) -> tuple[list[Row], dict[str, Any]]:
    paced = f"paced {plan.pace_s * 1000:g} ms/token"
    results: dict[str, list[dict[str, float]]] = {}
    alone: dict[str, list[float]] = {}
    fast_name = "as fast as sent"
    with provider(plan.tokens, 0.0) as fast, provider(plan.tokens, plan.pace_s) as slow:
        for name, server, trials in ((fast_name, fast, plan.trials), (paced, slow, plan.trials)):
            results[name], alone[name] = streaming_case(rt, redis_url, tmp, server, trials)
        results["DRES_TEXT_FLUSH_MS=0"], _ = streaming_case(
            rt, redis_url, tmp, fast, 1, DRES_TEXT_FLUSH_MS="0"
        )
    rows = [
        Row(f"streamed {plan.tokens} tokens, {name}: provider's last token -> SSE client", "ms",
            [t["delay_ms"] for t in results[name]], alone[name], None,
            {"pause_after_last_s": PAUSE_AFTER_LAST_S, "case": name}, number="S2",
            baseline="the same stream read by the SDK directly (the stream alone)")
        for name in (fast_name, paced)
    ]  # fmt: skip
    return rows, {"streaming": results}


# -- all of them ----------------------------------------------------------------------------------


def measure(redis_url: str, plan: ScalePlan) -> tuple[list[Row], dict[str, Any]]:
    """Rows S1-S3 against the Redis at ``redis_url`` (workers and an API started here)."""
    rt = Runtime.from_settings(bench_settings(redis_url))
    info: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="dres-scale-") as name:
            tmp = Path(name)
            env = process_env(redis_url)
            rows, info["throughput"] = measure_throughput(rt, env, tmp, plan)
            streaming, info["streaming"] = measure_streaming(rt, redis_url, tmp, plan)
            costs, info["costs"] = measure_costs(rt, env, tmp, plan)
    finally:
        rt.redis.close()
    short = statistics.median(costs[-1].dres)
    streaming += bytes_rows(info["streaming"]["streaming"], short, plan.tokens)
    return [*rows, *streaming, *costs], info


def bytes_rows(
    results: dict[str, list[dict[str, float]]], short_turn: float, tokens: int
) -> list[Row]:
    """Per streaming case: the turn's Redis bytes per text byte, whole and the text's share."""
    rows = []
    for name, trials in results.items():
        whole = [t["redis_bytes"] / t["text_bytes"] for t in trials]
        share = [(t["redis_bytes"] - short_turn) / t["text_bytes"] for t in trials]
        extra = {k: statistics.median(t[k] for t in trials) for k in trials[0]}
        extra.update(case=name, short_turn_bytes=short_turn)
        target = BYTES_TARGET if name == "as fast as sent" else None
        label = f"streamed {tokens} tokens, {name}: Redis bytes per text byte"
        base = "the answer's text bytes"
        rows += [
            Row(f"{label}, the text's share", "B/B", share, [1.0] * len(share), target, extra,
                number="S2", baseline=base),
            Row(f"{label}, whole turn", "B/B", whole, [1.0] * len(whole), None, extra,
                number="S2", baseline=base),
        ]  # fmt: skip
    return rows


def plan_for(quick: bool, turns: int | None) -> ScalePlan:
    plan = QUICK if quick else FULL
    return plan if turns is None else replace(plan, turns=turns)
