"""False takeovers (issue 27): a short lease must not make a live run look dead.

A takeover is a ``run_started`` whose cause is ``reaper`` or ``redelivery``: a run was taken for
dead and its turn resumed. It is explained when a process running the turn really died during
the trial: the trial's fault killed it (``kill_child``, ``kill_worker``, fired), or Celery
killed a pool process at its hard limit (the worker's log says ``Hard time limit``). Any other
is false: a live run whose heartbeat came late (the GIL held, a starved host, a slow Redis) lost
its turn. The worker's log also tells it from the other side: a live run that finds its lease
taken logs so (``ZOMBIE_LINES``).

``cpu_hog(n)`` runs ``n`` busy loops beside the worker for the whole chaos run (``make chaos
HOG=2``), so that the heartbeats run on a host whose cores are all busy.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.events import RunStarted

#: the causes of a run that took a turn over from a run taken for dead
TAKEOVER_CAUSES = frozenset({"reaper", "redelivery"})
#: the faults that kill a process running the turn
KILLS = frozenset({"kill_child", "kill_worker"})
#: Celery's line when it kills a pool process at its hard limit
HARD_LIMIT = "Hard time limit"
#: a live run's lines when it finds another run holds its turn (the heartbeat's, the chunk's)
ZOMBIE_LINES = (
    "lease lost: another run holds the turn",
    "another run holds the turn; this one stops writing",
)
#: a busy loop: one core's worth of load while it is scheduled; it ends on its own once its
#: parent (the runner) is gone, however that went
BUSY_LOOP = "import os\nparent = os.getppid()\nwhile os.getppid() == parent: pass"


@dataclass(frozen=True)
class Takeovers:
    """One trial's takeovers, and what explains them."""

    #: runs started to take a turn over (every turn of the trial)
    taken: int
    #: processes running a turn that died: the fault's kill, Celery's hard-limit kills
    deaths: int
    #: lines of live runs that found their turn taken
    zombies: int

    @property
    def false(self) -> int:
        """Takeovers of live runs: those no death explains, or as many as runs said so."""
        return max(self.taken - self.deaths, self.zombies, 0)


def taken_over(events: Sequence[Any]) -> int:
    return sum(1 for e in events if isinstance(e, RunStarted) and e.cause in TAKEOVER_CAUSES)


def count(taken: int, action: str, fired: bool, logs: str, runs: int = 1) -> Takeovers:
    """``taken``: takeovers in the trial's turns; ``logs``: what the workers logged in it;
    ``runs``: the runs one killed process held (a gevent worker holds every turn's)."""
    deaths = int(fired and action in KILLS) * runs + logs.count(HARD_LIMIT)
    zombies = sum(logs.count(line) for line in ZOMBIE_LINES)
    return Takeovers(taken, deaths, zombies)


class WorkerLogs:
    """What the chaos workers (``worker-*.log`` in the run's directory) logged since ``mark``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.sizes: dict[Path, int] = {}

    def mark(self) -> None:
        self.sizes = {path: path.stat().st_size for path in self.directory.glob("worker-*.log")}

    def since(self) -> str:
        new = []
        for path in sorted(self.directory.glob("worker-*.log")):
            with path.open("rb") as f:
                f.seek(self.sizes.get(path, 0))
                new.append(f.read().decode(errors="replace"))
        return "".join(new)


@contextlib.contextmanager
def cpu_hog(processes: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``processes`` busy loops for the block, killed (and reaped) when it ends, however."""
    hogs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(processes):
            hogs.append(subprocess.Popen([sys.executable, "-c", BUSY_LOOP]))
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()
