"""A worker started while its Redis is away waits for it (docs/commands.md): one line per
look, naming the (masked) URL, with a backoff, as a running worker rides out a lost Redis
(docs/faults.md); then it starts as usual. Not Celery's own connection retries: they print a
block per attempt, for minutes, and name the broker only."""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

from worker.base.masking import mask_url
from worker.base.settings import Settings
from worker.edges.redis.policy import Reading, read_stores

log = structlog.get_logger("dres.store")

#: seconds before the second look at a Redis that is away; doubled after each miss
FIRST_WAIT_S = 1.0
#: seconds between looks at most
WAIT_CAP_S = 10.0


def store_url(settings: Settings, reading: Reading) -> str:
    """The URL a person set for the Redis of ``reading`` (the ledger's, the broker's), masked."""
    return mask_url(settings.redis_url if reading.store == "ledger" else settings.broker)


def wait_for_stores(
    settings: Settings, *, sleep: Callable[[float], None] = time.sleep
) -> list[Reading]:
    """Look at every Redis (``read_stores``) until each answers; the readings of the look that
    found them all. Each look that finds one away logs one warning."""
    wait = FIRST_WAIT_S
    attempt = 1
    while True:
        readings = read_stores(settings)
        away = [r for r in readings if not r.reached]
        if not away:
            return readings
        log.warning(
            "Redis unreachable: waiting for it",
            url=", ".join(store_url(settings, r) for r in away),
            attempt=attempt,
            retry_in_s=wait,
            error=away[0].error,
        )
        sleep(wait)
        wait = min(wait * 2, WAIT_CAP_S)
        attempt += 1
