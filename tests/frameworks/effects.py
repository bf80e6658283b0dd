"""What the tests' framework agents' writes do besides answering: each effect is a line in the
file ``DRES_TEST_EFFECTS`` names, so a test counts them whatever process ran the tool; the first
one may be cut by a soft limit: ``DRES_TEST_SOFT_LIMIT=signal`` sends this process SIGUSR1 (an
in-process test's simulated soft limit), ``=sleep:S`` sleeps S seconds (past a real worker's)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def effect(line: str) -> None:
    path = os.environ.get("DRES_TEST_EFFECTS")
    if not path:
        return
    with Path(path).open("a", encoding="utf-8") as f:
        f.write(line + "\n")
    cut = os.environ.get("DRES_TEST_SOFT_LIMIT", "")
    if len(Path(path).read_text(encoding="utf-8").splitlines()) == 1:
        if cut == "signal":
            os.kill(os.getpid(), signal.SIGUSR1)
        elif cut.startswith("sleep:"):
            time.sleep(float(cut.removeprefix("sleep:")))
