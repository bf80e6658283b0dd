"""The clock and id seams. Code that must resume takes these injected, never calls time or uuid."""

from __future__ import annotations

import os
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Wall-clock seconds since the epoch (for event timestamps and leases)."""

    def sleep(self, seconds: float) -> None:
        """Wait; a soft time limit may interrupt it."""


class Ids(Protocol):
    def new(self, prefix: str) -> str:
        """A new unique id such as ``run_3f2a…``."""


class SystemClock:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class RandomIds:
    def new(self, prefix: str) -> str:
        return f"{prefix}_{os.urandom(16).hex()}"  # 128 random bits, a quarter of uuid4's cost
