"""The Redis backends the ledger tests run on (see the ``backend`` fixture)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import redis


@dataclass
class Backend:
    """A Redis backend for the ledger tests; ``connect()`` opens another connection to it."""

    name: str
    connect: Callable[[], redis.Redis]
