"""The API's ``GET /metrics`` (docs/http-api.md): Prometheus text.

It serves the turns the API can see in Redis, read from the reaper's index of unfinished turns
(``ledger.keys.active_turns``) in two round trips however many turns there are, with at most
``TURNS_LOOKED_AT`` statuses read per scrape; then the API process's own metrics, among them
the names of ``worker.base.metrics``. Those count what this process did, which is little of it
(the approval decisions, Stops and supersedes it took): turns end, tools run and chunks hand
over on the workers, which serve their counts on ``DRES_METRICS_PORT``; a query sums them over
every process scraped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import redis
import redis.asyncio as aioredis
from fastapi import Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from ledger import keys
from ledger.codec import text
from ledger.turn import TurnStatus
from worker.base import metrics

#: unfinished turns whose status one scrape reads (the index's count is always exact)
TURNS_LOOKED_AT = 10_000
#: the statuses of an unfinished turn
UNFINISHED = (TurnStatus.QUEUED, TurnStatus.RUNNING, TurnStatus.RESUMING, TurnStatus.WAITING)


class TurnCounts:
    """The turns a scrape read from Redis, as gauges."""

    def __init__(self, indexed: int, statuses: Iterable[str]) -> None:
        self.indexed = indexed
        self.by_status = Counter(statuses)

    def collect(self) -> Iterable[Metric]:
        turns = GaugeMetricFamily(
            "dres_turns",
            f"Unfinished turns by status (of the first {TURNS_LOOKED_AT} in the reaper's index)",
            labels=["status"],
        )
        for status in UNFINISHED:
            turns.add_metric([status.value], self.by_status[status.value])
        yield turns
        yield GaugeMetricFamily(
            "dres_turns_indexed",
            "Turns in the reaper's index of unfinished turns (an ended one leaves it soon)",
            value=self.indexed,
        )


async def turn_counts(reader: aioredis.Redis) -> TurnCounts:
    index = keys.active_turns()
    async with reader.pipeline(transaction=False) as pipe:
        pipe.zcard(index)
        pipe.zrange(index, 0, TURNS_LOOKED_AT - 1)
        indexed, turn_ids = await pipe.execute()
    async with reader.pipeline(transaction=False) as pipe:
        for turn_id in turn_ids:
            pipe.hget(keys.turn_meta(text(turn_id)), "status")
        statuses = await pipe.execute() if turn_ids else []
    return TurnCounts(int(indexed), (text(s) for s in statuses if s is not None))


async def serve_metrics(request: Request) -> Response:
    """Prometheus text: the turns in Redis, then this process's metrics."""
    try:
        counts = await turn_counts(request.app.state.reader)
    except redis.RedisError as e:
        return JSONResponse({"detail": f"cannot reach Redis: {e}"}, 503)
    metrics.get()  # the names of docs/http-api.md, at zero until this process counts one
    body = generate_latest(counts) + generate_latest(REGISTRY)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
