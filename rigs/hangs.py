"""What lets the chaos runner make a test server's write hang: a flag file, named by an
environment variable, that the next write uses up (after the number of writes it holds pass)."""

from __future__ import annotations

import os
from pathlib import Path

import anyio

#: seconds a hung answer is held back (longer than any test or trial waits)
HANG_S = 120.0


async def hang_if_asked(variable: str) -> None:
    """A write that did its work holds its answer back when the flag file ``variable`` names
    exists, once it let the number of writes the file holds pass (none when empty); the flag
    is used up."""
    flag = Path(os.environ.get(variable) or "/nonexistent")
    if not flag.exists():
        return
    passes = int(flag.read_text() or 0)
    if passes > 0:
        flag.write_text(str(passes - 1))
        return
    flag.unlink(missing_ok=True)
    await anyio.sleep(HANG_S)
