"""Row S2 of ``make bench`` (issue 16): a streamed 2,000-token answer, watched live.

A local fake provider speaks the OpenAI streaming format to the official SDK in a real worker,
watched by an SSE client of a real ``dres api``: the delay from the provider writing the last
token to the client receiving it, beside the same stream read by the same SDK without dres (the
stream alone). The provider pauses after the last token before it finishes the response, so the
delay is the recorder's (its flush window, or the quiet that ends a window early), not that of
``model_done``. Then the turn's Redis bytes per byte of
the answer's text, for the whole turn and for the text's share (the turn's bytes minus those of a
one-step short turn, S3). ``bench.scale_bench`` runs it between S1 and S3.

Row S2g (issue 37): the paced case's turns again with the worker ``dres worker -P gevent -c 1``,
its streamed text written by the process's one flusher of every run's text; their bytes per text
byte (the stream alone is not read again: the pool is the worker's, not the SDK's).
"""

from __future__ import annotations

import contextlib
import json
import statistics
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import openai

from bench.celery_worker import process_env
from bench.harness import GEVENT, Row
from bench.scale_support import ScalePlan, events_json_bytes, turn_bytes, workers
from ledger.events import Text
from rigs import ApiProcess
from rigs.providers import chunk
from worker.edges.runtime import Runtime

#: bytes of Redis per byte of streamed text, for a 2,000-token answer (issue 16)
BYTES_TARGET = 2.0
#: milliseconds from the provider's last token to an SSE client (issue 16: ~100 ms, median)
DELAY_LIMIT_MS = 50.0
#: seconds the provider waits after the last token before it ends the response
PAUSE_AFTER_LAST_S = 0.3
TOKEN = "tok "


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
    turn_id = rt.lifecycle.enqueue(
        "answer at length", mode="background", model="openai:bench-model"
    ).turn_id
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
    rt: Runtime,
    redis_url: str,
    tmp: Path,
    server: PacedProvider,
    trials: int,
    pool: tuple[str, ...] = (),
    alone: bool = True,
    **env: str,
) -> tuple[list[dict[str, float]], list[float]]:
    """``trials`` streamed turns on a worker (``pool``: more options, ``GEVENT``) and an API of
    their own, and (``alone``) as many reads of the same stream alone, alternating."""
    env = process_env(
        redis_url,
        OPENAI_BASE_URL=f"{server.url}/v1",
        OPENAI_API_KEY="fake-key",
        DRES_MODELS="openai:*",
        **env,
    )
    turns: list[dict[str, float]] = []
    direct: list[float] = []
    with workers(rt, 1, env, tmp, pool=pool):
        api = ApiProcess.start(env, tmp / f"api-{time.monotonic_ns()}.log")
        try:
            for _ in range(trials):
                turns.append(streamed_turn(rt, api.url, server))
                if alone:
                    direct.append(stream_alone(server) * 1000)
        finally:
            api.stop()
    return turns, direct


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
        on_gevent: dict[str, list[dict[str, float]]] = {}
        if plan.gevent_trials:
            on_gevent[f"{paced}, `dres worker {' '.join(GEVENT)} -c 1`"], _ = streaming_case(
                rt, redis_url, tmp, slow, plan.gevent_trials, pool=GEVENT, alone=False
            )
    rows = [
        Row(
            f"streamed {plan.tokens} tokens, {name}: provider's last token -> SSE client",
            "ms",
            [t["delay_ms"] for t in results[name]],
            alone[name],
            None,
            {"pause_after_last_s": PAUSE_AFTER_LAST_S, "case": name},
            number="S2",
            baseline="the same stream read by the SDK directly (the stream alone)",
        )
        for name in (fast_name, paced)
    ]
    # issue 27: the paced delay's own bound, in ms (the ratio above is for information)
    rows.append(
        Row(f"streamed {plan.tokens} tokens, {paced}: provider's last token -> SSE client, "
            "bound", "ms", [t["delay_ms"] for t in results[paced]], [], number="S2",
            limit=DELAY_LIMIT_MS)
    )  # fmt: skip  # fmt: skip
    return rows, {"streaming": results, "gevent": on_gevent}


def bytes_rows(
    results: dict[str, list[dict[str, float]]], short_turn: float, tokens: int, number: str = "S2"
) -> list[Row]:
    """Per streaming case: the turn's Redis bytes per text byte, whole and the text's share
    (rows ``number``: S2, or S2g for the cases on a gevent worker)."""
    rows = []
    for name, trials in results.items():
        whole = [t["redis_bytes"] / t["text_bytes"] for t in trials]
        share = [(t["redis_bytes"] - short_turn) / t["text_bytes"] for t in trials]
        extra = {k: statistics.median(t[k] for t in trials) for k in trials[0]}
        extra.update(case=name, short_turn_bytes=short_turn)
        # issue 27: at a provider's pace (100 tokens/s); issue 16 set it on "as fast as sent"
        target = BYTES_TARGET if name.startswith("paced") else None
        label = f"streamed {tokens} tokens, {name}: Redis bytes per text byte"
        base = "the answer's text bytes"
        rows += [
            Row(f"{label}, the text's share", "B/B", share, [1.0] * len(share), target, extra,
                number=number, baseline=base),
            Row(f"{label}, whole turn", "B/B", whole, [1.0] * len(whole), None, extra,
                number=number, baseline=base),
        ]  # fmt: skip
    return rows
